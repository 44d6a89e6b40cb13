//! `synth` writes a GGUF that the reader accepts, with the real tokenizer copied and every matrix
//! repacked into T2P at load, and that the forward pass runs.

mod runner_data;

use runner_data::synth_model;
use t2p::runner::LoadOptions;
use t2p::runner::model::{Exec, Logits, Model};

#[test]
fn synthetic_qwen3_loads_into_t2p_and_runs() {
    let Some((synth, gguf, store)) = synth_model("qwen2", "qwen3-test", 7) else {
        return;
    };
    for (k, v) in synth
        .setup
        .vocab
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        assert_eq!(gguf.get(k), Some(v), "{k} copied");
    }
    assert_eq!(gguf.get_u32("qwen3.block_count").unwrap(), 2);
    let matrices = store.iter().filter(|t| t.shape.len() == 2).count();
    let t2p = store.iter().filter(|t| t.as_t2p().is_some()).count();
    assert_eq!(
        matrices, t2p,
        "every matrix of a synthetic model is held in T2P"
    );
    assert_eq!(matrices, 2 + 2 * 7);

    let loaded = Model::load(&synth.path, &LoadOptions::default()).unwrap();
    let exec = Exec::new(2);
    let ids = loaded.tokenizer.encode("Hello, world", true, true);
    let m = &loaded.model;
    let mut s = m.new_session(32);
    let logits = m.forward_one(&exec, &mut s, &ids, Logits::Last).unwrap();
    assert_eq!(logits.len(), loaded.model.n_vocab());
    assert!(logits.iter().all(|v| v.is_finite()));
    // The same weights again give the same file.
    let again = synth.write_again("again.gguf");
    assert_eq!(
        std::fs::read(&synth.path).unwrap(),
        std::fs::read(&again).unwrap()
    );
}
