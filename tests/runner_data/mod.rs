//! Where the shared test data lives, for the runner tests.
//!
//! `T2P_TESTDATA` names the directory; by default it is `<crate>/../shared/testdata`. A missing
//! directory fails the test with a clear message, unless `T2P_TESTDATA_OPTIONAL=1`, in which
//! case the test prints a loud SKIPPED line and passes.

#![allow(dead_code)]

use std::path::PathBuf;

/// The test data directory, or `None` (after printing SKIPPED) when it is missing and
/// `T2P_TESTDATA_OPTIONAL=1`. Panics with instructions when it is missing otherwise.
pub fn testdata() -> Option<PathBuf> {
    let dir = std::env::var_os("T2P_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    if std::env::var("T2P_TESTDATA_OPTIONAL").as_deref() == Ok("1") {
        eprintln!(
            "\n==================== SKIPPED: testdata not found at {} ====================\n",
            dir.display()
        );
        println!("SKIPPED: testdata not found at {}", dir.display());
        return None;
    }
    panic!(
        "test data not found at {} (set T2P_TESTDATA to the shared/testdata directory, or \
         T2P_TESTDATA_OPTIONAL=1 to skip these tests)",
        dir.display()
    );
}

/// Every GGUF file of the shared test data, sorted.
pub fn all_ggufs(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "gguf") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Parses a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Whether the tests run under an emulator: `T2P_EMULATED=1`, which `tests/aarch64-runs.sh`
/// sets for its qemu runs (qemu runs this code 20-35x slower than native). The few tests that
/// are too long for CI's time under emulation size themselves down or skip with
/// [`skip_when_emulated`]; a plain `cargo test --target aarch64-unknown-linux-gnu` runs them all.
pub fn emulated() -> bool {
    std::env::var("T2P_EMULATED").as_deref() == Ok("1")
}

/// `true` (after printing a SKIPPED line with `why`) when [`emulated`]: the caller returns.
pub fn skip_when_emulated(what: &str, why: &str) -> bool {
    if emulated() {
        eprintln!("SKIPPED under emulation (T2P_EMULATED=1): {what}: {why}");
        println!("SKIPPED under emulation: {what}");
    }
    emulated()
}
