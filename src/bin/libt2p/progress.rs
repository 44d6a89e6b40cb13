//! The loader's progress, drawn as a bar on stderr when stderr is a terminal.

use std::io::IsTerminal;
use std::sync::Arc;

use t2p::runner::{LoadProgress, ProgressFn};

/// A [`ProgressFn`] that draws `loading [bar] bytes/total (rate)` on stderr and clears it when
/// the load is done; `None` when stderr is not a terminal (or `quiet`), so logs stay clean.
pub fn load_bar(quiet: bool) -> Option<ProgressFn> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "loading {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}) {msg}",
    ) {
        pb.set_style(style);
    }
    Some(Arc::new(move |p: LoadProgress| {
        pb.set_length(p.total_bytes);
        pb.set_position(p.done_bytes);
        if p.done_bytes >= p.total_bytes {
            pb.finish_and_clear();
        }
    }))
}
