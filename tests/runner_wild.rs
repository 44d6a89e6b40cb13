//! The files users have (`../shared/testdata/wild`, made by PrismML's fork with `llama-quantize`):
//! ternary bodies with ggml block types beside them (Q4_0 embedding and head; Q4_K embedding,
//! Q6_K head and Q4_0 fallbacks for the k = 384 / 640 matrices of a qwen35 hybrid; a Q2_0 group-64
//! body). They load with those tensors in the file's own bytes (Q2_0 in the group-64 T2P layout,
//! which has their size) and land within 0.5 % of the fork's `llama-perplexity` (its stock CPU
//! path, `--no-repack`) on each.

mod reference;
mod runner_data;

use std::path::Path;

use reference::*;
use t2p::runner::model::{Exec, Loaded, Logits};
use t2p::runner::{GgmlType, LoadOptions, TensorData, TensorStore};

/// The `Final estimate: PPL = ...` of a reference file.
fn fork_ppl(path: &Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("{}: no final estimate", path.display()));
    let value = line
        .split("PPL = ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next();
    value.unwrap().parse().unwrap()
}

/// The logits of `ids` decoded one token at a time (one-column products, the decode path) are
/// those of one batch over all of them, bit for bit: every kernel is exact per column.
fn decoding_matches_the_batch(file: &str, l: &Loaded, exec: &Exec, ids: &[u32]) {
    let mut s = l.model.new_session(ids.len());
    let batch = logits_of(&l.model, exec, &mut s, ids, Logits::All);
    let n_vocab = batch.len() / ids.len();
    let mut s = l.model.new_session(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        let one = logits_of(&l.model, exec, &mut s, &[id], Logits::Last);
        let want = &batch[i * n_vocab..(i + 1) * n_vocab];
        assert!(
            one.iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{file}: position {i} decoded alone differs from the batch"
        );
    }
}

/// Loads `file`, checks that the tensors of `quant_types` are held as ggml blocks (not widened
/// to f32) and those of `g64_types` as group-64 T2P of the file's size, and compares
/// `libt2p perplexity` with the fork's.
fn check_wild(file: &str, quant_types: &[GgmlType], g64_types: &[GgmlType]) {
    let Some(data) = runner_data::testdata() else {
        return;
    };
    let dir = data.join("wild");
    let path = dir.join(format!("{file}.gguf"));
    let (gguf, store) = TensorStore::load_file(&path, &LoadOptions::default()).unwrap();
    // The tensors of type `ty`, at least one.
    let of_type = |ty: GgmlType| {
        let of: Vec<_> = gguf
            .tensors()
            .iter()
            .filter(|t| t.ggml_type == ty)
            .collect();
        assert!(!of.is_empty(), "{file} has {ty} tensors");
        of
    };
    for &ty in quant_types {
        for t in of_type(ty) {
            let held = store.require(&t.name).unwrap();
            assert!(
                matches!(held.data, TensorData::Quant(_)),
                "{file}: {} is held as {:?}-like data, not as {ty} blocks",
                t.name,
                std::mem::discriminant(&held.data)
            );
            assert_eq!(
                held.size_bytes() as u64,
                t.n_bytes,
                "{}: the file's bytes",
                t.name
            );
        }
    }
    for &ty in g64_types {
        for t in of_type(ty) {
            let held = store.require(&t.name).unwrap();
            let TensorData::T2p(m) = &held.data else {
                panic!("{file}: {} is not held in T2P", t.name);
            };
            assert_eq!(m.blocks().halves(), 2, "{}: a scale per 64", t.name);
            assert_eq!(
                m.size_bytes() as u64,
                t.n_bytes,
                "{}: the file's size",
                t.name
            );
        }
    }
    drop(store);

    if runner_data::skip_when_emulated(
        file,
        "a perplexity over the whole text takes minutes under qemu; the kernels it runs are \
         tested bit-exact under qemu by tests/quant_kernels.rs",
    ) {
        return;
    }
    let l = load(&path);
    let text = std::fs::read_to_string(dir.join("ppl-text.txt")).unwrap();
    let ids = l.tokenizer.encode(&text, true, true);
    let bos = l.tokenizer.add_bos().then(|| l.tokenizer.bos()).flatten();
    let exec = reference_exec();
    decoding_matches_the_batch(file, &l, &exec, &ids[..8]);
    let ppl =
        t2p::runner::perplexity::perplexity(&l.model, &exec, &ids, 128, bos, |_, _| {}).unwrap();
    let reference = fork_ppl(&dir.join(format!("perplexity/{file}.txt")));
    let got = *ppl.last().unwrap();
    let rel = got / reference - 1.0;
    eprintln!(
        "{file}: perplexity {got:.4}, fork {reference:.4}, {:+.3} %",
        100.0 * rel
    );
    assert_eq!(ppl.len(), 24, "{file}: chunks of 128 (the fork's count)");
    assert!(rel.abs() < 0.005, "{file}: {got} vs the fork's {reference}");
}

#[test]
fn tq1_0_body_with_q4_0_embedding_and_head_matches_the_fork() {
    check_wild("q3w-tq1_0-q4_0", &[GgmlType::Q4_0], &[]);
}

#[test]
fn q2_0_g64_body_with_q4_k_embedding_and_q6_k_head_matches_the_fork() {
    check_wild(
        "q3w-q2_0g64",
        &[GgmlType::Q4_K, GgmlType::Q6_K],
        &[GgmlType::Q2_0_G64],
    );
}

#[test]
fn qwen35_tq2_0_default_mix_matches_the_fork() {
    check_wild(
        "q35w-tq2_0",
        &[GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K],
        &[],
    );
}
