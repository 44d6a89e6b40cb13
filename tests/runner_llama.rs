//! End-to-end checks of the llama and qwen3 forward passes against llama.cpp's reference outputs
//! in the shared test data (see its README for how the references were made and compared).

mod runner_data;

use std::path::Path;

use serde_json::Value;
use t2p::runner::LoadOptions;
use t2p::runner::model::{Exec, Loaded, Model};
use t2p::runner::sample::argmax;

fn load(path: &Path) -> Loaded {
    Model::load(path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy decoding as llama-completion does it: the prompt in one batch, then one token a call.
fn greedy(l: &Loaded, exec: &Exec, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = l.model.new_session(prompt.len() + n);
    let mut logits = l.model.forward(exec, &mut s, prompt, false).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let id = argmax(&logits);
        out.push(id);
        if l.tokenizer.is_eog(id) {
            break;
        }
        logits = l.model.forward(exec, &mut s, &[id], false).unwrap();
    }
    out
}

#[test]
fn stories260k_greedy_runs_match_llama_cpp() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let dir = dir.join("stories260K");
    let l = load(&dir.join("stories260K.gguf"));
    let exec = Exec::new(2);
    for name in ["greedy-bos-n200.json", "greedy-once-upon-a-time-n200.json"] {
        let r = json(&dir.join(name));
        let prompt = ids(&r["prompt_ids"]);
        let want = ids(&r["generated_ids"]);
        let got = greedy(&l, &exec, &prompt, want.len());
        assert_eq!(got, want, "{name}");
    }
    let text = std::fs::read_to_string(dir.join("prompt-once-upon-a-time.txt")).unwrap();
    assert_eq!(
        l.tokenizer.encode(&text, true, true),
        vec![1, 403, 407, 261, 378]
    );
}

#[test]
fn stories260k_seq64_logits_within_tolerance() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let dir = dir.join("stories260K");
    let l = load(&dir.join("stories260K.gguf"));
    let exec = Exec::new(2);
    let ids: Vec<u32> = std::fs::read_to_string(dir.join("seq64.ids.txt"))
        .unwrap()
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let want: Vec<f32> = std::fs::read(dir.join("seq64.logits.f32le.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let mut s = l.model.new_session(64);
    let got = l.model.forward(&exec, &mut s, &ids, true).unwrap();
    assert_eq!(got.len(), want.len());
    let max = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("stories260K seq64: max |logit diff| = {max}");
    assert!(max < 2e-2, "max logit difference {max}");
    for p in 0..64 {
        assert_eq!(
            argmax(&got[p * 512..(p + 1) * 512]),
            argmax(&want[p * 512..(p + 1) * 512]),
            "position {p}"
        );
    }
}

/// The README's teacher-forced check on a pq2_0 model: prompt + reference tokens in one batch;
/// the argmax must equal the reference wherever its margin is at least 0.25, and the reference
/// top-10 logits must agree within 0.5. Returns whether free-running greedy must match exactly.
fn teacher_forced(l: &Loaded, exec: &Exec, r: &Value, what: &str) -> bool {
    let prompt = ids(&r["prompt_ids"]);
    let generated = ids(&r["generated_ids"]);
    let all: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
    let mut s = l.model.new_session(all.len());
    let logits = l.model.forward(exec, &mut s, &all, true).unwrap();
    let nv = l.model.n_vocab();
    let mut all_margins_wide = true;
    let mut worst = 0.0f32;
    for (i, step) in r["steps"].as_array().unwrap().iter().enumerate() {
        let row = &logits[(prompt.len() - 1 + i) * nv..(prompt.len() + i) * nv];
        let top_ids = ids(&step["top_ids"]);
        let top: Vec<f32> = step["top_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let margin = top[0] - top[1];
        if margin >= 0.25 {
            assert_eq!(
                argmax(row),
                generated[i],
                "{what} step {i}: argmax differs with reference margin {margin}"
            );
        } else {
            all_margins_wide = false;
        }
        for (&id, &v) in top_ids.iter().zip(&top) {
            worst = worst.max((row[id as usize] - v).abs());
        }
    }
    eprintln!("{what}: worst top-10 logit difference {worst}");
    assert!(worst < 0.5, "{what}: top-10 logits differ by {worst}");
    all_margins_wide
}

#[test]
fn qwen3_tiny_matches_llama_cpp_pq2_0_references() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let dir = dir.join("qwen3-tiny");
    let l = load(&dir.join("qwen3-tiny-pq2_0.gguf"));
    let exec = Exec::new(2);
    for p in ["english", "unicode-de", "code-rust"] {
        let r = json(&dir.join(format!("greedy/{p}.pq2_0.prism.json")));
        let text = std::fs::read_to_string(dir.join(format!("prompts/{p}.txt"))).unwrap();
        assert_eq!(
            l.tokenizer.encode(&text, true, true),
            ids(&r["prompt_ids"]),
            "{p}: tokenization"
        );
        if teacher_forced(&l, &exec, &r, p) {
            let want = ids(&r["generated_ids"]);
            assert_eq!(
                greedy(&l, &exec, &ids(&r["prompt_ids"]), want.len()),
                want,
                "{p}: free-running greedy"
            );
        }
    }
}

fn read_ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect()
}

#[test]
fn perplexity_matches_llama_perplexity() {
    use t2p::runner::perplexity::perplexity;
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let exec = Exec::new(2);
    let stories = dir.join("stories260K");
    let l = load(&stories.join("stories260K.gguf"));
    let text = std::fs::read_to_string(stories.join("ppl-text.txt")).unwrap();
    let ids = l.tokenizer.encode(&text, true, true);
    assert_eq!(
        ids,
        read_ids(&stories.join("ppl-text.ids.txt")),
        "stories260K tokenization of the perplexity text"
    );
    let ppl = perplexity(&l.model, &exec, &ids, 128, l.tokenizer.bos(), |_, _| {}).unwrap();
    eprintln!(
        "stories260K perplexity {:.4} (llama.cpp 5.0930)",
        ppl.last().unwrap()
    );
    assert_eq!(ppl.len(), 46);
    assert!(
        (ppl.last().unwrap() - 5.0930).abs() < 0.001,
        "final {}",
        ppl.last().unwrap()
    );

    let qwen = dir.join("qwen3-tiny");
    let l = load(&qwen.join("qwen3-tiny-pq2_0.gguf"));
    let text = std::fs::read_to_string(qwen.join("ppl-text.txt")).unwrap();
    let ids = l.tokenizer.encode(&text, true, true);
    assert_eq!(
        ids,
        read_ids(&qwen.join("ppl-text.ids.txt")),
        "qwen3 tokenization of the perplexity text"
    );
    let bos = if l.tokenizer.add_bos() {
        l.tokenizer.bos()
    } else {
        None
    };
    let ppl = perplexity(&l.model, &exec, &ids, 128, bos, |_, _| {}).unwrap();
    let final_ppl = *ppl.last().unwrap();
    let reference = 117481873.4572;
    eprintln!(
        "qwen3-tiny perplexity {final_ppl:.4} (llama.cpp pq2_0 {reference}), {:+.3}%",
        100.0 * (final_ppl / reference - 1.0)
    );
    assert_eq!(ppl.len(), 22);
    assert!(
        (final_ppl / reference - 1.0).abs() < 0.005,
        "final {final_ppl}"
    );
}
