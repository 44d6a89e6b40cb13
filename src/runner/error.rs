//! The error type of the runner: every refusal names what was being read (key, tensor, field)
//! and, where the file is involved, the byte offset.

/// Why a GGUF file, a tensor or a tokenizer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgufError {
    /// The operating system failed a read (or the file changed size under us).
    #[error("I/O error reading {what} at byte {offset}: {message}")]
    Io {
        /// What was being read.
        what: String,
        /// Byte offset of the read.
        offset: u64,
        /// The I/O error, as text.
        message: String,
    },
    /// A field or payload extends past the end of the file.
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes, {available} left")]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file (magic {found:02x?} at byte 0)")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A GGUF version other than 2 or 3 (big-endian files show up here as a byte-swapped number).
    #[error(
        "unsupported GGUF version {version} at byte 4 (2 and 3 are supported; big-endian files are not)"
    )]
    UnsupportedVersion {
        /// The version number read.
        version: u32,
    },
    /// A count or length larger than the file could possibly hold, or than a sane limit.
    #[error("{what} at byte {offset} is {value}, more than the file can hold (limit {limit})")]
    TooLarge {
        /// What was counted.
        what: String,
        /// Byte offset of the count field.
        offset: u64,
        /// The value read.
        value: u64,
        /// The largest value that could be valid here.
        limit: u64,
    },
    /// A metadata value type id outside 0..=12 (or arrays nested too deeply).
    #[error("metadata key {key:?}: invalid value type {type_id} at byte {offset}")]
    BadValueType {
        /// The key whose value it is.
        key: String,
        /// Byte offset of the type field.
        offset: u64,
        /// The type id read.
        type_id: u32,
    },
    /// A string that is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What string (key name or "value of KEY").
        what: String,
        /// Byte offset of its length field.
        offset: u64,
    },
    /// The same metadata key twice.
    #[error("duplicate metadata key {key:?} at byte {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Byte offset of the second occurrence.
        offset: u64,
    },
    /// The same tensor name twice.
    #[error("duplicate tensor {name:?} at byte {offset}")]
    DuplicateTensor {
        /// The tensor name.
        name: String,
        /// Byte offset of the second tensor info.
        offset: u64,
    },
    /// `general.alignment` is zero, not a power of two, too large, or not an integer.
    #[error(
        "general.alignment at byte {offset} is {value}: must be a u32 power of two between 1 and 1 MiB"
    )]
    BadAlignment {
        /// Byte offset of the key.
        offset: u64,
        /// The value read (0 when the type was wrong).
        value: u64,
    },
    /// A tensor info that cannot describe a valid tensor (dimensions, element count, offset).
    #[error("tensor {name:?} (info at byte {offset}): {reason}")]
    BadTensor {
        /// Tensor name.
        name: String,
        /// Byte offset of its tensor info.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A GGML type id this crate does not know, or none of whose known layouts fits the file's
    /// tensors of that id (the header still reads, so that tools can describe the file; the
    /// load refuses).
    #[error(
        "tensor {name:?} (info at byte {offset}): GGML type id {type_id} is unknown, or in a \
         layout t2p does not know (no known layout fits the file's tensors of this id)"
    )]
    UnknownTensorType {
        /// Tensor name.
        name: String,
        /// Byte offset of its tensor info.
        offset: u64,
        /// The type id read.
        type_id: u32,
    },
    /// A known type that cannot be loaded (or used where it was asked for).
    #[error("tensor {name:?}: type {type_name} is not supported here (supported: {supported})", supported = crate::format::GgmlType::loadable_names())]
    UnsupportedTensorType {
        /// Tensor name.
        name: String,
        /// Type name (`q4_K`, `Q2_0 (id 42, group 64)`, ...).
        type_name: String,
    },
    /// A metadata key that is required is absent.
    #[error("missing metadata key {key:?}")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata key holds a value of the wrong type (or out of range for the requested type).
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    KeyType {
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// A tensor that is required is absent.
    #[error("missing tensor {name:?}")]
    MissingTensor {
        /// Tensor name.
        name: String,
    },
    /// A tensor's shape does not fit the way it is used.
    #[error("tensor {name:?}: {reason}")]
    Shape {
        /// Tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A file with matrices already in the T2P layout (`libt2p convert`) that this build must
    /// not read: written by another layout version, or not by t2p at all.
    #[error("{reason}")]
    T2pLayout {
        /// What is wrong and what to do.
        reason: String,
    },
    /// The `tokenizer.ggml.*` metadata cannot build a tokenizer.
    #[error("tokenizer: {reason}")]
    Tokenizer {
        /// What is wrong.
        reason: String,
    },
}

/// Shorthand for results carrying [`GgufError`].
pub type Result<T> = std::result::Result<T, GgufError>;
