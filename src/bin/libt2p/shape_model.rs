//! `-m <shape>`: a model argument that names a `libt2p synth` shape instead of a file runs on
//! that shape's synthetic model (real shapes, random ternary weights), written once into the
//! temporary directory and reused. So `libt2p bench -m bonsai-1.7b` needs no download.

use std::path::{Path, PathBuf};

use t2p::runner::GgufFile;
use t2p::testkit::synth::{QWEN3_SHAPES, SynthOptions, SynthType, write_qwen3_with};
use t2p::testkit::synth_bitnet::{BITNET_SHAPES, write_bitnet};
use t2p::testkit::synth_qwen35::{QWEN35_SHAPES, write_qwen35};

/// Seed of the weights of a shape model (the `synth` default).
const SEED: u64 = 1;

/// `model` itself if it is a file; the synthetic model of the shape it names otherwise.
pub fn resolve(model: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    if model.is_file() {
        return Ok(model.to_path_buf());
    }
    let name = model.to_string_lossy();
    let qwen3 = QWEN3_SHAPES.iter().find(|s| s.name == name);
    let qwen35 = QWEN35_SHAPES.iter().find(|s| s.name == name);
    let bitnet = BITNET_SHAPES.iter().find(|s| s.name == name);
    if qwen3.is_none() && qwen35.is_none() && bitnet.is_none() {
        let known: Vec<&str> = QWEN3_SHAPES
            .iter()
            .map(|s| s.name)
            .chain(QWEN35_SHAPES.iter().map(|s| s.name))
            .chain(BITNET_SHAPES.iter().map(|s| s.name))
            .collect();
        return Err(format!(
            "model file {name} not found (nor is it a synth shape: {})",
            known.join(", ")
        )
        .into());
    }
    let dir = std::env::temp_dir().join("t2p-synth");
    let path = dir.join(format!("{name}-seed{SEED}.gguf"));
    if path.is_file() {
        return Ok(path);
    }
    // BitNet 2B-4T's own vocabulary is llama3's; Falcon3's (131k tokens) is not in the test
    // data, llama3's is the nearest in size.
    let vocab_name = if qwen35.is_some() {
        "ggml-vocab-qwen35.gguf"
    } else if bitnet.is_some() {
        "ggml-vocab-llama-bpe.gguf"
    } else {
        "ggml-vocab-qwen2.gguf"
    };
    let vocab_path = vocab(vocab_name)?;
    eprintln!(
        "synthesizing {name} (random ternary weights, vocab {}) into {}",
        vocab_path.display(),
        path.display()
    );
    std::fs::create_dir_all(&dir)?;
    let vocab = GgufFile::open(&vocab_path)?;
    // Written under a temporary name and renamed: a killed run leaves no half file behind.
    let partial = dir.join(format!(
        "{name}-seed{SEED}.gguf.{}.partial",
        std::process::id()
    ));
    match (qwen3, qwen35, bitnet) {
        (Some(s), _, _) => write_qwen3_with(
            &partial,
            s,
            &vocab,
            SEED,
            &SynthOptions::new(SynthType::Pq2_0),
        )?,
        (_, Some(s), _) => write_qwen35(&partial, s, &vocab, SEED)?,
        (_, _, Some(s)) => write_bitnet(&partial, s, &vocab, SEED)?,
        _ => unreachable!("checked above"),
    }
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// The vocab GGUF `name`: `$T2P_VOCAB_DIR/name`, else the shared test data's tokenizer folder
/// (`$T2P_TESTDATA`, or `../shared/testdata` beside the checkout).
fn vocab(name: &str) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dirs: Vec<PathBuf> = [
        std::env::var_os("T2P_VOCAB_DIR").map(PathBuf::from),
        std::env::var_os("T2P_TESTDATA").map(|d| PathBuf::from(d).join("tokenizer")),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/tokenizer")),
    ]
    .into_iter()
    .flatten()
    .collect();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "a synthetic model needs the vocab {name}; set T2P_VOCAB_DIR (looked in {})",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into()
        })
}
