//! Hostile inputs: truncated and corrupted copies of every shared GGUF file must give a clean
//! error (or, for a corruption that still describes a valid file, load), never a panic.

mod common;
mod runner_data;

use std::io::Cursor;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::Lcg;
use t2p::runner::{GgufError, GgufFile, LoadOptions, TensorStore, Tokenizer};

fn quiet() -> LoadOptions {
    LoadOptions {
        progress: None,
        ..LoadOptions::default()
    }
}

/// Parses and loads `bytes` in memory, also building the tokenizer when the header parses.
fn parse_and_load(bytes: &[u8], tokenize: bool) -> Result<(), GgufError> {
    let gguf = GgufFile::from_bytes(bytes)?;
    if tokenize
        && gguf.get("tokenizer.ggml.model").is_some()
        && let Ok(tok) = Tokenizer::from_gguf(&gguf)
    {
        let ids = tok.encode("Hello <|im_start|> wörld 123", true, true);
        let _ = tok.decode(&ids, true);
    }
    TensorStore::load(&gguf, &mut Cursor::new(bytes), &quiet())?;
    Ok(())
}

/// Every GGUF of the test data, and those of the BitNet references beside it (`../bitnet`:
/// I2_S tensors, whose layout the reader decides per file) when that folder is there.
fn hostile_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = runner_data::all_ggufs(dir);
    match dir.parent().map(|p| p.join("bitnet")) {
        Some(b) if b.is_dir() => files.extend(runner_data::all_ggufs(&b)),
        _ => println!("note: no bitnet/ folder beside the test data; its files are not covered"),
    }
    files
}

fn no_panic(bytes: &[u8], what: &str, tokenize: bool) -> Result<(), GgufError> {
    match catch_unwind(AssertUnwindSafe(|| parse_and_load(bytes, tokenize))) {
        Ok(r) => r,
        Err(_) => panic!("panic on {what}"),
    }
}

#[derive(Debug, Clone, Copy)]
enum Field {
    U32(usize),
    U64(usize),
}

/// Walks a valid header and records the position of every count, length, type id, dimension
/// and offset field (string arrays: only their first and last few element lengths).
fn header_fields(b: &[u8]) -> Vec<(Field, &'static str)> {
    let mut f = Vec::new();
    let mut p = 0usize;
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
    let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
    f.push((Field::U32(0), "magic"));
    f.push((Field::U32(4), "version"));
    f.push((Field::U64(8), "tensor count"));
    f.push((Field::U64(16), "kv count"));
    let n_tensors = u64_at(8);
    let n_kv = u64_at(16);
    p += 24;
    fn skip_value(
        b: &[u8],
        p: &mut usize,
        ty: u32,
        f: &mut Vec<(Field, &'static str)>,
        record: bool,
    ) {
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
        match ty {
            0 | 1 | 7 => *p += 1,
            2 | 3 => *p += 2,
            4..=6 => *p += 4,
            10..=12 => *p += 8,
            8 => {
                if record {
                    f.push((Field::U64(*p), "string length"));
                }
                *p += 8 + u64_at(*p);
            }
            9 => {
                let et = u32::from_le_bytes(b[*p..*p + 4].try_into().unwrap());
                f.push((Field::U32(*p), "array type"));
                f.push((Field::U64(*p + 4), "array length"));
                let n = u64_at(*p + 4);
                *p += 12;
                for i in 0..n {
                    skip_value(b, p, et, f, i < 3 || i + 2 >= n);
                }
            }
            _ => panic!("walker: bad type"),
        }
    }
    for _ in 0..n_kv {
        f.push((Field::U64(p), "key length"));
        p += 8 + u64_at(p);
        f.push((Field::U32(p), "value type"));
        let ty = u32_at(p);
        p += 4;
        skip_value(b, &mut p, ty, &mut f, true);
    }
    for _ in 0..n_tensors {
        f.push((Field::U64(p), "tensor name length"));
        p += 8 + u64_at(p);
        f.push((Field::U32(p), "n_dims"));
        let nd = u32_at(p) as usize;
        p += 4;
        for _ in 0..nd {
            f.push((Field::U64(p), "dimension"));
            p += 8;
        }
        f.push((Field::U32(p), "tensor type"));
        f.push((Field::U64(p + 4), "tensor offset"));
        p += 12;
    }
    f
}

/// Prints the `summary` of a test's hostile copies and asserts that it made more than `floor`
/// (a shrunken test-data set must not pass on a handful).
fn enough_cases(cases: usize, floor: usize, summary: &str) {
    println!("{summary}");
    assert!(cases > floor, "only {cases} cases");
}

/// Bytes a file needs: the end of the last tensor, or the whole header for vocab-only files.
fn required_len(bytes: &[u8]) -> usize {
    let g = GgufFile::from_bytes(bytes).unwrap();
    g.tensors()
        .iter()
        .map(|t| g.tensor_file_range(t).end as usize)
        .max()
        .unwrap_or(bytes.len())
}

#[test]
fn truncated_copies_fail_cleanly() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = 0;
    for path in hostile_files(&dir) {
        let bytes = std::fs::read(&path).unwrap();
        let need = required_len(&bytes);
        let g = GgufFile::from_bytes(&bytes).unwrap();
        // Each cut re-parses up to 6 MB of vocabulary: fewer evenly spread cuts in big files,
        // and fewer still under emulation (this test took 8 min of qemu's time in full; every
        // file still gets its first 64 cuts, the header end and the tensor edges).
        let big = bytes.len() > 2 << 20;
        let spread = match (big, runner_data::emulated()) {
            (false, _) => 120,
            (true, false) => 40,
            (true, true) => 8,
        };
        let mut cuts: Vec<usize> = (0..64).collect();
        cuts.extend((1..=spread).map(|i| bytes.len() * i / (spread + 1)));
        let header_end = g.data_offset().min(bytes.len() as u64) as usize;
        cuts.extend([header_end.saturating_sub(1), header_end, need - 1]);
        for t in g.tensors().iter().take(8) {
            let r = g.tensor_file_range(t);
            cuts.extend([r.start as usize, r.start as usize + 1, r.end as usize - 1]);
        }
        cuts.sort();
        cuts.dedup();
        for &cut in cuts.iter().filter(|&&c| c < need) {
            let r = no_panic(
                &bytes[..cut],
                &format!("{} cut at {cut}", path.display()),
                false,
            );
            assert!(r.is_err(), "{} cut at {cut} was accepted", path.display());
            cases += 1;
        }
        // A few truncated copies on disk, through the file-based API.
        for (i, &cut) in cuts.iter().filter(|&&c| c < need).step_by(37).enumerate() {
            let p = tmp.path().join(format!("cut{i}.gguf"));
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let e = TensorStore::load_file(&p, &quiet()).unwrap_err();
            assert!(!e.to_string().is_empty());
            cases += 1;
        }
    }
    enough_cases(cases, 700, &format!("{cases} truncated copies refused"));
}

#[test]
fn corrupted_fields_fail_cleanly() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let mut rng = Lcg(7);
    let (mut cases, mut refused) = (0, 0);
    let mut examples = Vec::new();
    for path in hostile_files(&dir) {
        let bytes = std::fs::read(&path).unwrap();
        let fields = header_fields(&bytes);
        let len = bytes.len() as u64;
        let big = bytes.len() > 2 << 20;
        let mut work = bytes.clone();
        let n_fields = fields.len();
        for (fi, &(field, name)) in fields.iter().enumerate() {
            // Large files (a 6 MB vocabulary parsed per case): the first and last fields and
            // a sample in between, to keep the test under a minute on two cores.
            // Under emulation a sparser sample (every 80th) of the fields in between.
            let every = if runner_data::emulated() { 80 } else { 20 };
            if big && fi >= 12 && fi + 12 < n_fields && fi % every != 0 {
                continue;
            }
            let (pos, size) = match field {
                Field::U32(p) => (p, 4),
                Field::U64(p) => (p, 8),
            };
            let orig = if size == 4 {
                u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as u64
            } else {
                u64::from_le_bytes(bytes[pos..pos + 8].try_into().unwrap())
            };
            let values: Vec<u64> = if size == 4 && big {
                vec![0, 13, 0xFFFF_FFFF, orig ^ 1]
            } else if big {
                vec![0, orig.wrapping_add(1), u64::MAX, orig.wrapping_add(32)]
            } else if size == 4 {
                vec![
                    0,
                    1,
                    13,
                    42,
                    142,
                    0xFFFF_FFFF,
                    orig ^ 1,
                    orig.wrapping_add(1) & 0xFFFF_FFFF,
                ]
            } else {
                vec![
                    0,
                    orig.wrapping_add(1),
                    orig.wrapping_sub(1),
                    len,
                    u64::MAX,
                    1 << 62,
                    orig.wrapping_add(32),
                ]
            };
            for v in values {
                if v == orig {
                    continue;
                }
                if size == 4 {
                    work[pos..pos + 4].copy_from_slice(&(v as u32).to_le_bytes());
                } else {
                    work[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
                }
                let what = format!("{} {name} at {pos} = {v}", path.display());
                let r = no_panic(&work, &what, !big || cases % 25 == 0);
                cases += 1;
                if let Err(e) = r {
                    refused += 1;
                    if examples.len() < 12 && rng.next().is_multiple_of(50) {
                        examples.push(format!("{name} = {v}: {e}"));
                    }
                }
                work[pos..pos + size].copy_from_slice(&bytes[pos..pos + size]);
            }
        }
        // Random byte flips anywhere in the header.
        let header =
            (GgufFile::from_bytes(&bytes).unwrap().data_offset() as usize).min(bytes.len());
        let flips = match (big, runner_data::emulated()) {
            (false, _) => 300,
            (true, false) => 20,
            (true, true) => 5,
        };
        for _ in 0..flips {
            let pos = rng.next() as usize % header;
            work[pos] ^= 1 << (rng.next() % 8);
            let what = format!("{} byte flip at {pos}", path.display());
            let _ = no_panic(&work, &what, !big);
            work[pos] = bytes[pos];
            cases += 1;
        }
    }
    let summary = format!("{cases} corrupted copies, {refused} field corruptions refused");
    enough_cases(
        cases,
        1000,
        &format!("{summary}; for example:\n  {}", examples.join("\n  ")),
    );
}

#[test]
fn errors_name_the_field_and_offset() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let mut bytes = std::fs::read(dir.join("stories260K/stories260K.gguf")).unwrap();
    let fields = header_fields(&bytes);
    // Tensor type of the first tensor -> unknown id.
    let (Field::U32(pos), _) = *fields.iter().find(|(_, n)| *n == "tensor type").unwrap() else {
        unreachable!()
    };
    bytes[pos..pos + 4].copy_from_slice(&77u32.to_le_bytes());
    // The header still reads (so `libt2p info` can show the file); the load refuses by name.
    let gguf = GgufFile::from_bytes(&bytes).unwrap();
    let e = t2p::runner::TensorStore::load(
        &gguf,
        &mut std::io::Cursor::new(&bytes),
        &t2p::runner::LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, GgufError::UnknownTensorType { name, type_id: 77, .. } if name == "token_embd.weight"),
        "{e}"
    );
    // A string array length far beyond the file.
    let mut bytes = std::fs::read(dir.join("stories260K/stories260K.gguf")).unwrap();
    let (Field::U64(pos), _) = *fields.iter().find(|(_, n)| *n == "array length").unwrap() else {
        unreachable!()
    };
    bytes[pos..pos + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = GgufFile::from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(&e, GgufError::TooLarge { offset, .. } if *offset == pos as u64),
        "{e}"
    );
    assert!(e.to_string().contains("tokenizer.ggml.tokens"), "{e}");
}
