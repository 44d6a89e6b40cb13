//! Shared checks against the llama.cpp references in the shared test data: loading, the JSON
//! files, greedy decoding as llama-completion does it, and the README's teacher-forced check.
//! A test that includes this module includes `runner_data` too.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use t2p::matmul::ActQuant;
use t2p::runner::LoadOptions;
use t2p::runner::model::{Exec, Loaded, Logits, Model, Session};
use t2p::runner::sample::argmax;

pub fn load(path: &Path) -> Loaded {
    Model::load(path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The model `<testdata>/<folder>/<file>`, with the folder: `None` when the test data is
/// missing and optional.
pub fn load_from_testdata(folder: &str, file: &str) -> Option<(PathBuf, Loaded)> {
    crate::runner_data::open_in_testdata(folder, file, load)
}

/// The largest `|a - b|` over the pairs of `a` and `b` (0 for none).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// The largest `|x|` of `a` (0 for none).
pub fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

pub fn json(path: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn floats(v: &Json) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

pub fn read_ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect()
}

/// The little-endian f32 values of the file at `path` (the references' `.f32le.bin` logits).
pub fn read_f32le(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A copy of the logits `m` leaves in `s` after `tokens` (the `rows` asked for).
pub fn logits_of(
    m: &Model,
    exec: &Exec,
    s: &mut Session,
    tokens: &[u32],
    rows: Logits,
) -> Vec<f32> {
    m.forward_one(exec, s, tokens, rows).unwrap().to_vec()
}

/// Greedy decoding as llama-completion does it: the prompt in one batch, then one token a call.
pub fn greedy(l: &Loaded, exec: &Exec, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = l.model.new_session(prompt.len() + n);
    let mut logits = logits_of(&l.model, exec, &mut s, prompt, Logits::Last);
    let mut out = Vec::new();
    for _ in 0..n {
        let id = argmax(&logits);
        out.push(id);
        if out.len() == n || l.tokenizer.is_eog(id) {
            break;
        }
        logits = logits_of(&l.model, exec, &mut s, &[id], Logits::Last);
    }
    out
}

/// The README's teacher-forced check: prompt + reference tokens in one batch; the argmax must
/// equal the reference wherever the reference margin is at least `margin`, and the reference
/// top-10 logits must agree within `tol`. Returns the number of leading steps whose margins are
/// all >= `margin` (free-running greedy must reproduce those exactly).
pub fn teacher_forced(
    l: &Loaded,
    exec: &Exec,
    r: &Json,
    what: &str,
    margin: f32,
    tol: f32,
) -> usize {
    let prompt = ids(&r["prompt_ids"]);
    let generated = ids(&r["generated_ids"]);
    let all: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
    let mut s = l.model.new_session(all.len());
    let logits = logits_of(&l.model, exec, &mut s, &all, Logits::All);
    let nv = l.model.n_vocab();
    let mut wide_prefix = None;
    let (mut worst, mut checked, mut agree, mut flips) = (0.0f32, 0, 0, Vec::new());
    for (i, step) in r["steps"].as_array().unwrap().iter().enumerate() {
        let row = &logits[(prompt.len() - 1 + i) * nv..(prompt.len() + i) * nv];
        let top = floats(&step["top_logits"]);
        let m = top[0] - top[1];
        let same = argmax(row) == generated[i];
        agree += same as usize;
        if m >= margin {
            checked += 1;
            if !same {
                flips.push((i, m));
            }
        } else if wide_prefix.is_none() {
            wide_prefix = Some(i);
        }
        for (&id, &v) in ids(&step["top_ids"]).iter().zip(&top) {
            worst = worst.max((row[id as usize] - v).abs());
        }
    }
    eprintln!(
        "{what}: argmax = reference at {agree}/{} steps ({checked} with margin >= {margin} checked, flipped: {flips:?}); worst top-10 logit difference {worst:.5}",
        generated.len()
    );
    assert!(
        flips.is_empty(),
        "{what}: argmax differs at (step, reference margin) {flips:?}"
    );
    assert!(worst < tol, "{what}: top-10 logits differ by {worst}");
    wide_prefix.unwrap_or(generated.len())
}

/// Two threads with llama.cpp's numerics for pq2_0: `q8_0` activations (the references were
/// made with them; models held as f32 do not quantize activations at all).
pub fn reference_exec() -> Exec {
    Exec::new(2).with_act(ActQuant::Q8_0)
}

/// Tokenization, teacher-forced check and free-running greedy of the three prompts against the
/// references of one semantics (`greedy/<prompt>.<semantics>.json`).
pub fn check_prompts(
    l: &Loaded,
    dir: &Path,
    prompts: &[&str],
    semantics: &str,
    margin: f32,
    tol: f32,
) {
    let exec = reference_exec();
    let folder = dir.file_name().unwrap_or_default().to_string_lossy();
    for p in prompts {
        let r = json(&dir.join(format!("greedy/{p}.{semantics}.json")));
        let text = std::fs::read_to_string(dir.join(format!("prompts/{p}.txt"))).unwrap();
        let prompt = ids(&r["prompt_ids"]);
        assert_eq!(
            l.tokenizer.encode(&text, true, true),
            prompt,
            "{folder} {p}: tokenization"
        );
        let what = format!("{folder} {p} ({semantics})");
        let wide = teacher_forced(l, &exec, &r, &what, margin, tol);
        let want = ids(&r["generated_ids"]);
        let got = greedy(l, &exec, &prompt, want.len());
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        eprintln!(
            "{what}: free-running greedy identical for {same}/{} tokens (first reference margin < {margin} at step {wide})",
            want.len()
        );
        // A run that stopped early (end of generation) is shorter than the prefix: it fails.
        assert_eq!(
            got[..wide.min(got.len())],
            want[..wide],
            "{what}: free-running greedy before the first narrow margin"
        );
    }
}

/// The tokens of `dir/ppl-text.txt`, which must equal the reference's `ppl-text.ids.txt`.
pub fn perplexity_ids(l: &Loaded, dir: &Path, what: &str) -> Vec<u32> {
    checked_tokens(
        l,
        &dir.join("ppl-text.txt"),
        true,
        &dir.join("ppl-text.ids.txt"),
        what,
    )
}

/// The tokens of the text file `text` (BOS where the model adds one; special tokens written in
/// the text parsed as such if `parse_special`), which must equal the ids of the file `want`.
pub fn checked_tokens(
    l: &Loaded,
    text: &Path,
    parse_special: bool,
    want: &Path,
    what: &str,
) -> Vec<u32> {
    let text = std::fs::read_to_string(text).unwrap();
    let ids = l.tokenizer.encode(&text, true, parse_special);
    assert_eq!(
        ids,
        read_ids(want),
        "{what}: tokenization of the perplexity text"
    );
    ids
}

/// Perplexity of `dir/ppl-text.txt` with 128-token chunks: the tokenization must equal
/// `ppl-text.ids.txt`, there must be `n_chunks` chunks, and the final value must be within
/// `rel_tol` of llama-perplexity's `reference`. Returns the final perplexity.
pub fn check_perplexity(
    l: &Loaded,
    dir: &Path,
    what: &str,
    reference: f64,
    n_chunks: usize,
    rel_tol: f64,
) -> f64 {
    let ids = perplexity_ids(l, dir, what);
    check_perplexity_of(l, &ids, what, reference, n_chunks, rel_tol)
}

/// Perplexity of the tokens `ids` with 128-token chunks ([`reference_exec`]'s numerics): there
/// must be `n_chunks` chunks, and the final value must be within `rel_tol` of `reference`.
/// Returns the final perplexity.
pub fn check_perplexity_of(
    l: &Loaded,
    ids: &[u32],
    what: &str,
    reference: f64,
    n_chunks: usize,
    rel_tol: f64,
) -> f64 {
    let exec = reference_exec();
    let bos = if l.tokenizer.add_bos() {
        l.tokenizer.bos()
    } else {
        None
    };
    let ppl =
        t2p::runner::perplexity::perplexity(&l.model, &exec, ids, 128, bos, |_, _| {}).unwrap();
    let final_ppl = *ppl.last().unwrap();
    eprintln!(
        "{what} perplexity {final_ppl:.4} (reference {reference}), {:+.3}%",
        100.0 * (final_ppl / reference - 1.0)
    );
    assert_eq!(ppl.len(), n_chunks, "{what}: chunks");
    assert!(
        (final_ppl / reference - 1.0).abs() < rel_tol,
        "{what}: final perplexity {final_ppl} vs {reference}"
    );
    final_ppl
}
