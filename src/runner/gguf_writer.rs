//! A GGUF v3 writer: metadata first, then tensor data streamed tensor by tensor, so a file of
//! several GB can be written without holding it in memory. Used by `libt2p convert`, `libt2p
//! synth` and tests.

use std::io::{self, Seek, Write};

use super::{Array, Value};
use crate::format::GgmlType;

/// Data alignment of the files written (GGUF's default).
pub const ALIGNMENT: u64 = 32;

/// One tensor to be written: name, dimensions (ggml order, `dims[0]` contiguous), type and bytes.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order.
    pub dims: Vec<u64>,
    /// GGML type id.
    pub ggml_type: u32,
    /// Bytes of data.
    pub bytes: u64,
}

impl TensorSpec {
    /// A tensor of `dims` in type `ty`, its byte size from the type table (`dims[0]` a
    /// multiple of the type's block; a type outside the table gives 0 bytes).
    pub fn new(name: impl Into<String>, dims: &[usize], ty: GgmlType) -> TensorSpec {
        let n: u64 = dims.iter().map(|&d| d as u64).product();
        let bytes = ty.block().map_or(0, |(w, b)| n / w * b);
        TensorSpec {
            name: name.into(),
            dims: dims.iter().map(|&d| d as u64).collect(),
            ggml_type: ty.0,
            bytes,
        }
    }
}

/// Writes a GGUF file: [`GgufWriter::begin`] writes the header, then [`GgufWriter::tensor_data`]
/// once per tensor in the order given.
pub struct GgufWriter<W: Write + Seek> {
    out: W,
    specs: Vec<TensorSpec>,
    next: usize,
}

fn put_str<W: Write>(w: &mut W, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn put_value<W: Write>(w: &mut W, v: &Value) -> io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[*x as u8]),
        Value::String(s) => put_str(w, s),
        Value::Array(a) => put_array(w, a),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
    }
}

fn put_array<W: Write>(w: &mut W, a: &Array) -> io::Result<()> {
    let le = |w: &mut W, b: &[u8]| w.write_all(b);
    match a {
        Array::U8(v) => put_elems(w, 0, v, |w, x| le(w, &[*x])),
        Array::I8(v) => put_elems(w, 1, v, |w, x| le(w, &x.to_le_bytes())),
        Array::U16(v) => put_elems(w, 2, v, |w, x| le(w, &x.to_le_bytes())),
        Array::I16(v) => put_elems(w, 3, v, |w, x| le(w, &x.to_le_bytes())),
        Array::U32(v) => put_elems(w, 4, v, |w, x| le(w, &x.to_le_bytes())),
        Array::I32(v) => put_elems(w, 5, v, |w, x| le(w, &x.to_le_bytes())),
        Array::F32(v) => put_elems(w, 6, v, |w, x| le(w, &x.to_le_bytes())),
        Array::Bool(v) => put_elems(w, 7, v, |w, x| le(w, &[*x as u8])),
        Array::String(v) => put_elems(w, 8, v, |w, x| put_str(w, x)),
        Array::Array(v) => put_elems(w, 9, v, |w, x| put_array(w, x)),
        Array::U64(v) => put_elems(w, 10, v, |w, x| le(w, &x.to_le_bytes())),
        Array::I64(v) => put_elems(w, 11, v, |w, x| le(w, &x.to_le_bytes())),
        Array::F64(v) => put_elems(w, 12, v, |w, x| le(w, &x.to_le_bytes())),
    }
}

/// An array of element type `id`: the type, the count, then each element as `put` writes it.
fn put_elems<W: Write, T>(
    w: &mut W,
    id: u32,
    v: &[T],
    put: impl Fn(&mut W, &T) -> io::Result<()>,
) -> io::Result<()> {
    w.write_all(&id.to_le_bytes())?;
    w.write_all(&(v.len() as u64).to_le_bytes())?;
    v.iter().try_for_each(|x| put(w, x))
}

fn pad<W: Write + Seek>(w: &mut W) -> io::Result<()> {
    let pos = w.stream_position()?;
    let n = (ALIGNMENT - pos % ALIGNMENT) % ALIGNMENT;
    w.write_all(&vec![0u8; n as usize])
}

impl<W: Write + Seek> GgufWriter<W> {
    /// Writes the header: metadata `kv` and the infos of `tensors` (data offsets computed here).
    pub fn begin(mut out: W, kv: &[(String, Value)], tensors: Vec<TensorSpec>) -> io::Result<Self> {
        out.write_all(b"GGUF")?;
        out.write_all(&3u32.to_le_bytes())?;
        out.write_all(&(tensors.len() as u64).to_le_bytes())?;
        out.write_all(&(kv.len() as u64).to_le_bytes())?;
        for (k, v) in kv {
            put_str(&mut out, k)?;
            out.write_all(&v.type_id().to_le_bytes())?;
            put_value(&mut out, v)?;
        }
        let mut offset = 0u64;
        for t in &tensors {
            put_str(&mut out, &t.name)?;
            out.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                out.write_all(&d.to_le_bytes())?;
            }
            out.write_all(&t.ggml_type.to_le_bytes())?;
            out.write_all(&offset.to_le_bytes())?;
            offset += t.bytes.div_ceil(ALIGNMENT) * ALIGNMENT;
        }
        pad(&mut out)?;
        Ok(GgufWriter {
            out,
            specs: tensors,
            next: 0,
        })
    }

    /// Writes the data of the next tensor; `data` must be exactly its byte size.
    pub fn tensor_data(&mut self, data: &[u8]) -> io::Result<()> {
        let spec = self
            .specs
            .get(self.next)
            .ok_or_else(|| io::Error::other("more tensor data than tensors"))?;
        if data.len() as u64 != spec.bytes {
            return Err(io::Error::other(format!(
                "{}: {} bytes given, {} declared",
                spec.name,
                data.len(),
                spec.bytes
            )));
        }
        self.out.write_all(data)?;
        pad(&mut self.out)?;
        self.next += 1;
        Ok(())
    }

    /// Checks every tensor was written and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        if self.next != self.specs.len() {
            return Err(io::Error::other(format!(
                "{} of {} tensors written",
                self.next,
                self.specs.len()
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}
