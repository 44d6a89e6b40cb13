//! Tensor data into memory with ordinary reads (no mmap), ternary matrices straight into T2P.
//!
//! A ternary matrix going to T2P is read a chunk of whole row groups (a few MB) at a time into a
//! reused buffer and repacked from there into its final buffer, so the model is never held
//! twice: peak memory is the model plus one chunk per loading thread. From a file
//! ([`TensorStore::load_file`]) the chunks of a matrix are read with positioned reads and
//! repacked on [`LoadOptions::threads`] threads at once; from any other reader, in order on the
//! calling thread. Both give the same bytes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;

use super::error::{GgufError, Result};
use super::gguf::{GgufFile, TensorInfo};
use super::memory::WeightArena;
use crate::format::{
    BlockPq2_0, BlockT2p, BlockT2pG64, GgmlType, QK_PQ2_0, ROWS_PER_T2P, RowPairBlock,
    T2P_LAYOUT_KEY, T2P_LAYOUT_VERSION, TernaryBlock, bf16_to_f32, f16_to_f32, repack_to_t2p,
    t2p_block_count, t2p_row_groups, with_block_type,
};
use crate::matmul::{Int8Matrix, QuantMatrix, SharedBytes, T2pMatrix};

pub use crate::format::{BlockQ8_0, QK8_0};

/// A tensor's data as held in memory.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// A ternary matrix (any of [`GgmlType::is_ternary`]) repacked into T2P row groups, ready
    /// for [`crate::matmul`]; [`Tensor::source_type`] says which format the file had.
    T2p(T2pMatrix),
    /// pq2_0 blocks in file order (shapes T2P cannot hold, or kept on request). A tensor in
    /// another ternary format is converted to this losslessly (one tq* block gives two pq2_0
    /// blocks with the same scale).
    Pq2_0(Vec<BlockPq2_0>),
    /// 32-bit floats.
    F32(Vec<f32>),
    /// IEEE half bits.
    F16(Vec<u16>),
    /// bfloat16 bits.
    Bf16(Vec<u16>),
    /// One of ggml's standard block types (Q4_0 ... Q6_K, Q8_0), in the file's bytes.
    Quant(QuantMatrix),
    /// A BitNet matrix (I2_S, IQ2_BN): T2P blocks of scale 1.0 and the f32 scales, for
    /// per-token int8 activations.
    Int8(Int8Matrix),
}

/// A loaded tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Name in the file.
    pub name: String,
    /// Dimensions in ggml order (`shape[0]` contiguous; a matrix is `[k, rows]`).
    pub shape: Vec<u64>,
    /// The GGML type of the tensor in the file (e.g. tq1_0 for a tq1_0 matrix now held as
    /// T2P; legacy id 42 with the pq2_0 layout is pq2_0, as [`TensorInfo::ggml_type`] says).
    pub source_type: GgmlType,
    /// The data.
    pub data: TensorData,
}

impl Tensor {
    /// Tensor `t` of a file, holding `data`.
    fn new(t: &TensorInfo, data: TensorData) -> Tensor {
        Tensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            source_type: t.ggml_type,
            data,
        }
    }

    /// The GGML type of the tensor in the file ([`source_type`](Self::source_type)): a T2P
    /// matrix reports the ternary format it was repacked from.
    pub fn ggml_type(&self) -> GgmlType {
        self.source_type
    }

    /// Elements per row (`shape[0]`).
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(0) as usize
    }

    /// Number of rows (the product of the other dimensions).
    pub fn n_rows(&self) -> usize {
        self.shape.iter().skip(1).product::<u64>() as usize
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// Bytes of data held.
    pub fn size_bytes(&self) -> usize {
        match &self.data {
            TensorData::T2p(m) => m.size_bytes(),
            TensorData::Pq2_0(v) => std::mem::size_of_val(v.as_slice()),
            TensorData::F32(v) => 4 * v.len(),
            TensorData::F16(v) | TensorData::Bf16(v) => 2 * v.len(),
            TensorData::Quant(m) => m.size_bytes(),
            TensorData::Int8(m) => m.size_bytes(),
        }
    }

    /// The T2P matrix, if the tensor was repacked.
    pub fn as_t2p(&self) -> Option<&T2pMatrix> {
        match &self.data {
            TensorData::T2p(m) => Some(m),
            _ => None,
        }
    }

    /// The floats, if the tensor is F32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Dequantizes row `row` (of [`n_rows`](Self::n_rows), each [`row_len`](Self::row_len)
    /// long) into `out`: the embedding lookup and the path for small non-T2P weights.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        let k = self.row_len();
        if row >= self.n_rows() || out.len() < k {
            return Err(GgufError::Shape {
                name: self.name.clone(),
                reason: format!(
                    "row {row} of {} (length {k}) into a buffer of {}",
                    self.n_rows(),
                    out.len()
                ),
            });
        }
        let out = &mut out[..k];
        // The fields are public, so the data may not match the shape: check every slice.
        let short = || GgufError::Shape {
            name: self.name.clone(),
            reason: format!("data shorter than shape {:?}", self.shape),
        };
        let span = row * k..(row + 1) * k;
        match &self.data {
            TensorData::F32(v) => out.copy_from_slice(v.get(span).ok_or_else(short)?),
            TensorData::F16(v) => {
                for (o, &b) in out.iter_mut().zip(v.get(span).ok_or_else(short)?) {
                    *o = f16_to_f32(b);
                }
            }
            TensorData::Bf16(v) => {
                for (o, &b) in out.iter_mut().zip(v.get(span).ok_or_else(short)?) {
                    *o = bf16_to_f32(b);
                }
            }
            TensorData::Quant(m) => {
                if row >= m.rows() || m.k() != k {
                    return Err(short());
                }
                m.dequantize_row(row, out);
            }
            TensorData::Int8(m) => {
                if row >= m.rows() || m.k() != k {
                    return Err(short());
                }
                m.dequantize_row(row, out);
            }
            TensorData::Pq2_0(v) => {
                let nb = k / QK_PQ2_0;
                let blocks = v.get(row * nb..(row + 1) * nb).ok_or_else(short)?;
                for (chunk, b) in out.chunks_exact_mut(QK_PQ2_0).zip(blocks) {
                    chunk.copy_from_slice(&b.dequantize());
                }
            }
            TensorData::T2p(m) => {
                if row >= m.rows() {
                    return Err(short());
                }
                m.dequantize_row(row, out);
            }
        }
        Ok(())
    }

    /// The whole tensor as f32, row after row.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let k = self.row_len();
        let mut out = vec![0f32; self.n_elements()];
        if k > 0 {
            for (r, chunk) in out.chunks_exact_mut(k).enumerate() {
                self.dequantize_row(r, chunk)?;
            }
        }
        Ok(out)
    }
}

/// How far a load has come: bytes of tensor data read so far, of the file's total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadProgress {
    /// Bytes read so far.
    pub done_bytes: u64,
    /// Bytes of tensor data in the file; the last report of a load has `done_bytes == total_bytes`.
    pub total_bytes: u64,
}

/// A receiver of [`LoadProgress`] reports, called after every chunk read (the CLI draws a progress).
pub type ProgressFn = Arc<dyn Fn(LoadProgress) + Send + Sync>;

/// How [`TensorStore::load`] treats tensors.
#[derive(Clone)]
pub struct LoadOptions {
    /// Repack eligible ternary matrices into T2P (default true); when false they are held as
    /// pq2_0 blocks ([`TensorData::Pq2_0`]).
    pub repack_t2p: bool,
    /// Names of ternary tensors to keep as pq2_0 blocks even when T2P could hold them.
    pub keep_pq2_0: Vec<String>,
    /// Called with the progress after every chunk read; `None` (the default) reports nothing.
    pub progress: Option<ProgressFn>,
    /// Bytes read per `read` call (rounded to whole T2P row groups), default 4 MiB.
    pub chunk_bytes: usize,
    /// Threads that read and repack the chunks of a ternary matrix at once when the source is
    /// a file ([`TensorStore::load_file`]); default: the machine's parallelism, at most 8 (a
    /// few cores already saturate the memory the load writes, and each thread holds one chunk).
    /// One reads the file in order on the calling thread.
    pub threads: usize,
    /// Use the T2P matrices of a converted file (`libt2p convert`) where they lie in the mapped
    /// file (default true); when false they are read into memory of their own, as llama.cpp's
    /// `--no-mmap` does.
    pub mmap: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            repack_t2p: true,
            keep_pq2_0: Vec::new(),
            progress: None,
            chunk_bytes: 4 << 20,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            mmap: true,
        }
    }
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("repack_t2p", &self.repack_t2p)
            .field("keep_pq2_0", &self.keep_pq2_0)
            .field("progress", &self.progress.as_ref().map(|_| "callback"))
            .field("chunk_bytes", &self.chunk_bytes)
            .field("threads", &self.threads)
            .field("mmap", &self.mmap)
            .finish()
    }
}

impl LoadOptions {
    /// Whether tensor `t` will be held as a [`TensorData::T2p`] matrix.
    pub fn uses_t2p(&self, t: &TensorInfo) -> bool {
        self.repack_t2p && t.is_t2p_candidate() && !self.keep_pq2_0.iter().any(|n| n == &t.name)
    }
}

/// All tensors of a file, by name.
#[derive(Debug, Default)]
pub struct TensorStore {
    tensors: HashMap<String, Tensor>,
    order: Vec<String>,
}

/// Counts the bytes read and passes them to [`LoadOptions::progress`] (from any of the threads
/// reading a matrix).
struct Counter<'a> {
    report: Option<&'a ProgressFn>,
    done: AtomicU64,
    total: u64,
}

impl<'a> Counter<'a> {
    fn new(report: Option<&'a ProgressFn>, total: u64) -> Self {
        Counter {
            report,
            done: AtomicU64::new(0),
            total,
        }
    }

    fn inc(&self, n: usize) {
        let done = self.done.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        self.report_now(done);
    }

    /// Reports the end of the load, so the last report always has `done == total`.
    fn finish(&self) {
        self.done.store(self.total, Ordering::Relaxed);
        self.report_now(self.total);
    }

    fn report_now(&self, done: u64) {
        if let Some(f) = self.report {
            f(LoadProgress {
                done_bytes: done,
                total_bytes: self.total,
            });
        }
    }
}

/// Reads `dst.len()` bytes in chunks of `chunk`, counting them in `progress`.
fn read_chunked<R: Read>(
    src: &mut R,
    dst: &mut [u8],
    chunk: usize,
    progress: &Counter,
    what: &dyn Fn() -> String,
    offset: u64,
) -> Result<()> {
    let mut done = 0u64;
    for part in dst.chunks_mut(chunk.max(1)) {
        src.read_exact(part).map_err(|e| GgufError::Io {
            what: what(),
            offset: offset + done,
            message: e.to_string(),
        })?;
        done += part.len() as u64;
        progress.inc(part.len());
    }
    Ok(())
}

fn shape_err(name: &str, e: crate::Error) -> GgufError {
    GgufError::Shape {
        name: name.to_string(),
        reason: e.to_string(),
    }
}

impl TensorStore {
    /// Opens `path`, reads its header and loads every tensor.
    pub fn load_file(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<(GgufFile, Self)> {
        let path = path.as_ref();
        let gguf = GgufFile::open(path)?;
        let mut f = File::open(path).map_err(|e| GgufError::Io {
            what: path.display().to_string(),
            offset: 0,
            message: e.to_string(),
        })?;
        // A second handle for positioned reads: the threads of a matrix read their chunks with
        // it at once, while `f` keeps the sequential position for everything else.
        let shared = f.try_clone().map_err(|e| GgufError::Io {
            what: path.display().to_string(),
            offset: 0,
            message: e.to_string(),
        })?;
        let mapped = match opts.mmap {
            true => Self::map_t2p(&gguf, &f, path)?,
            false => None,
        };
        let store = Self::load_from(&gguf, &mut f, Some(&shared), mapped, opts)?;
        Ok((gguf, store))
    }

    /// The whole file mapped, when it holds matrices already in the T2P layout (`libt2p
    /// convert`): those are then used where they lie, not read.
    #[cfg(unix)]
    fn map_t2p(gguf: &GgufFile, f: &File, path: &Path) -> Result<Option<SharedBytes>> {
        if !gguf.tensors().iter().any(|t| t.ggml_type.is_t2p()) {
            return Ok(None);
        }
        let map = super::memory::MappedFile::new(f).map_err(|e| GgufError::Io {
            what: format!("{} (mapping it)", path.display()),
            offset: 0,
            message: e.to_string(),
        })?;
        Ok(Some(Arc::new(map)))
    }

    /// Elsewhere the T2P matrices are read like any other tensor.
    #[cfg(not(unix))]
    fn map_t2p(_: &GgufFile, _: &File, _: &Path) -> Result<Option<SharedBytes>> {
        Ok(None)
    }

    /// Loads every tensor of `gguf` from `src` (the same file the header came from).
    pub fn load<R: Read + Seek>(gguf: &GgufFile, src: &mut R, opts: &LoadOptions) -> Result<Self> {
        Self::load_from(gguf, src, None, None, opts)
    }

    /// [`load`](Self::load), with `shared` (the same file) read at positions by several
    /// threads at once where [`LoadOptions::threads`] allows, and the T2P matrices borrowed
    /// from `mapped` (the same file's bytes) when given.
    fn load_from<R: Read + Seek>(
        gguf: &GgufFile,
        src: &mut R,
        shared: Option<&File>,
        mapped: Option<SharedBytes>,
        opts: &LoadOptions,
    ) -> Result<Self> {
        // Refuse before reading anything, so a bad file costs no I/O.
        for t in gguf.tensors() {
            if t.ggml_type.tensor_bytes(&t.shape) != Some(t.n_bytes) {
                // An id the header reader found no layout for (it only sized it by its room).
                return Err(GgufError::UnknownTensorType {
                    name: t.name.clone(),
                    offset: t.info_offset,
                    type_id: t.stored_type_id,
                });
            }
            if !t.ggml_type.is_loadable() {
                return Err(GgufError::UnsupportedTensorType {
                    name: t.name.clone(),
                    type_name: t.ggml_type.name(),
                });
            }
        }
        if gguf.tensors().iter().any(|t| t.ggml_type.is_t2p()) {
            check_t2p_layout(gguf)?;
        }
        let total: u64 = gguf.tensors().iter().map(|t| t.n_bytes).sum();
        let progress = Counter::new(opts.progress.as_ref(), total);
        let mut file = FileReader {
            gguf,
            src,
            shared,
            mapped,
            scratch: Vec::new(),
            arena: WeightArena::new(repacked_bytes(gguf, opts)),
            opts,
            progress: &progress,
        };
        let mut store = TensorStore::default();
        let mut in_arena = Vec::new();
        for t in gguf.tensors() {
            store.order.push(t.name.clone());
            match file.load_one(t)? {
                Loaded::Data(data) => {
                    store.tensors.insert(t.name.clone(), Tensor::new(t, data));
                }
                Loaded::InArena(m) => in_arena.push((t, m)),
            }
        }
        if let Some(arena) = file.arena.take() {
            let bytes: SharedBytes = Arc::new(arena);
            for (t, m) in in_arena {
                let data = m.into_data(&bytes).map_err(|e| shape_err(&t.name, e))?;
                store.tensors.insert(t.name.clone(), Tensor::new(t, data));
            }
        }
        progress.finish();
        Ok(store)
    }

    /// The tensor `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// The tensor `name`, or [`GgufError::MissingTensor`].
    pub fn require(&self, name: &str) -> Result<&Tensor> {
        self.get(name).ok_or_else(|| GgufError::MissingTensor {
            name: name.to_string(),
        })
    }

    /// Removes and returns the tensor `name` (to move it into a model struct).
    pub fn take(&mut self, name: &str) -> Option<Tensor> {
        self.order.retain(|n| n != name);
        self.tensors.remove(name)
    }

    /// Tensor names in file order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the store holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Tensors in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Tensor> {
        self.order.iter().filter_map(|n| self.tensors.get(n))
    }

    /// Bytes of tensor data held.
    pub fn total_bytes(&self) -> usize {
        self.tensors.values().map(Tensor::size_bytes).sum()
    }
}

/// One GGUF file being loaded: the header, where its bytes come from, how to load them and the
/// count of bytes read so far.
struct FileReader<'a, R> {
    gguf: &'a GgufFile,
    src: &'a mut R,
    /// The same file, for positioned reads from several threads (`None`: `src` only).
    shared: Option<&'a File>,
    /// The same file mapped, for its T2P matrices (`None`: they are read).
    mapped: Option<SharedBytes>,
    /// One read buffer per thread of the parallel repack, kept from matrix to matrix (as
    /// `u64`s so that any block type can be cast from them): a buffer allocated per matrix
    /// would cost a page fault and a page clear per 4 KiB read, as much as the matrix itself.
    scratch: Vec<Vec<u64>>,
    /// Where the repacked matrices go, one after another ([`repacked_bytes`]); `None`: each
    /// into an allocation of its own.
    arena: Option<WeightArena>,
    opts: &'a LoadOptions,
    progress: &'a Counter<'a>,
}

impl<R: Read> FileReader<'_, R> {
    /// Tensor `t`'s data as `n` values of `T` (its byte size checked against the file's).
    fn read_vec<T: Pod>(&mut self, t: &TensorInfo, n: usize) -> Result<Vec<T>> {
        let mut v = crate::huge_pages::zeroed_vec::<T>(n);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
        if bytes.len() as u64 != t.n_bytes {
            return Err(GgufError::Shape {
                name: t.name.clone(),
                reason: format!("{} bytes expected, {} in file", bytes.len(), t.n_bytes),
            });
        }
        read_chunked(
            self.src,
            bytes,
            self.opts.chunk_bytes,
            self.progress,
            &|| format!("data of tensor {:?}", t.name),
            self.gguf.tensor_file_range(t).start,
        )?;
        Ok(v)
    }

    /// Loads a matrix already in the T2P layout: borrowed from the mapped file when there is
    /// one, else read. Both check that the bytes are exactly the matrix's row groups.
    fn load_t2p(&mut self, t: &TensorInfo) -> Result<TensorData> {
        let (k, rows) = matrix_dims(t)?;
        if t.shape.len() != 2 {
            return Err(GgufError::Shape {
                name: t.name.clone(),
                reason: format!("a T2P matrix must be 2-D, not {:?}", t.shape),
            });
        }
        let g64 = t.ggml_type == GgmlType::T2P_G64;
        let m = match &self.mapped {
            Some(bytes) => {
                let r = self.gguf.tensor_file_range(t);
                let range = usize::try_from(r.start).unwrap_or(usize::MAX)
                    ..usize::try_from(r.end).unwrap_or(usize::MAX);
                self.progress.inc(range.len());
                T2pMatrix::from_shared(Arc::clone(bytes), range, rows, k, g64)
            }
            None => {
                let n = t2p_block_count(rows, k).map_err(|e| shape_err(&t.name, e))?;
                match g64 {
                    true => {
                        T2pMatrix::from_t2p_blocks(self.read_vec::<BlockT2pG64>(t, n)?, rows, k)
                    }
                    false => T2pMatrix::from_t2p_blocks(self.read_vec::<BlockT2p>(t, n)?, rows, k),
                }
            }
        };
        Ok(TensorData::T2p(m.map_err(|e| shape_err(&t.name, e))?))
    }

    /// Loads a tensor of one of ggml's block types as the file holds it (checked: the byte size
    /// its shape needs, finite scales).
    fn load_quant(&mut self, t: &TensorInfo) -> Result<TensorData> {
        let k = usize::try_from(t.shape.first().copied().unwrap_or(0)).ok();
        let rows = usize::try_from(t.n_rows()).ok();
        let (Some(k), Some(rows)) = (k, rows) else {
            return Err(GgufError::Shape {
                name: t.name.clone(),
                reason: format!("shape {:?} does not fit in memory", t.shape),
            });
        };
        let bytes =
            QuantMatrix::bytes_for(t.ggml_type, rows, k).map_err(|e| shape_err(&t.name, e))?;
        if bytes as u64 != t.n_bytes {
            return Err(GgufError::Shape {
                name: t.name.clone(),
                reason: format!(
                    "{rows} rows of {k} {} take {bytes} bytes, the file gives {}",
                    t.ggml_type, t.n_bytes
                ),
            });
        }
        let mut words: Vec<u16> = self.read_vec(t, bytes / 2)?;
        if cfg!(target_endian = "big") {
            // Only the fp16 fields are multi-byte, and they sit at even offsets of every block.
            words.iter_mut().for_each(|x| *x = u16::from_le(*x));
        }
        let m = QuantMatrix::new(t.ggml_type, rows, k, words).map_err(|e| shape_err(&t.name, e))?;
        Ok(TensorData::Quant(m))
    }

    /// Loads a BitNet tensor (I2_S, IQ2_BN, IQ1_BN) into an [`Int8Matrix`]: its bytes are read whole
    /// (a few MB per matrix: 2 bits a weight) and repacked.
    fn load_int8(&mut self, t: &TensorInfo) -> Result<Loaded> {
        let (k, rows) = matrix_dims(t)?;
        if t.shape.len() != 2 || k == 0 || !k.is_multiple_of(QK_PQ2_0) {
            return Err(GgufError::Shape {
                name: t.name.clone(),
                reason: format!(
                    "{} of shape {:?}: T2P needs a matrix of rows of a multiple of 128",
                    t.ggml_type, t.shape
                ),
            });
        }
        let n = usize::try_from(t.n_bytes).map_err(|_| GgufError::Shape {
            name: t.name.clone(),
            reason: "size does not fit in memory".into(),
        })?;
        let bytes: Vec<u8> = self.read_vec(t, n)?;
        let bad = |e| shape_err(&t.name, e);
        let count = t2p_block_count(rows, k).map_err(bad)?;
        if let Some((range, blocks)) = self.arena.as_mut().and_then(|a| a.take(count)) {
            let scales = Int8Matrix::repack_bitnet(t.ggml_type, &bytes, rows, k, blocks);
            return Ok(Loaded::InArena(ArenaMatrix {
                range,
                rows,
                k,
                g64: false,
                int8_scales: Some(scales.map_err(bad)?),
            }));
        }
        let m = Int8Matrix::from_bitnet(t.ggml_type, &bytes, rows, k);
        Ok(Loaded::Data(TensorData::Int8(m.map_err(bad)?)))
    }

    /// Loads a ternary tensor (pq2_0 too when it goes to T2P): repacked into T2P when
    /// [`LoadOptions::uses_t2p`], else converted to pq2_0 blocks. Reads whole row groups (or, for
    /// pq2_0 blocks, whole source blocks) a chunk at a time into one reused buffer, so memory is
    /// the result plus one chunk.
    fn load_ternary<B: TernaryBlock>(&mut self, t: &TensorInfo) -> Result<Loaded> {
        let name = &t.name;
        let bad = |reason: String| GgufError::Shape {
            name: name.clone(),
            reason,
        };
        let row_len = t.shape.first().copied().unwrap_or(0);
        if !row_len.is_multiple_of(B::WEIGHTS as u64) {
            // The header reader refuses this already; repeated so no path depends on it.
            return Err(bad(format!(
                "row length {row_len} is not a multiple of {} (the {} block)",
                B::WEIGHTS,
                B::NAME
            )));
        }
        let src_size = std::mem::size_of::<B>();
        let n_src = t
            .n_elements()
            .checked_div(B::WEIGHTS as u64)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("block count does not fit in memory".into()))?;
        if (n_src as u64).checked_mul(src_size as u64) != Some(t.n_bytes) {
            return Err(bad(format!(
                "{n_src} {} blocks of {src_size} bytes expected, {} bytes in file",
                B::NAME,
                t.n_bytes
            )));
        }
        let mut data = TensorBytes {
            src: &mut *self.src,
            start: self.gguf.tensor_file_range(t).start,
            progress: self.progress,
            name,
            arena: self.arena.as_mut(),
        };
        if self.opts.uses_t2p(t) {
            let (k, rows) = matrix_dims(t)?;
            #[cfg(unix)]
            if let Some(file) = self.shared
                && self.opts.threads > 1
            {
                let (chunk, threads) = (self.opts.chunk_bytes, self.opts.threads);
                self.scratch.resize_with(threads, Vec::new);
                let scratch = &mut self.scratch;
                return data.repack_to_t2p_parallel::<B>(file, scratch, rows, k, chunk);
            }
            return data.repack_to_t2p::<B>(rows, k, self.opts.chunk_bytes);
        }
        // Any other shape: lossless pq2_0 blocks (formats with a scale per 128 weights only:
        // Q2_0 runs as stored instead).
        if B::WEIGHTS / QK_PQ2_0 == 0 {
            return Err(bad(format!("{} is not held as pq2_0 blocks", B::NAME)));
        }
        data.convert_to_pq2_0::<B>(n_src, self.opts.chunk_bytes)
            .map(Loaded::Data)
    }
}

impl<R: Read + Seek> FileReader<'_, R> {
    /// Loads tensor `t`: T2P, pq2_0 blocks, a ggml block matrix or floats, as
    /// [`LoadOptions`] and its type decide.
    fn load_one(&mut self, t: &TensorInfo) -> Result<Loaded> {
        self.gguf.seek_to(self.src, t)?;
        let n = t.n_elements() as usize;
        let data = match t.ggml_type {
            GgmlType::PQ2_0 if !self.opts.uses_t2p(t) => {
                TensorData::Pq2_0(self.read_vec(t, n / QK_PQ2_0)?)
            }
            GgmlType::F32 => {
                let mut v: Vec<f32> = self.read_vec(t, n)?;
                if cfg!(target_endian = "big") {
                    v.iter_mut()
                        .for_each(|x| *x = f32::from_bits(u32::from_le(x.to_bits())));
                }
                TensorData::F32(v)
            }
            GgmlType::F16 | GgmlType::BF16 => {
                let mut v: Vec<u16> = self.read_vec(t, n)?;
                if cfg!(target_endian = "big") {
                    v.iter_mut().for_each(|x| *x = u16::from_le(*x));
                }
                if t.ggml_type == GgmlType::F16 {
                    TensorData::F16(v)
                } else {
                    TensorData::Bf16(v)
                }
            }
            ty if ty.is_int8_ternary() => return self.load_int8(t),
            ty if ty.is_t2p() => self.load_t2p(t)?,
            // Q2_0 (group 64) goes to T2P where its rows allow, else as the file holds it.
            ty if ty.is_quant() && !self.opts.uses_t2p(t) => self.load_quant(t)?,
            other => with_block_type!(ternary other,
                B => return self.load_ternary::<B>(t),
                _ => {
                    return Err(GgufError::UnsupportedTensorType {
                        name: t.name.clone(),
                        type_name: other.name(),
                    });
                }
            ),
        };
        Ok(Loaded::Data(data))
    }
}

/// A tensor as [`FileReader::load_one`] leaves it.
enum Loaded {
    /// Loaded whole.
    Data(TensorData),
    /// A matrix repacked into the load's [`WeightArena`], which becomes shared (and so
    /// matrices) only once every matrix in it is written.
    InArena(ArenaMatrix),
}

/// Where a repacked matrix lies in the load's [`WeightArena`].
struct ArenaMatrix {
    range: Range<usize>,
    rows: usize,
    k: usize,
    g64: bool,
    /// A BitNet matrix's f32 scales ([`Int8Matrix`]); `None`: a T2P matrix.
    int8_scales: Option<Vec<f32>>,
}

impl ArenaMatrix {
    /// The matrix, its blocks read where they lie in `arena`.
    fn into_data(self, arena: &SharedBytes) -> crate::Result<TensorData> {
        let ArenaMatrix {
            range,
            rows,
            k,
            g64,
            int8_scales,
        } = self;
        let m = T2pMatrix::from_shared(Arc::clone(arena), range, rows, k, g64)?;
        Ok(match int8_scales {
            Some(scales) => TensorData::Int8(Int8Matrix::new(m, scales)?),
            None => TensorData::T2p(m),
        })
    }
}

/// Bytes of every T2P matrix the load repacks (each BitNet matrix, and those
/// [`LoadOptions::uses_t2p`] takes from a ternary type; one in the T2P layout already is read
/// or mapped as it is): the size of the load's [`WeightArena`]. A tensor whose shape is refused
/// adds nothing: its load fails anyway.
fn repacked_bytes(gguf: &GgufFile, opts: &LoadOptions) -> usize {
    let bytes = |t: &TensorInfo| {
        let block = match t.ggml_type {
            ty if ty.is_int8_ternary() => size_of::<BlockT2p>(),
            _ if !opts.uses_t2p(t) => return None,
            ty => with_block_type!(ternary ty,
                B => size_of::<<B as TernaryBlock>::Target>(),
                _ => return None,
            ),
        };
        let (k, rows) = matrix_dims(t).ok()?;
        t2p_block_count(rows, k).ok()?.checked_mul(block)
    };
    let tensors = gguf.tensors().iter();
    tensors.filter_map(bytes).fold(0, usize::saturating_add)
}

/// Refuses a file with T2P matrices unless this build wrote their layout: the layout version
/// key must be present (else the file was not written by `libt2p convert`) and equal to
/// [`T2P_LAYOUT_VERSION`] (else another build of t2p wrote it).
fn check_t2p_layout(gguf: &GgufFile) -> Result<()> {
    let reason = match gguf.get(T2P_LAYOUT_KEY) {
        None => format!(
            "the file holds T2P matrices (type ids {} / {}) but no {T2P_LAYOUT_KEY:?} key: it was \
             not written by `libt2p convert`; load the original model file instead",
            GgmlType::T2P.0,
            GgmlType::T2P_G64.0
        ),
        Some(v) => match v.as_u64() {
            Some(found) if found == u64::from(T2P_LAYOUT_VERSION) => return Ok(()),
            found => format!(
                "the file's T2P matrices were written in layout version {} ({T2P_LAYOUT_KEY:?}); \
                 this build of t2p reads version {T2P_LAYOUT_VERSION}: run `libt2p convert` \
                 again on the original model file",
                found.map_or_else(|| format!("{v:?}"), |n| n.to_string())
            ),
        },
    };
    Err(GgufError::T2pLayout { reason })
}

/// `(k, rows)` of a 2-D tensor, as `usize`.
fn matrix_dims(t: &TensorInfo) -> Result<(usize, usize)> {
    let dim = |i: usize| {
        t.shape
            .get(i)
            .and_then(|&d| usize::try_from(d).ok())
            .ok_or_else(|| GgufError::Shape {
                name: t.name.clone(),
                reason: format!(
                    "shape {:?} is not a matrix this machine can address",
                    t.shape
                ),
            })
    };
    Ok((dim(0)?, dim(1)?))
}

/// A tensor's bytes in the file, read a chunk at a time into one reused buffer.
struct TensorBytes<'a, R> {
    src: &'a mut R,
    start: u64,
    progress: &'a Counter<'a>,
    name: &'a str,
    /// Where the repacked blocks go (`None`: a fresh allocation).
    arena: Option<&'a mut WeightArena>,
}

impl<R: Read> TensorBytes<'_, R> {
    /// Reads source blocks from byte `offset` of the tensor into `part`.
    fn read<B: TernaryBlock>(&mut self, part: &mut [B], offset: usize) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(part);
        let len = bytes.len();
        let what = || format!("data of tensor {:?}", self.name);
        let at = self.start + offset as u64;
        read_chunked(self.src, bytes, len, self.progress, &what, at)
    }

    /// The `rows x k` matrix repacked into T2P by `fill`, which gets the chunk plan and the
    /// zeroed result (the setup and the finish of both repack paths), in the arena where
    /// there is one with room.
    fn build_t2p<B: TernaryBlock>(
        &mut self,
        rows: usize,
        k: usize,
        chunk_bytes: usize,
        fill: impl FnOnce(&mut Self, &RepackPlan, &mut [B::Target]) -> Result<()>,
    ) -> Result<Loaded> {
        let name = self.name;
        let plan = RepackPlan::new::<B>(name, rows, k, chunk_bytes)?;
        let arena = self.arena.take();
        if let Some((range, blocks)) = arena.and_then(|a| a.take::<B::Target>(plan.nblocks)) {
            fill(self, &plan, blocks)?;
            let g64 = <B::Target as RowPairBlock>::HALVES == 2;
            return Ok(Loaded::InArena(ArenaMatrix {
                range,
                rows,
                k,
                g64,
                int8_scales: None,
            }));
        }
        let mut blocks = crate::huge_pages::zeroed_vec::<B::Target>(plan.nblocks);
        fill(self, &plan, &mut blocks)?;
        let m = T2pMatrix::from_t2p_blocks(blocks, rows, k).map_err(|e| shape_err(name, e))?;
        Ok(Loaded::Data(TensorData::T2p(m)))
    }

    /// The `rows x k` matrix repacked into T2P, whole row groups a chunk at a time (the last
    /// group may be short).
    fn repack_to_t2p<B: TernaryBlock>(
        &mut self,
        rows: usize,
        k: usize,
        chunk_bytes: usize,
    ) -> Result<Loaded> {
        self.build_t2p::<B>(rows, k, chunk_bytes, |data, plan, blocks| {
            let mut buf = vec![B::zeroed(); plan.rows_per_chunk * plan.per_row];
            for (c, out) in blocks.chunks_mut(plan.chunk_blocks()).enumerate() {
                let (r0, n_rows) = plan.chunk_rows(c, out.len());
                let part = &mut buf[..n_rows * plan.per_row];
                data.read(part, r0 * plan.row_bytes)?;
                repack_to_t2p(part, n_rows, k, out).map_err(|e| shape_err(data.name, e))?;
            }
            Ok(())
        })
    }

    /// [`repack_to_t2p`](Self::repack_to_t2p) on `threads` threads: chunk `c` of whole row
    /// groups is read with a positioned read of `file` and repacked by thread `c % threads`, each
    /// into its own slice of the result, so reading (a copy out of the page cache) and
    /// repacking run on every core, and each thread's pages of the result are first touched by
    /// the thread that fills them. The same bytes as the sequential path.
    /// `scratch` holds a read buffer per thread (its length is the thread count).
    #[cfg(unix)]
    fn repack_to_t2p_parallel<B: TernaryBlock>(
        &mut self,
        file: &File,
        scratch: &mut [Vec<u64>],
        rows: usize,
        k: usize,
        chunk_bytes: usize,
    ) -> Result<Loaded> {
        use std::os::unix::fs::FileExt;
        self.build_t2p::<B>(rows, k, chunk_bytes, |data, plan, blocks| {
            let (name, start, progress) = (data.name, data.start, data.progress);
            let chunks: Vec<_> = blocks.chunks_mut(plan.chunk_blocks()).enumerate().collect();
            let threads = scratch.len().min(chunks.len()).max(1);
            let mut shares: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
            for (c, out) in chunks {
                shares[c % threads].push((c, out));
            }
            let buf_words = (plan.rows_per_chunk * plan.row_bytes).div_ceil(8);
            let work = |share: Vec<(usize, &mut [B::Target])>, buf: &mut Vec<u64>| -> Result<()> {
                if buf.len() < buf_words {
                    *buf = vec![0u64; buf_words];
                }
                for (c, out) in share {
                    let (r0, n_rows) = plan.chunk_rows(c, out.len());
                    let bytes =
                        &mut bytemuck::cast_slice_mut::<u64, u8>(buf)[..n_rows * plan.row_bytes];
                    let at = start + (r0 * plan.row_bytes) as u64;
                    file.read_exact_at(bytes, at).map_err(|e| GgufError::Io {
                        what: format!("data of tensor {name:?}"),
                        offset: at,
                        message: e.to_string(),
                    })?;
                    progress.inc(bytes.len());
                    // The buffer is 8-byte aligned and `bytes` whole blocks, so the cast holds.
                    let part: &[B] = bytemuck::cast_slice(bytes);
                    repack_to_t2p(part, n_rows, k, out).map_err(|e| shape_err(name, e))?;
                }
                Ok(())
            };
            std::thread::scope(|scope| {
                let mut shares = shares.into_iter().zip(scratch.iter_mut());
                let (mine, my_buf) = shares.next().expect("at least one thread");
                let handles: Vec<_> = shares
                    .map(|(s, buf)| scope.spawn(|| work(s, buf)))
                    .collect();
                let first = work(mine, my_buf);
                // Every thread's error is seen; the first in chunk order is not needed, any is.
                handles.into_iter().fold(first, |acc, h| {
                    let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    acc.and(r)
                })
            })
        })
    }

    /// `n_src` source blocks converted losslessly to pq2_0 blocks, a chunk at a time.
    fn convert_to_pq2_0<B: TernaryBlock>(
        &mut self,
        n_src: usize,
        chunk_bytes: usize,
    ) -> Result<TensorData> {
        let name = self.name;
        let (src_size, per_pq) = (size_of::<B>(), B::WEIGHTS / QK_PQ2_0);
        let per_chunk = (chunk_bytes / src_size).clamp(1, n_src.max(1));
        let n_out = n_src.checked_mul(per_pq).ok_or_else(|| GgufError::Shape {
            name: name.to_string(),
            reason: "block count does not fit in memory".into(),
        })?;
        let mut out = Vec::with_capacity(n_out);
        let mut buf = vec![B::zeroed(); per_chunk];
        let (mut codes, mut scales) = (vec![0u8; B::WEIGHTS], vec![0u16; per_pq]);
        let mut done = 0usize;
        while done < n_src {
            let part = &mut buf[..per_chunk.min(n_src - done)];
            self.read(part, done * src_size)?;
            for b in part.iter() {
                b.decode(&mut codes, &mut scales);
                for (half, d) in codes.chunks_exact(QK_PQ2_0).zip(&scales) {
                    let block = BlockPq2_0::encode(half, std::slice::from_ref(d));
                    out.push(block.map_err(|e| shape_err(name, e))?);
                }
            }
            done += part.len();
        }
        Ok(TensorData::Pq2_0(out))
    }
}

fn proc_status_kb(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()
        .map(|kb| kb * 1024)
}

/// Peak resident set size of this process in bytes (`VmHWM`), where `/proc` exists.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kb("VmHWM:")
}

/// Current resident set size of this process in bytes (`VmRSS`), where `/proc` exists.
pub fn current_rss_bytes() -> Option<u64> {
    proc_status_kb("VmRSS:")
}

/// How a `rows x k` ternary matrix is read and repacked a chunk at a time: whole T2P row
/// groups per chunk, so every chunk repacks on its own (the sequential and parallel loaders
/// cut alike).
struct RepackPlan {
    /// T2P blocks of the result.
    nblocks: usize,
    /// T2P blocks per row group.
    nb: usize,
    /// Source blocks per row.
    per_row: usize,
    /// Source bytes per row.
    row_bytes: usize,
    /// Rows per chunk (whole row groups; the last chunk may have fewer rows).
    rows_per_chunk: usize,
    /// Rows of the matrix.
    rows: usize,
}

impl RepackPlan {
    fn new<B: TernaryBlock>(
        name: &str,
        rows: usize,
        k: usize,
        chunk_bytes: usize,
    ) -> Result<RepackPlan> {
        let nblocks = t2p_block_count(rows, k).map_err(|e| shape_err(name, e))?;
        let per_row = k / B::WEIGHTS;
        let row_bytes = per_row * size_of::<B>();
        let groups_per_chunk =
            (chunk_bytes / (ROWS_PER_T2P * row_bytes)).clamp(1, t2p_row_groups(rows));
        Ok(RepackPlan {
            nblocks,
            nb: k / QK_PQ2_0,
            per_row,
            row_bytes,
            rows_per_chunk: groups_per_chunk * ROWS_PER_T2P,
            rows,
        })
    }

    /// T2P blocks of a whole chunk.
    fn chunk_blocks(&self) -> usize {
        self.rows_per_chunk / ROWS_PER_T2P * self.nb
    }

    /// The first row and the row count of chunk `c`, whose output holds `out_blocks` blocks.
    fn chunk_rows(&self, c: usize, out_blocks: usize) -> (usize, usize) {
        let r0 = c * self.rows_per_chunk;
        (
            r0,
            (out_blocks / self.nb * ROWS_PER_T2P).min(self.rows - r0),
        )
    }
}
