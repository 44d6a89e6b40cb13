//! Type ids resolved per file: id 42's two layouts (PrismML's group-128 pq2_0 bytes, mainline's
//! group-64 Q2_0) decided from every tensor of the id, never from one tensor's size alone; a
//! file mixing them is refused by tensor name; an id t2p does not know still reads (for
//! `libt2p info`) and the load refuses it by name.

use std::io::Cursor;

use t2p::format::GgmlType;
use t2p::runner::{GgufError, GgufFile, LoadOptions, TensorStore, Value};
use t2p::testkit::gguf_writer::{GgufWriter, TensorSpec};

/// A GGUF file of `tensors` (name, `[k, rows]`, stored id, data bytes), data filled with a
/// pattern whose fp16 scales are small finite numbers (byte 0x11).
fn file(tensors: &[(&str, [u64; 2], u32, u64)]) -> Vec<u8> {
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|&(name, dims, id, bytes)| TensorSpec {
            name: name.into(),
            dims: dims.to_vec(),
            ggml_type: id,
            bytes,
        })
        .collect();
    let kv = [(
        "general.architecture".to_string(),
        Value::String("test".into()),
    )];
    let mut w = GgufWriter::begin(Cursor::new(Vec::new()), &kv, specs).unwrap();
    for &(_, _, _, bytes) in tensors {
        w.tensor_data(&vec![0x11; bytes as usize]).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The tensors of `gguf` (read from `bytes`) loaded with the default options.
fn load(gguf: &GgufFile, bytes: &[u8]) -> Result<TensorStore, GgufError> {
    TensorStore::load(gguf, &mut Cursor::new(bytes), &LoadOptions::default())
}

/// Asserts that the load of `gguf` (read from `bytes`) refuses tensor `name` as of the unknown
/// type id `type_id`.
fn assert_load_refuses_type(gguf: &GgufFile, bytes: &[u8], name: &str, type_id: u32) {
    let e = load(gguf, bytes).unwrap_err();
    assert!(
        matches!(&e, GgufError::UnknownTensorType { name: n, type_id: t, .. } if n == name && *t == type_id),
        "{e}"
    );
}

/// Bytes of `n` weights as group-64 Q2_0 (18 per 64) and as pq2_0 (34 per 128).
fn g64(n: u64) -> u64 {
    n / 64 * 18
}
fn g128(n: u64) -> u64 {
    n / 128 * 34
}

#[test]
fn small_group64_tensor_follows_the_file() {
    // The qwen35 case: 3 rows of 256 take 216 bytes as group 64 and 204 as group 128, both
    // 224 once aligned, so the tensor alone cannot tell; the large matrix beside it can.
    let bytes = file(&[
        ("blk.0.ssm_alpha.weight", [256, 3], 42, g64(768)),
        ("blk.0.attn_q.weight", [256, 64], 42, g64(256 * 64)),
        ("blk.0.ssm_beta.weight", [256, 3], 42, g64(768)),
    ]);
    let gguf = GgufFile::from_bytes(&bytes).unwrap();
    for t in gguf.tensors() {
        assert_eq!(t.ggml_type, GgmlType::Q2_0_G64, "{}", t.name);
        assert_eq!(t.stored_type_id, 42);
        assert_eq!(t.n_bytes, g64(t.n_elements()), "{}", t.name);
    }
    assert_eq!(gguf.tensor("blk.0.ssm_alpha.weight").unwrap().n_bytes, 216);
    // And the values come out as group 64: the loader reads the small tensors with their own
    // 18-byte blocks (whatever path they take), so a row dequantizes with scale 0x1111.
    let store = load(&gguf, &bytes).unwrap();
    let t = store.require("blk.0.ssm_beta.weight").unwrap();
    let mut row = vec![0f32; 256];
    t.dequantize_row(2, &mut row).unwrap();
    let d = t2p::format::f16_to_f32(0x1111);
    // Code byte 0x11 = codes 1, 0, 1, 0 -> weights 0, -d, 0, -d.
    let want: Vec<f32> = (0..256)
        .map(|j| if j % 2 == 1 { -d } else { 0.0 })
        .collect();
    assert_eq!(row, want);
}

#[test]
fn small_group128_tensor_follows_the_file() {
    // The same small shape in a legacy (pq2_0 bytes) file.
    let bytes = file(&[
        ("a.weight", [256, 3], 42, g128(768)),
        ("b.weight", [256, 64], 42, g128(256 * 64)),
    ]);
    let gguf = GgufFile::from_bytes(&bytes).unwrap();
    for t in gguf.tensors() {
        assert_eq!(t.ggml_type, GgmlType::PQ2_0, "{}", t.name);
        assert_eq!(t.n_bytes, g128(t.n_elements()), "{}", t.name);
    }
}

#[test]
fn mixed_layouts_under_one_id_are_refused_by_name() {
    let bytes = file(&[
        ("big.g64.weight", [256, 64], 42, g64(256 * 64)),
        ("other.g64.weight", [256, 32], 42, g64(256 * 32)),
        ("odd.g128.weight", [256, 64], 42, g128(256 * 64)),
    ]);
    let e = GgufFile::from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(&e, GgufError::BadTensor { name, .. } if name == "odd.g128.weight"),
        "{e}"
    );
    assert!(e.to_string().contains("type id 42"), "{e}");
}

#[test]
fn unknown_id_reads_but_does_not_load() {
    let bytes = file(&[
        ("ok.weight", [256, 4], 42, g64(1024)),
        ("strange.weight", [256, 4], 77, 300),
    ]);
    let gguf = GgufFile::from_bytes(&bytes).expect("the header of an unknown id still reads");
    let t = gguf.tensor("strange.weight").unwrap();
    assert_eq!(t.stored_type_id, 77);
    assert_eq!(t.ggml_type.name(), "type77");
    assert_load_refuses_type(&gguf, &bytes, "strange.weight", 77);
}

#[test]
fn id_36_of_another_layout_reads_but_does_not_load() {
    // Id 36 sized unlike I2_S (n / 4 + 32): not bitnet.cpp's layout, so left as stored.
    let bytes = file(&[("w.weight", [128, 4], 36, 64)]);
    let gguf = GgufFile::from_bytes(&bytes).unwrap();
    assert_load_refuses_type(&gguf, &bytes, "w.weight", 36);
}

#[test]
fn empty_rows_of_huge_bitnet_matrices_are_refused_not_overflowed() {
    // 2^62 rows of 0 weights: no bytes, so the header reads; the load must refuse the shape
    // (before the fix, IQ2_BN's byte count overflowed first: a panic with overflow checks on).
    for (id, name) in [(135, "iq2_bn.weight"), (36, "i2_s.weight")] {
        let bytes = file(&[(name, [0, 1 << 62], id, 0)]);
        let Ok(gguf) = GgufFile::from_bytes(&bytes) else {
            continue; // refused at the header: also fine
        };
        assert!(
            load(&gguf, &bytes).is_err(),
            "{name}: an empty matrix loaded"
        );
    }
}
