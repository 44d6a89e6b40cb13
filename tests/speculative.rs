//! Drafted greedy decoding gives exactly the tokens of plain greedy decoding, on prompts where
//! drafts are accepted and where they are rejected, for every architecture with test data.

mod runner_data;

use std::path::Path;

use t2p::runner::LoadOptions;
use t2p::runner::generate::Decoder;
use t2p::runner::model::{Exec, Loaded, Model};
use t2p::runner::sample::{Sampler, SamplerConfig};
use t2p::runner::speculative::{DraftStats, Drafting, LookupConfig};

fn plain(l: &Loaded, exec: &Exec, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = l.model.new_session(prompt.len() + n + 8);
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 0.0,
        ..Default::default()
    });
    let mut out = Vec::new();
    Decoder::new(&l.model, exec, &mut s, 512)
        .generate(
            prompt,
            n,
            &mut sampler,
            |id| l.tokenizer.is_eog(id),
            |id| {
                out.push(id);
                true
            },
        )
        .unwrap();
    out
}

fn drafted(
    l: &Loaded,
    exec: &Exec,
    prompt: &[u32],
    n: usize,
    max_draft: usize,
) -> (Vec<u32>, DraftStats) {
    let mut s = l.model.new_session(prompt.len() + n + 8);
    let cfg = LookupConfig {
        max_draft,
        ..Default::default()
    };
    let mut out = Vec::new();
    let (_, d) = Decoder::new(&l.model, exec, &mut s, 512)
        .generate_lookup(
            prompt,
            n,
            &cfg,
            |id| l.tokenizer.is_eog(id),
            |id| {
                out.push(id);
                true
            },
        )
        .unwrap();
    (out, d)
}

fn check(path: &Path, prompt: &str, n: usize) -> DraftStats {
    let l = Model::load(path, &LoadOptions::default()).unwrap();
    let exec = Exec::new(2);
    let ids = l.tokenizer.encode(prompt, true, true);
    let want = plain(&l, &exec, &ids, n);
    let mut total = DraftStats::default();
    for max_draft in [1, 3, 7] {
        let (got, d) = drafted(&l, &exec, &ids, n, max_draft);
        assert_eq!(got, want, "{}: max_draft {max_draft}", path.display());
        total.drafted += d.drafted;
        total.accepted += d.accepted;
    }
    // A drafter that knows the answer but corrupts every third draft: both the accepting and
    // the rejecting path (with KV truncation or recurrent rollback) run on every model.
    let mut calls = 0;
    let oracle = |context: &[u32], max: usize| {
        calls += 1;
        let p = context.len() - ids.len();
        let mut d: Vec<u32> = want.iter().skip(p).take(max).copied().collect();
        if calls % 3 == 0 && d.len() > 1 {
            d[1] = d[1].wrapping_add(1) % l.model.n_vocab() as u32;
        }
        d
    };
    let mut s = l.model.new_session(ids.len() + n + 8);
    let mut got = Vec::new();
    let drafting = Drafting {
        draft: oracle,
        max_draft: 3,
        policy: None,
    };
    let (_, d) = Decoder::new(&l.model, &exec, &mut s, 512)
        .generate_drafted(
            &ids,
            n,
            drafting,
            |id| l.tokenizer.is_eog(id),
            |id| {
                got.push(id);
                true
            },
        )
        .unwrap();
    assert_eq!(got, want, "{}: oracle drafter", path.display());
    assert!(
        d.accepted > 0 && d.accepted < d.drafted,
        "{}: oracle drafts {d:?}",
        path.display()
    );
    eprintln!(
        "{}: lookup drafts: {} of {} accepted; oracle drafts {} of {}",
        path.display(),
        total.accepted,
        total.drafted,
        d.accepted,
        d.drafted
    );
    total
}

#[test]
fn drafting_never_changes_greedy_output() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    // A story that repeats its names: drafts are accepted.
    let d = check(
        &dir.join("stories260K/stories260K.gguf"),
        "Once upon a time, there was a little girl named Lily. Lily loved to play. One day, Lily",
        120,
    );
    assert!(
        d.accepted > 0,
        "no draft was accepted, the accepting path was not exercised"
    );
    assert!(d.accepted < d.drafted, "no draft was rejected");
    // A random-weight model: drafts are mostly rejected.
    let d = check(
        &dir.join("qwen3-tiny/qwen3-tiny-pq2_0.gguf"),
        "a b a b a b a b a b a",
        24,
    );
    assert!(
        d.drafted > d.accepted,
        "the rejecting path was not exercised"
    );
    check(
        &dir.join("qwen35-tiny/qwen35-tiny-pq2_0.gguf"),
        "a b a b a b a b a b a",
        24,
    );
}
