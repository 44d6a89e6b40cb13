//! `libt2p convert`: a model rewritten with its matrices in the T2P layout loads by mapping
//! them in place and gives the original's logits bit for bit (pq2_0 and the qwen35 hybrid from
//! the test data, mainline's group-64 Q2_0 from `wild/`); read through a plain reader (no map)
//! it gives the same; a file of another layout version, or with T2P tensors but no layout key,
//! or with a T2P tensor of the wrong size, is refused with a clear error.

mod reference;
mod runner_data;

use std::path::{Path, PathBuf};

use reference::{logits_of, reference_exec};
use t2p::format::{GgmlType, T2P_LAYOUT_KEY, T2P_LAYOUT_VERSION};
use t2p::runner::convert::convert;
use t2p::runner::model::{Logits, Model};
use t2p::runner::{GgufError, GgufFile, LoadOptions, TensorData, TensorStore, Value};
use t2p::testkit::copy_with_metadata;
use t2p::testkit::gguf_writer::{GgufWriter, TensorSpec};

/// Tokens every comparison runs (in the vocabularies of all the models used).
const IDS: [u32; 6] = [1, 7, 42, 100, 5, 300];

/// Logits of every position of [`IDS`], in one batch.
fn logits(path: &Path) -> Vec<f32> {
    let loaded = Model::load(path, &LoadOptions::default()).unwrap();
    let exec = reference_exec();
    let mut s = loaded.model.new_session(IDS.len());
    logits_of(&loaded.model, &exec, &mut s, &IDS, Logits::All)
}

/// `<testdata>/<rel>` converted into `dir`; `None` when the test data is skipped.
fn converted(rel: &str, dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let src = runner_data::testdata()?.join(rel);
    let dst = dir.join("converted.gguf");
    let report = convert(&src, &dst, &LoadOptions::default()).unwrap();
    assert!(report.t2p_tensors > 0, "{rel}: nothing converted");
    assert_eq!(report.bytes, std::fs::metadata(&dst).unwrap().len());
    Some((src, dst))
}

/// The converted file of `rel` holds every matrix the source repacks, as T2P tensors of
/// `ty`, borrowed from the mapped file, and gives the source's logits bit for bit, mapped or
/// read.
fn round_trip(rel: &str, ty: GgmlType) {
    let dir = tempfile::tempdir().unwrap();
    let Some((src, dst)) = converted(rel, dir.path()) else {
        return;
    };
    let (_, original) = TensorStore::load_file(&src, &LoadOptions::default()).unwrap();
    let (gguf, mapped) = TensorStore::load_file(&dst, &LoadOptions::default()).unwrap();
    let src_gguf = GgufFile::open(&src).unwrap();
    let mut shared = 0;
    for t in original.iter() {
        let info = gguf.tensor(&t.name).unwrap();
        let back = mapped.get(&t.name).unwrap();
        match (&t.data, &back.data) {
            (TensorData::T2p(a), TensorData::T2p(b)) => {
                assert_eq!(info.ggml_type, ty, "{}", t.name);
                assert!(b.is_shared(), "{}: copied, not mapped", t.name);
                assert_eq!(a.blocks(), b.blocks(), "{}", t.name);
                assert_eq!((a.rows(), a.k()), (b.rows(), b.k()));
                shared += 1;
            }
            (TensorData::T2p(_), _) => panic!("{}: not loaded as T2P", t.name),
            // Copied as the source holds it.
            _ => {
                let was = src_gguf.tensor(&t.name).unwrap();
                assert_eq!(info.stored_type_id, was.stored_type_id, "{}", t.name);
            }
        }
    }
    assert!(shared > 0);

    // The same bytes through a reader, and from the file with `mmap: false`: the blocks copied.
    let mut f = std::fs::File::open(&dst).unwrap();
    let read = TensorStore::load(&gguf, &mut f, &LoadOptions::default()).unwrap();
    let no_mmap = LoadOptions {
        mmap: false,
        ..LoadOptions::default()
    };
    let (_, copied) = TensorStore::load_file(&dst, &no_mmap).unwrap();
    for store in [&read, &copied] {
        for t in original.iter() {
            let back = &store.get(&t.name).unwrap().data;
            if let (TensorData::T2p(a), TensorData::T2p(b)) = (&t.data, back) {
                assert!(!b.is_shared(), "{}: mapped", t.name);
                assert_eq!(a.blocks(), b.blocks(), "{}", t.name);
            }
        }
    }

    let (want, got) = (logits(&src), logits(&dst));
    assert_eq!(want.len(), got.len());
    let same = want
        .iter()
        .zip(&got)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{rel}: logits of the converted file differ");
}

#[test]
fn converted_pq2_0_maps_in_place_and_gives_the_same_logits() {
    round_trip("qwen3-tiny/qwen3-tiny-pq2_0.gguf", GgmlType::T2P);
}

#[test]
fn converted_qwen35_hybrid_gives_the_same_logits() {
    round_trip("qwen35-tiny/qwen35-tiny-pq2_0.gguf", GgmlType::T2P);
}

#[test]
fn converted_group_64_q2_0_keeps_its_two_scales_per_row() {
    round_trip("wild/q3w-q2_0g64.gguf", GgmlType::T2P_G64);
}

/// The refusal of loading `path`.
fn load_error(path: &Path) -> GgufError {
    match TensorStore::load_file(path, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

#[test]
fn another_layout_version_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, dst)) = converted("qwen3-tiny/qwen3-tiny-pq2_0.gguf", dir.path()) else {
        return;
    };
    let stale = dir.path().join("stale.gguf");
    let newer = Value::U32(T2P_LAYOUT_VERSION + 1);
    copy_with_metadata(&dst, &stale, &[(T2P_LAYOUT_KEY.to_string(), newer)]).unwrap();
    let e = load_error(&stale);
    assert!(matches!(e, GgufError::T2pLayout { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("version {}", T2P_LAYOUT_VERSION + 1))
            && msg.contains("libt2p convert"),
        "{msg}"
    );
    // A layout key of the wrong type is as foreign.
    let odd = dir.path().join("odd.gguf");
    let text = Value::String("one".into());
    copy_with_metadata(&dst, &odd, &[(T2P_LAYOUT_KEY.to_string(), text)]).unwrap();
    assert!(matches!(load_error(&odd), GgufError::T2pLayout { .. }));
}

/// A file of one 8 x 128 T2P matrix (two row groups: 272 bytes), with `kv` as metadata and
/// `bytes` of data declared for it.
fn one_t2p_matrix(path: &Path, kv: &[(String, Value)], bytes: u64) {
    let spec = TensorSpec {
        name: "w".into(),
        dims: vec![128, 8],
        ggml_type: GgmlType::T2P.0,
        bytes,
    };
    let f = std::fs::File::create(path).unwrap();
    let mut w = GgufWriter::begin(f, kv, vec![spec]).unwrap();
    w.tensor_data(&vec![0x55; bytes as usize]).unwrap();
    w.finish().unwrap();
}

#[test]
fn t2p_tensors_without_the_layout_key_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.gguf");
    one_t2p_matrix(&path, &[], 272);
    let e = load_error(&path);
    assert!(matches!(e, GgufError::T2pLayout { .. }), "{e:?}");
    assert!(
        e.to_string().contains("not written by `libt2p convert`"),
        "{e}"
    );

    // With the key it loads: all codes 1 (weight 0), so every weight reads back as zero.
    let key = [(T2P_LAYOUT_KEY.to_string(), Value::U32(T2P_LAYOUT_VERSION))];
    one_t2p_matrix(&path, &key, 272);
    let (_, store) = TensorStore::load_file(&path, &LoadOptions::default()).unwrap();
    let Some(TensorData::T2p(m)) = store.get("w").map(|t| &t.data) else {
        panic!("not a T2P matrix")
    };
    assert!(m.is_shared());
    let mut row = [1.0f32; 128];
    m.dequantize_row(7, &mut row);
    assert!(row.iter().all(|&x| x == 0.0), "{row:?}");
}

#[test]
fn a_t2p_tensor_of_the_wrong_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.gguf");
    let key = [(T2P_LAYOUT_KEY.to_string(), Value::U32(T2P_LAYOUT_VERSION))];
    // One row group's bytes for two: the file ends before the second.
    one_t2p_matrix(&path, &key, 136);
    let e = load_error(&path);
    assert!(
        matches!(
            e,
            GgufError::UnknownTensorType { .. } | GgufError::Shape { .. }
        ),
        "{e:?}"
    );
}
