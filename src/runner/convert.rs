//! `libt2p convert`: a model file rewritten with its ternary matrices already in the T2P
//! layout, so that a later load maps them where they lie instead of reading and repacking.
//!
//! Every matrix the loader repacks into T2P ([`TensorData::T2p`]) is written as its blocks,
//! type [`GgmlType::T2P`] or [`GgmlType::T2P_G64`], with its logical shape; every other tensor
//! is copied byte for byte; the metadata is the source's plus [`T2P_LAYOUT_KEY`]. Loading the
//! result gives the same matrices bit for bit (the blocks are the bytes the repack produced),
//! so every output is the same as from the source. Such a file is t2p's own: llama.cpp does not
//! know the two type ids, and a build of t2p with another [`T2P_LAYOUT_VERSION`] refuses it by
//! name.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::error::{GgufError, Result};
use super::gguf::{TensorInfo, Value};
use super::gguf_writer::{GgufWriter, TensorSpec};
use super::loader::{LoadOptions, TensorData, TensorStore};
use crate::format::{GgmlType, T2P_LAYOUT_KEY, T2P_LAYOUT_VERSION, T2pSlice};

/// What [`convert`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvertReport {
    /// Matrices written in the T2P layout.
    pub t2p_tensors: usize,
    /// Tensors copied as the source holds them.
    pub copied_tensors: usize,
    /// Bytes of the file written.
    pub bytes: u64,
}

/// Writes `dst`: the model `src` with every matrix the loader repacks into T2P (with `opts`)
/// stored as T2P blocks. The file appears at `dst` only once complete (written beside it, then
/// renamed), so an interrupted run leaves no half file to be mapped.
pub fn convert(src: &Path, dst: &Path, opts: &LoadOptions) -> Result<ConvertReport> {
    let (gguf, store) = TensorStore::load_file(src, opts)?;
    // The writer aligns to GGUF's default; the layout key is this build's.
    let mut kv: Vec<(String, Value)> = gguf
        .metadata()
        .iter()
        .filter(|(k, _)| k != "general.alignment" && k != T2P_LAYOUT_KEY)
        .cloned()
        .collect();
    kv.push((T2P_LAYOUT_KEY.to_string(), Value::U32(T2P_LAYOUT_VERSION)));

    let blocks_of = |t: &TensorInfo| match store.get(&t.name).map(|s| &s.data) {
        Some(TensorData::T2p(m)) => Some(m.blocks()),
        _ => None,
    };
    let specs: Vec<TensorSpec> = gguf
        .tensors()
        .iter()
        .map(|t| match blocks_of(t) {
            Some(b) => TensorSpec {
                name: t.name.clone(),
                dims: t.shape.clone(),
                ggml_type: match b {
                    T2pSlice::G128(_) => GgmlType::T2P.0,
                    T2pSlice::G64(_) => GgmlType::T2P_G64.0,
                },
                bytes: b.bytes().len() as u64,
            },
            None => TensorSpec {
                name: t.name.clone(),
                dims: t.shape.clone(),
                ggml_type: t.stored_type_id,
                bytes: t.n_bytes,
            },
        })
        .collect();

    let io_err = |what: &Path, e: std::io::Error| GgufError::Io {
        what: what.display().to_string(),
        offset: 0,
        message: e.to_string(),
    };
    let tmp = dst.with_extension(format!("partial-{}", std::process::id()));
    let written = (|| -> Result<ConvertReport> {
        let out = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        let mut w = GgufWriter::begin(BufWriter::with_capacity(8 << 20, out), &kv, specs)
            .map_err(|e| io_err(&tmp, e))?;
        let mut input = File::open(src).map_err(|e| io_err(src, e))?;
        let mut report = ConvertReport::default();
        let mut buf = Vec::new();
        for t in gguf.tensors() {
            match blocks_of(t) {
                Some(b) => {
                    w.tensor_data(b.bytes()).map_err(|e| io_err(&tmp, e))?;
                    report.t2p_tensors += 1;
                }
                None => {
                    let range = gguf.tensor_file_range(t);
                    buf.resize((range.end - range.start) as usize, 0);
                    input
                        .seek(SeekFrom::Start(range.start))
                        .and_then(|_| input.read_exact(&mut buf))
                        .map_err(|e| io_err(src, e))?;
                    w.tensor_data(&buf).map_err(|e| io_err(&tmp, e))?;
                    report.copied_tensors += 1;
                }
            }
        }
        let mut out = w.finish().map_err(|e| io_err(&tmp, e))?;
        out.flush().map_err(|e| io_err(&tmp, e))?;
        report.bytes = out.stream_position().map_err(|e| io_err(&tmp, e))?;
        Ok(report)
    })();
    match written {
        Ok(report) => {
            std::fs::rename(&tmp, dst).map_err(|e| io_err(dst, e))?;
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
