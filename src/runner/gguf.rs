//! GGUF (v2 and v3, little endian) header reader for files that may be hostile.
//!
//! Every count, length and offset is checked against the bytes the file actually has before it
//! is used, so a corrupted header yields a [`GgufError`] naming the field and its byte offset,
//! never a panic or an allocation larger than the file. Tensor data is not read here (see
//! [`crate::runner::TensorStore`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::error::{GgufError, Result};
pub use super::tensor_info::TensorInfo;
use crate::format::GgmlType;

/// `general.alignment` when the key is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest accepted `general.alignment` (a larger one would only waste the file).
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays deeper than this are refused (each level would cost stack, not bytes).
pub const MAX_ARRAY_DEPTH: u32 = 8;

/// Defines [`Value`], [`Array`] (a variant of the same name for each, holding a `Vec` of the
/// value type), their type ids and the type names from one table of GGUF's metadata value types,
/// in id order (the names are indexed by id).
macro_rules! value_types {
    ($($id:literal $name:literal $variant:ident($t:ty) $($note:literal)?;)*) => {
        /// A metadata value.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Value {
            $(#[doc = concat!("Type ", $id, $($note,)? ".")] $variant($t),)*
        }

        /// A typed metadata array (type 9); arrays of arrays nest.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Array {
            $(#[doc = concat!("Elements of type ", $id, ".")] $variant(Vec<$t>),)*
        }

        /// GGUF's metadata value types by id: the names messages use.
        const VALUE_TYPE_NAMES: &[&str] = &[$($name),*];

        impl Value {
            /// The GGUF type id of the value (0..=12), as stored before it in a file.
            pub fn type_id(&self) -> u32 {
                match self {
                    $(Value::$variant(_) => $id,)*
                }
            }
        }

        impl Array {
            /// Number of elements.
            pub fn len(&self) -> usize {
                match self {
                    $(Array::$variant(v) => v.len(),)*
                }
            }

            /// The GGUF type id of the elements (0..=12).
            pub fn elem_type_id(&self) -> u32 {
                match self {
                    $(Array::$variant(_) => $id,)*
                }
            }
        }
    };
}

value_types! {
    0 "u8" U8(u8);
    1 "i8" I8(i8);
    2 "u16" U16(u16);
    3 "i16" I16(i16);
    4 "u32" U32(u32);
    5 "i32" I32(i32);
    6 "f32" F32(f32);
    7 "bool" Bool(bool) " (any non-zero byte is true)";
    8 "string" String(String);
    9 "array" Array(Array);
    10 "u64" U64(u64);
    11 "i64" I64(i64);
    12 "f64" F64(f64);
}

/// The largest metadata value type id.
const MAX_VALUE_TYPE: u32 = VALUE_TYPE_NAMES.len() as u32 - 1;

impl Value {
    /// The GGUF type name of the value (for messages).
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {} {}", a.len(), a.elem_type_name()),
            v => VALUE_TYPE_NAMES[v.type_id() as usize].into(),
        }
    }

    /// The value as a non-negative integer, whatever its integer type.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, whatever its integer type.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            Value::U8(v) => Some(v as i64),
            Value::U16(v) => Some(v as i64),
            Value::U32(v) => Some(v as i64),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float (f32, f64, or an integer converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
}

impl Array {
    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type name.
    pub fn elem_type_name(&self) -> &'static str {
        VALUE_TYPE_NAMES[self.elem_type_id() as usize]
    }

    /// Integer elements as `i64` (None for non-integer arrays or u64 values above `i64::MAX`).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy + TryInto<i64>>(v: &[T]) -> Option<Vec<i64>> {
            v.iter().map(|&x| x.try_into().ok()).collect()
        }
        match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => Some(v.clone()),
            Array::Bool(v) => Some(v.iter().map(|&b| b as i64).collect()),
            _ => None,
        }
    }

    /// Numeric elements as `f32` (floats, or integers converted).
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        match self {
            Array::F32(v) => Some(v.clone()),
            Array::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            _ => self
                .to_i64_vec()
                .map(|v| v.into_iter().map(|x| x as f32).collect()),
        }
    }
}

/// The parsed header of a GGUF file: metadata and tensor infos, no tensor data.
#[derive(Clone, Debug)]
pub struct GgufFile {
    version: u32,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    file_len: u64,
}

/// Reads little-endian fields while tracking the offset and the bytes left in the file.
struct Reader<R> {
    inner: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Reader<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn need(&self, n: u64, what: &dyn Fn() -> String) -> Result<()> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        self.need(buf.len() as u64, what)?;
        self.inner.read_exact(buf).map_err(|e| GgufError::Io {
            what: what(),
            offset: self.pos,
            message: e.to_string(),
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// The `n` elements of `N` bytes each of the array `key` (`n` is bounded by the file).
    /// `n` elements of `N` bytes each, decoded by `decode` (`u32::from_le_bytes` and the like).
    fn fixed_array<T, const N: usize>(
        &mut self,
        n: usize,
        key: &str,
        decode: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        let mut raw = vec![[0u8; N]; n];
        self.fill(raw.as_flattened_mut(), &|| format!("array data of {key:?}"))?;
        Ok(raw.into_iter().map(decode).collect())
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that is followed by `count` items of at least `min_item` bytes each.
    fn count(&mut self, min_item: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let offset = self.pos;
        let n = self.u64(what)?;
        let limit = self.remaining() / min_item.max(1);
        if n > limit {
            return Err(GgufError::TooLarge {
                what: what(),
                offset,
                value: n,
                limit,
            });
        }
        Ok(n)
    }

    fn bytes(&mut self, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        let n = self.count(1, &|| format!("length of {}", what()))?;
        let mut v = vec![0u8; n as usize];
        self.fill(&mut v, what)?;
        Ok(v)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let offset = self.pos;
        let v = self.bytes(what)?;
        String::from_utf8(v).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset,
        })
    }

    fn value(&mut self, type_id: u32, key: &str, depth: u32) -> Result<Value> {
        let what = || format!("value of {key:?}");
        Ok(match type_id {
            0 => Value::U8(self.array::<1>(&what)?[0]),
            1 => Value::I8(self.array::<1>(&what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            4 => Value::U32(self.u32(&what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            7 => Value::Bool(self.array::<1>(&what)?[0] != 0),
            8 => Value::String(self.string(&what)?),
            9 => Value::Array(self.array_value(key, depth)?),
            10 => Value::U64(self.u64(&what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            _ => unreachable!("type ids are checked by the caller"),
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<Array> {
        let type_offset = self.pos;
        let elem = self.u32(&|| format!("array type of {key:?}"))?;
        if elem > MAX_VALUE_TYPE || depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::BadValueType {
                key: key.to_string(),
                offset: type_offset,
                type_id: elem,
            });
        }
        // Smallest encoding of one element, so that the count is bounded by the file.
        let min_size: u64 = match elem {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 => 8,
            9 => 12,
            _ => 8,
        };
        let what = || format!("array length of {key:?}");
        let n = self.count(min_size, &what)? as usize;
        Ok(match elem {
            0 => Array::U8(self.fixed_array(n, key, |[b]| b)?),
            1 => Array::I8(self.fixed_array(n, key, i8::from_le_bytes)?),
            2 => Array::U16(self.fixed_array(n, key, u16::from_le_bytes)?),
            3 => Array::I16(self.fixed_array(n, key, i16::from_le_bytes)?),
            4 => Array::U32(self.fixed_array(n, key, u32::from_le_bytes)?),
            5 => Array::I32(self.fixed_array(n, key, i32::from_le_bytes)?),
            6 => Array::F32(self.fixed_array(n, key, f32::from_le_bytes)?),
            7 => Array::Bool(self.fixed_array(n, key, |[b]| b != 0)?),
            10 => Array::U64(self.fixed_array(n, key, u64::from_le_bytes)?),
            11 => Array::I64(self.fixed_array(n, key, i64::from_le_bytes)?),
            12 => Array::F64(self.fixed_array(n, key, f64::from_le_bytes)?),
            8 => {
                let mut v = Vec::with_capacity(prealloc(n as u64));
                for i in 0..n {
                    v.push(self.string(&|| format!("element {i} of {key:?}"))?);
                }
                Array::String(v)
            }
            9 => {
                let mut v = Vec::with_capacity(prealloc(n as u64));
                for _ in 0..n {
                    v.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(v)
            }
            _ => unreachable!("checked above"),
        })
    }
}

impl<R: Read> Reader<R> {
    /// Magic, version, tensor count and metadata count.
    fn preamble(&mut self) -> Result<(u32, u64, u64)> {
        let magic: [u8; 4] = self.array(&|| "magic".into())?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = self.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion { version });
        }
        // Smallest tensor info: name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8.
        let n_tensors = self.count(32, &|| "tensor count".into())?;
        // Smallest key/value: key length 8 + type 4 + a one-byte value.
        let n_kv = self.count(13, &|| "metadata key count".into())?;
        Ok((version, n_tensors, n_kv))
    }

    /// Metadata entry `i`: its byte offset, key and value.
    fn metadata_entry(&mut self, i: u64) -> Result<(u64, String, Value)> {
        let key_offset = self.pos;
        let key = self.string(&|| format!("key of metadata entry {i}"))?;
        let type_offset = self.pos;
        let type_id = self.u32(&|| format!("value type of {key:?}"))?;
        if type_id > MAX_VALUE_TYPE {
            return Err(GgufError::BadValueType {
                key,
                offset: type_offset,
                type_id,
            });
        }
        let value = self.value(type_id, &key, 0)?;
        Ok((key_offset, key, value))
    }

    /// Tensor info `i`, its shape and data offset checked (the byte size of an id without a
    /// fixed block size is left 0 for [`GgufFile::check_tensor_ranges`] to resolve).
    fn tensor_info(&mut self, i: u64, alignment: u64) -> Result<TensorInfo> {
        let info_offset = self.pos;
        let name = self.string(&|| format!("name of tensor {i}"))?;
        let bad = |reason: String| GgufError::BadTensor {
            name: name.clone(),
            offset: info_offset,
            reason,
        };
        let n_dims = self.u32(&|| format!("dimension count of tensor {name:?}"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            shape.push(self.u64(&|| format!("dimension {d} of tensor {name:?}"))?);
        }
        let type_id = self.u32(&|| format!("type of tensor {name:?}"))?;
        let offset = self.u64(&|| format!("data offset of tensor {name:?}"))?;
        let n_elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("element count of shape {shape:?} overflows")))?;
        let ggml_type = GgmlType(type_id);
        let n_bytes = match ggml_type.block() {
            Some((block, bytes)) => {
                if !shape[0].is_multiple_of(block) {
                    return Err(bad(format!(
                        "row length (first dimension) {} is not a multiple of the {} block \
                         size {block}",
                        shape[0], ggml_type
                    )));
                }
                (n_elements / block)
                    .checked_mul(bytes)
                    .ok_or_else(|| bad("byte size overflows".into()))?
            }
            // An id whose size is not a block count (i2_s, iq2_bn), means different layouts in
            // different files (42), or is unknown: sized once every offset is known
            // (`type_ids::resolve`).
            None => 0,
        };
        if !offset.is_multiple_of(alignment) {
            return Err(bad(format!(
                "data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        Ok(TensorInfo {
            name,
            shape,
            ggml_type,
            stored_type_id: type_id,
            offset,
            n_bytes,
            info_offset,
        })
    }
}

/// Metadata as read: the entries in file order, the index by key, and the data alignment.
type Metadata = (Vec<(String, Value)>, HashMap<String, usize>, u64);

/// The `n_kv` metadata entries; refuses duplicate keys and a bad `general.alignment`.
fn read_metadata<R: Read>(r: &mut Reader<R>, n_kv: u64) -> Result<Metadata> {
    let mut metadata = Vec::with_capacity(prealloc(n_kv));
    let mut index = HashMap::with_capacity(prealloc(n_kv));
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        let (key_offset, key, value) = r.metadata_entry(i)?;
        if key == "general.alignment" {
            let a = match value {
                Value::U32(a) => a as u64,
                _ => 0,
            };
            if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
                return Err(GgufError::BadAlignment {
                    offset: key_offset,
                    value: a,
                });
            }
            alignment = a;
        }
        if index.contains_key(&key) {
            return Err(GgufError::DuplicateKey {
                key,
                offset: key_offset,
            });
        }
        index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    Ok((metadata, index, alignment))
}

/// The `n_tensors` tensor infos and the index by name; refuses duplicate names.
fn read_tensor_infos<R: Read>(
    r: &mut Reader<R>,
    n_tensors: u64,
    alignment: u64,
) -> Result<(Vec<TensorInfo>, HashMap<String, usize>)> {
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(prealloc(n_tensors));
    let mut tensor_index = HashMap::with_capacity(prealloc(n_tensors));
    for i in 0..n_tensors {
        let t = r.tensor_info(i, alignment)?;
        if tensor_index.contains_key(&t.name) {
            return Err(GgufError::DuplicateTensor {
                name: t.name,
                offset: t.info_offset,
            });
        }
        tensor_index.insert(t.name.clone(), tensors.len());
        tensors.push(t);
    }
    Ok((tensors, tensor_index))
}

/// Capacity to reserve for `n` items announced by a count field: the count is already bounded
/// by the file size, but the in-memory item is larger than its smallest encoding, so beyond
/// this the vector grows only as items are actually parsed.
fn prealloc(n: u64) -> usize {
    n.min(1 << 16) as usize
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

impl GgufFile {
    /// Reads the header of the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |e: std::io::Error| GgufError::Io {
            what: format!("{}", path.display()),
            offset: 0,
            message: e.to_string(),
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Self::read(BufReader::with_capacity(1 << 16, file), len)
    }

    /// Parses a header held in memory (the whole file, or at least its header when
    /// `bytes` is followed by data the caller reads separately).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::read(bytes, bytes.len() as u64)
    }

    /// Reads a header from `src`, positioned at the start of a file of `len` bytes.
    pub fn read<R: Read>(src: R, len: u64) -> Result<Self> {
        let mut r = Reader {
            inner: src,
            pos: 0,
            len,
        };
        let (version, n_tensors, n_kv) = r.preamble()?;
        let (metadata, index, alignment) = read_metadata(&mut r, n_kv)?;
        let (tensors, tensor_index) = read_tensor_infos(&mut r, n_tensors, alignment)?;
        let data_offset = align_up(r.pos, alignment).unwrap_or(u64::MAX);
        let mut file = GgufFile {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            file_len: len,
        };
        file.check_tensor_ranges()?;
        Ok(file)
    }

    /// Resolves the ids whose layout depends on the file ([`super::type_ids`]) and checks that
    /// every tensor lies inside the file without overlapping another.
    fn check_tensor_ranges(&mut self) -> Result<()> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let data_len = self.file_len.checked_sub(self.data_offset).ok_or_else(|| {
            let t = &self.tensors[0];
            GgufError::Truncated {
                what: "tensor data section".into(),
                offset: self.data_offset,
                needed: 1,
                available: 0,
            }
            .with_tensor(&t.name)
        })?;
        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by_key(|&i| self.tensors[i].offset);
        // Room of each tensor up to the next tensor (or the end of the file): what the ids
        // without a fixed block size are sized by.
        let mut room = vec![0u64; self.tensors.len()];
        for (pos, &i) in order.iter().enumerate() {
            let t = &self.tensors[i];
            if t.offset > data_len {
                return Err(GgufError::BadTensor {
                    name: t.name.clone(),
                    offset: t.info_offset,
                    reason: format!(
                        "data offset {} is past the end of the data section ({data_len} bytes \
                         at byte {})",
                        t.offset, self.data_offset
                    ),
                });
            }
            let next = order
                .get(pos + 1)
                .map(|&j| self.tensors[j].offset)
                .unwrap_or(data_len);
            room[i] = next - t.offset;
        }
        super::type_ids::resolve(&mut self.tensors, &room, self.alignment)?;
        for &i in &order {
            let t = &self.tensors[i];
            let next = t.offset + room[i];
            let end = t.offset.saturating_add(t.n_bytes);
            if end > data_len {
                return Err(GgufError::Truncated {
                    what: format!("data of tensor {:?}", t.name),
                    offset: self.data_offset.saturating_add(t.offset),
                    needed: t.n_bytes,
                    available: data_len - t.offset,
                });
            }
            if end > next {
                return Err(GgufError::BadTensor {
                    name: t.name.clone(),
                    offset: t.info_offset,
                    reason: format!(
                        "data [{}, {end}) overlaps the next tensor at {next}",
                        t.offset
                    ),
                });
            }
        }
        Ok(())
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// File length in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute byte range of a tensor's data in the file.
    pub fn tensor_file_range(&self, t: &TensorInfo) -> std::ops::Range<u64> {
        let start = self.data_offset + t.offset;
        start..start + t.n_bytes
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> GgufError {
        GgufError::KeyType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    /// `key` as a u32 (any integer type whose value fits).
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| Self::wrong(key, "u32", v))
    }

    /// `key` as a u64 (any non-negative integer).
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64().ok_or_else(|| Self::wrong(key, "u64", v))
    }

    /// `key` as an i64 (any integer).
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        let v = self.require(key)?;
        v.as_i64().ok_or_else(|| Self::wrong(key, "i64", v))
    }

    /// `key` as an f32 (f32, f64, or an integer).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| Self::wrong(key, "f32", v))
    }

    /// `key` as a bool.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(Self::wrong(key, "bool", v)),
        }
    }

    /// `key` as a string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            v => Err(Self::wrong(key, "string", v)),
        }
    }

    /// `key` as an array.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(Self::wrong(key, "array", v)),
        }
    }

    /// `key` as an array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<&[String]> {
        match self.require(key)? {
            Value::Array(Array::String(a)) => Ok(a),
            v => Err(Self::wrong(key, "array of string", v)),
        }
    }

    /// `key` as an array of integers (any integer element type).
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>> {
        self.get_converted_array(key, "array of integers", Array::to_i64_vec)
    }

    /// `key` as an array of f32 (float or integer elements).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.get_converted_array(key, "array of numbers", Array::to_f32_vec)
    }

    /// `key` as an array whose elements `convert` accepts (`expected` names them in the error).
    fn get_converted_array<T>(
        &self,
        key: &str,
        expected: &'static str,
        convert: fn(&Array) -> Option<Vec<T>>,
    ) -> Result<Vec<T>> {
        let v = self.require(key)?;
        match v {
            Value::Array(a) => convert(a),
            _ => None,
        }
        .ok_or_else(|| Self::wrong(key, expected, v))
    }

    /// `Ok(None)` when `key` is absent, else [`get_u32`](Self::get_u32).
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get(key).map(|_| self.get_u32(key)).transpose()
    }

    /// `Ok(None)` when `key` is absent, else [`get_f32`](Self::get_f32).
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        self.get(key).map(|_| self.get_f32(key)).transpose()
    }

    /// `Ok(None)` when `key` is absent, else [`get_bool`](Self::get_bool).
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key).map(|_| self.get_bool(key)).transpose()
    }

    /// `Ok(None)` when `key` is absent, else [`get_str`](Self::get_str).
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.get(key).map(|_| self.get_str(key)).transpose()
    }

    /// `general.architecture` (e.g. `llama`, `qwen3`, `qwen35`).
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// `"{architecture}.{suffix}"`, e.g. `arch_key("block_count")` = `qwen3.block_count`.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{suffix}", self.architecture()?))
    }

    /// Bytes of tensor data per GGML type, in type id order: `(type, tensor count, bytes)`.
    pub fn bytes_by_type(&self) -> Vec<(GgmlType, usize, u64)> {
        let mut m: std::collections::BTreeMap<GgmlType, (usize, u64)> = Default::default();
        for t in &self.tensors {
            let e = m.entry(t.ggml_type).or_default();
            e.0 += 1;
            e.1 += t.n_bytes;
        }
        m.into_iter().map(|(k, (n, b))| (k, n, b)).collect()
    }

    /// Seeks `src` to a tensor's data and checks that the source is as long as the header says.
    pub(crate) fn seek_to<S: Seek>(&self, src: &mut S, t: &TensorInfo) -> Result<()> {
        let at = self.data_offset + t.offset;
        src.seek(SeekFrom::Start(at)).map_err(|e| GgufError::Io {
            what: format!("data of tensor {:?}", t.name),
            offset: at,
            message: e.to_string(),
        })?;
        Ok(())
    }
}

impl GgufError {
    fn with_tensor(self, name: &str) -> GgufError {
        match self {
            GgufError::Truncated {
                what,
                offset,
                needed,
                available,
            } => GgufError::Truncated {
                what: format!("{what} (first tensor {name:?})"),
                offset,
                needed,
                available,
            },
            e => e,
        }
    }
}
