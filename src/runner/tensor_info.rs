//! One tensor's header record: its own file, so that the id resolution (`type_ids.rs`) and the
//! header reader (`gguf.rs`), which runs it, both use it without depending on each other.

use crate::format::GgmlType;

/// One tensor as described by the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order: `shape[0]` is the contiguous one (`k` for a weight matrix,
    /// whose `shape[1]` is the number of output rows).
    pub shape: Vec<u64>,
    /// The type its bytes are in, decided for the whole file (legacy id 42 with the pq2_0
    /// layout is reported as pq2_0; an id no known layout fits stays as stored).
    pub ggml_type: GgmlType,
    /// The type id as stored in the file.
    pub stored_type_id: u32,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
    /// Byte offset in the file of this tensor's info record (for messages).
    pub info_offset: u64,
}

impl TensorInfo {
    /// Number of elements (checked when the header was read, so it does not overflow).
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Rows of a 2-D view: the product of every dimension but the first.
    pub fn n_rows(&self) -> u64 {
        self.shape.iter().skip(1).product()
    }

    /// Whether the loader will repack this tensor into T2P: a format T2P holds
    /// ([`GgmlType::has_t2p_layout`]), 2-D, at least one row, `k` a positive multiple of 128
    /// (every ternary block size but Q2_0's 64 is 128 or 256, so every other 2-D ternary matrix
    /// qualifies).
    pub fn is_t2p_candidate(&self) -> bool {
        self.ggml_type.has_t2p_layout()
            && self.shape.len() == 2
            && self.shape[1] > 0
            && self.shape[0] > 0
            && self.shape[0].is_multiple_of(128)
    }
}
