//! Arbitrary bytes as the body of a completion request: every parser the server runs on a body
//! (the JSON object, the shared fields of both endpoints, prompt, messages, tools, the
//! structured-output fields and the tool-call grammar) must answer `Ok` or an `ApiError`,
//! never panic. The text also goes through the GBNF translator and the tool-call splitter,
//! which see client text too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use t2p::runner::constrain::gbnf_to_lark;
use t2p::runner::server::api::{self, Kind};
use t2p::runner::server::tools::{self, CallSplitter};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gbnf_to_lark(text);
        let _ = tools::split_answer(text);
        let mut s = CallSplitter::default();
        let mut out = Vec::new();
        for piece in text.split_inclusive('>') {
            s.push(piece, &mut out);
        }
        s.finish(&mut out);
    }
    let Ok(m) = api::parse_object(data) else {
        return;
    };
    for kind in [Kind::Text, Kind::Chat] {
        let _ = api::parse_common(&m, kind, 4096, 151_936);
    }
    let _ = api::parse_prompt(&m, 151_936);
    let _ = api::parse_messages(&m);
    if let Ok(Some(t)) = api::parse_tools(&m) {
        let _ = tools::call_grammar(&t);
    }
});
