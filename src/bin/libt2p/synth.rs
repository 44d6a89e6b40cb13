//! `libt2p synth`: write a synthetic model with real shapes and random ternary weights.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use t2p::runner::GgufFile;
use t2p::testkit::synth::{QWEN3_SHAPES, SynthOptions, SynthType, write_qwen3_with};
use t2p::testkit::synth_bitnet::{BITNET_SHAPES, write_bitnet};
use t2p::testkit::synth_qwen35::{QWEN35_SHAPES, write_qwen35};

/// Every `--shape` name: the qwen3 shapes, the qwen35 ones, then the BitNet ones.
fn shape_names() -> Vec<&'static str> {
    QWEN3_SHAPES
        .iter()
        .map(|s| s.name)
        .chain(QWEN35_SHAPES.iter().map(|s| s.name))
        .chain(BITNET_SHAPES.iter().map(|s| s.name))
        .collect()
}

/// Options of `libt2p synth`.
#[derive(clap::Args)]
pub struct Args {
    /// Shape: qwen3 (Ternary Bonsai 1.7B/4B/8B, a tiny test shape), qwen35 (Ternary Bonsai 2
    /// 27B, a tiny test shape), or BitNet in I2_S (`bitnet-2b`: BitNet b1.58 2B-4T with a llama3
    /// vocab; `falcon3-1b`, `falcon3-10b`).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(shape_names()))]
    shape: String,
    /// A GGUF whose `tokenizer.*` metadata is copied (e.g. a Qwen vocab GGUF).
    #[arg(long)]
    vocab: PathBuf,
    /// Output file.
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Type of the matrices (qwen3 shapes): pq2_0, tq2_0, tq1_0, f32, q2_0-legacy (pq2_0
    /// bytes under the old type id 42) or q2_0 (mainline's Q2_0: id 42, a scale per 64). The
    /// same seed gives the same ternary codes in every type.
    #[arg(
        long = "type",
        default_value = "pq2_0",
        value_parser = clap::builder::PossibleValuesParser::new(SynthType::ALL.map(SynthType::name))
    )]
    ty: String,
    /// Weights per scale, 64 (q2_0 only: the second half of each 128 gets its own scale), 128
    /// or 256. Default: 128 for pq2_0, q2_0-legacy and q2_0 (the q2_0 file then holds exactly
    /// the pq2_0 file's weights), 256 otherwise. With 256 the pq2_0, tq2_0, tq1_0, q2_0 and f32
    /// files of one seed hold exactly the same weights (and llama-quantize of the f32 file is
    /// lossless).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["64", "128", "256"]))]
    scale_group: Option<String>,
    /// Write `llama-quantize`'s default mix (qwen3 shapes): `token_embd` as Q4_K and `output`
    /// as Q6_K, rounded from the same ternary values; the other matrices in `--type`.
    #[arg(long)]
    default_mix: bool,
    /// A Jinja file written as the model's `tokenizer.chat_template` (instead of the vocab
    /// GGUF's): test models with a real template (`testdata/chat/templates/`).
    #[arg(long = "chat-template")]
    chat_template: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let vocab = GgufFile::open(&args.vocab)?;
    let t = Instant::now();
    let ty = SynthType::from_name(&args.ty).ok_or_else(|| format!("unknown type {:?}", args.ty))?;
    let mut opts = SynthOptions::new(ty);
    if let Some(g) = &args.scale_group {
        opts.scale_group = g.parse()?;
    }
    opts.default_mix = args.default_mix;
    if let Some(shape) = QWEN3_SHAPES.iter().find(|s| s.name == args.shape) {
        write_qwen3_with(&args.output, shape, &vocab, args.seed, &opts)?;
    } else if opts != SynthOptions::new(SynthType::Pq2_0) {
        return Err(format!(
            "--type and --scale-group apply to the qwen3 shapes only (not {})",
            args.shape
        )
        .into());
    } else if let Some(shape) = QWEN35_SHAPES.iter().find(|s| s.name == args.shape) {
        write_qwen35(&args.output, shape, &vocab, args.seed)?;
    } else if let Some(shape) = BITNET_SHAPES.iter().find(|s| s.name == args.shape) {
        write_bitnet(&args.output, shape, &vocab, args.seed)?;
    } else {
        return Err(format!(
            "unknown shape {:?} (known: {})",
            args.shape,
            shape_names().join(", ")
        )
        .into());
    }
    if let Some(path) = &args.chat_template {
        let source = std::fs::read_to_string(path)?;
        let mut tmp = args.output.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        t2p::testkit::copy_with_metadata(
            &args.output,
            &tmp,
            &[(
                "tokenizer.chat_template".into(),
                t2p::runner::Value::String(source),
            )],
        )?;
        std::fs::rename(&tmp, &args.output)?;
    }
    let bytes = std::fs::metadata(&args.output)?.len();
    eprintln!(
        "wrote {} ({:.1} MB) in {:.1} s",
        args.output.display(),
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
