//! `libt2p info`: what a GGUF file holds and how t2p would load it.

use std::process::ExitCode;

use t2p::runner::{
    Array, GgmlType, GgufFile, LoadOptions, TensorInfo, TensorStore, Tokenizer, Value,
    peak_rss_bytes,
};

/// Options of `libt2p info`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    #[arg(short = 'm', long = "model")]
    model: std::path::PathBuf,
    /// Print every metadata key (long arrays abbreviated).
    #[arg(long)]
    keys: bool,
    /// Do not list the tensors one by one.
    #[arg(long)]
    no_tensors: bool,
    /// Also load every tensor (T2P repack included) and report peak RSS against the file size.
    #[arg(long)]
    load: bool,
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 60 => {
            format!(
                "{:?}... ({} bytes)",
                s.chars().take(60).collect::<String>(),
                s.len()
            )
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => short_array(a),
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F32(x) => format!("{x:e}"),
        Value::F64(x) => format!("{x:e}"),
        Value::Bool(x) => x.to_string(),
    }
}

fn short_array(a: &Array) -> String {
    let items: Vec<String> = match a {
        Array::String(v) => v.iter().take(4).map(|s| format!("{s:?}")).collect(),
        Array::F32(v) => v.iter().take(8).map(|x| format!("{x}")).collect(),
        Array::F64(v) => v.iter().take(8).map(|x| format!("{x}")).collect(),
        Array::Array(v) => v.iter().take(2).map(short_array).collect(),
        other => other
            .to_i64_vec()
            .unwrap_or_default()
            .iter()
            .take(8)
            .map(|x| x.to_string())
            .collect(),
    };
    let more = if a.len() > items.len() { ", ..." } else { "" };
    format!(
        "[{}{more}] ({} x {})",
        items.join(", "),
        a.len(),
        a.elem_type_name()
    )
}

type BoxError = Box<dyn std::error::Error>;

pub fn run(args: Args) -> Result<ExitCode, BoxError> {
    let opts = LoadOptions {
        progress: crate::progress::load_bar(false),
        ..LoadOptions::default()
    };
    // Load first, before anything else allocates, so that the peak RSS is the loader's.
    let loaded = if args.load {
        Some(load_report(&args, &opts)?)
    } else {
        None
    };
    let gguf = GgufFile::open(&args.model)?;
    let arch = print_header(&args, &gguf);
    print_hyper_parameters(&gguf, arch);
    print_tokenizer(&gguf);
    print_tensors(&args, &gguf, &opts);
    if args.keys {
        println!("\nmetadata:");
        for (k, v) in gguf.metadata() {
            println!("  {k:<45} {}", short(v));
        }
    }
    if let Some(line) = loaded {
        println!("\n{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads every tensor and says how long it took and how much memory it held at the peak.
fn load_report(args: &Args, opts: &LoadOptions) -> Result<String, BoxError> {
    let start = std::time::Instant::now();
    let (_, store) = TensorStore::load_file(&args.model, opts)?;
    let secs = start.elapsed().as_secs_f64();
    let file_len = std::fs::metadata(&args.model)?.len();
    let line = format!(
        "loaded {} tensors ({}) in {secs:.3} s ({:.0} MB/s of file, {:.3} s/GB); peak RSS {} \
         (header, tensors and process) vs file {}",
        store.len(),
        mib(store.total_bytes() as u64),
        file_len as f64 / 1e6 / secs,
        secs / (file_len as f64 / 1e9),
        peak_rss_bytes()
            .map(mib)
            .unwrap_or_else(|| "unknown".into()),
        mib(file_len)
    );
    Ok(line)
}

/// File, size, version, architecture, name and file type; returns the architecture.
fn print_header<'a>(args: &Args, gguf: &'a GgufFile) -> &'a str {
    println!("file:          {}", args.model.display());
    println!(
        "size:          {} bytes ({}), GGUF v{}, alignment {}, data at byte {}",
        gguf.file_len(),
        mib(gguf.file_len()),
        gguf.version(),
        gguf.alignment(),
        gguf.data_offset()
    );
    let arch = gguf.architecture().unwrap_or("(none)");
    println!("architecture:  {arch}");
    if let Some(Value::String(name)) = gguf.get("general.name") {
        println!("name:          {name}");
    }
    if let Some(ft) = gguf.get("general.file_type") {
        println!("file type:     {}", short(ft));
    }
    println!("metadata keys: {}", gguf.metadata().len());

    arch
}

/// The `<arch>.*` keys and the Hadamard fold's keys.
fn print_hyper_parameters(gguf: &GgufFile, arch: &str) {
    println!("\nhyper-parameters ({arch}.*):");
    let prefix = format!("{arch}.");
    for (k, v) in gguf.metadata() {
        if let Some(rest) = k.strip_prefix(&prefix) {
            println!("  {rest:<40} {}", short(v));
        }
    }
    let hadamard: Vec<&str> = gguf
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("prism.hadamard."))
        .map(|(k, _)| k.as_str())
        .collect();
    if !hadamard.is_empty() {
        println!(
            "  Hadamard-rotated weights: {} keys ({})",
            hadamard.len(),
            hadamard.join(", ")
        );
    }
}

/// The tokenizer the metadata describes, or why it cannot be built.
fn print_tokenizer(gguf: &GgufFile) {
    println!("\ntokenizer:");
    if gguf.get("tokenizer.ggml.model").is_none() {
        println!("  (none)");
    } else {
        match Tokenizer::from_gguf(gguf) {
            Ok(t) => {
                println!(
                    "  kind {:?} (tokenizer.ggml.model {:?}), pre {:?}, {} tokens, {} merges",
                    t.kind(),
                    gguf.get_str("tokenizer.ggml.model").unwrap_or("?"),
                    t.pre(),
                    t.n_vocab(),
                    t.n_merges()
                );
                let name = |id: Option<u32>| match id {
                    Some(id) => format!("{id} {:?}", t.token_text(id).unwrap_or("")),
                    None => "none".to_string(),
                };
                println!(
                    "  bos {}, eos {}, add_bos {}, add_eos {}",
                    name(t.bos()),
                    name(t.eos()),
                    t.add_bos(),
                    t.add_eos()
                );
                if gguf.get("tokenizer.chat_template").is_some() {
                    println!("  has a chat template");
                }
            }
            Err(e) => println!("  cannot be built: {e}"),
        }
    }
}

/// Bytes per type, what goes to T2P, and (unless `--no-tensors`) every tensor and how it runs.
fn print_tensors(args: &Args, gguf: &GgufFile, opts: &LoadOptions) {
    println!("\ntensors: {}", gguf.tensors().len());
    for (ty, n, bytes) in gguf.bytes_by_type() {
        let load = if ty.is_loadable() {
            ""
        } else {
            "  (cannot be loaded)"
        };
        println!("  {:<8} {n:>5} tensors {:>14}{load}", ty.name(), mib(bytes));
    }
    // BitNet's I2_S / IQ2_BN / IQ1_BN matrices always run as T2P codes (with their f32 scales), and a
    // converted file's T2P matrices as they are stored.
    let always_t2p = |t: &&TensorInfo| t.ggml_type.is_int8_ternary() || t.ggml_type.is_t2p();
    let t2p: Vec<_> = gguf
        .tensors()
        .iter()
        .filter(|t| opts.uses_t2p(t) || always_t2p(t))
        .collect();
    let t2p_bytes: u64 = t2p.iter().map(|t| t.n_bytes).sum();
    let ternary = gguf
        .tensors()
        .iter()
        .filter(|t| t.ggml_type.has_t2p_layout() || always_t2p(t))
        .count();
    println!(
        "  T2P: {} of {ternary} ternary tensors, {} of {} tensor data (in the file's format)",
        t2p.len(),
        mib(t2p_bytes),
        mib(gguf.tensors().iter().map(|t| t.n_bytes).sum())
    );
    if !args.no_tensors && !gguf.tensors().is_empty() {
        println!(
            "\n  {:<40} {:<8} {:<22} {:>12}  runs as",
            "name", "type", "shape [k, rows]", "bytes"
        );
        for t in gguf.tensors() {
            // The file's format: legacy id 42 holds pq2_0 bytes under another name.
            let source = if t.stored_type_id != t.ggml_type.0 {
                format!("q2_0 (id {})", t.stored_type_id)
            } else {
                t.ggml_type.name()
            };
            let layout = if opts.uses_t2p(t) && t.ggml_type == GgmlType::Q2_0_G64 {
                format!("{source} -> T2P g64 (a scale per 64 weights)")
            } else if opts.uses_t2p(t) {
                format!("{source} -> T2P")
            } else if t.ggml_type.is_int8_ternary() {
                let scale = if t.ggml_type == GgmlType::I2_S {
                    "tensor"
                } else {
                    "row"
                };
                format!(
                    "{source} -> T2P codes x per-token int8 activations, f32 {scale} scale after"
                )
            } else if t.ggml_type.is_ternary() {
                format!("{source} -> pq2_0 blocks (kept by the load options)")
            } else if t.ggml_type.is_quant() {
                let act = t.ggml_type.vec_dot_type();
                let path = t2p::kernels::quant_path_name(t2p::kernels::active().isa(), t.ggml_type);
                format!("{source} as stored, x {act} activations ({path})")
            } else if t.ggml_type == GgmlType::F16 && t.shape.len() == 2 {
                let path = t2p::kernels::f16_path_name(t2p::kernels::active().isa());
                format!("{source} as stored (a matrix: rows widened in registers x f32, {path})")
            } else if t.ggml_type.is_loadable() {
                format!("{source} (as stored)")
            } else {
                format!("{source} (unsupported)")
            };
            println!(
                "  {:<40} {:<8} {:<22} {:>12}  {layout}",
                t.name,
                t.ggml_type.name(),
                format!("{:?}", t.shape),
                t.n_bytes
            );
        }
    }
}
