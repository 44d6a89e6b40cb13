//! The GGML tensor type table: ids, names, block sizes and bytes per block, the one place t2p
//! writes them down.
//!
//! Everything else derives from it: the runner's loader and header reader, the block structs
//! ([`crate::format::TernaryBlock::GGML_TYPE`] with its name and block size, checked at compile
//! time against `size_of` the struct), the C ABI's `T2P_TYPE_*` values (asserted equal at compile
//! time) and the fixture writers. The llama.cpp patch maps ggml's own `GGML_TYPE_*` enum to
//! `T2P_TYPE_*`, whose values are these ids.
//!
//! Only some types can be loaded ([`GgmlType::is_loadable`]): the dense ones, ggml's standard
//! block types ([`GgmlType::is_quant`], multiplied as the file holds them) and every ternary
//! format ([`GgmlType::is_ternary`], repacked into T2P at load); the others are known by name and
//! size so that `libt2p info` can describe any file and a loader can refuse them by name.

/// A GGML tensor type id as stored in a GGUF tensor info.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GgmlType(pub u32);

struct TypeInfo {
    id: u32,
    name: &'static str,
    block: u32,
    bytes: u32,
}

const fn t(id: u32, name: &'static str, block: u32, bytes: u32) -> TypeInfo {
    TypeInfo {
        id,
        name,
        block,
        bytes,
    }
}

/// ggml's ids; 4, 5 and 31..33 were removed upstream and are deliberately absent.
/// Id 42 is resolved per tensor by the reader (see [`GgmlType::Q2_0_LEGACY`]).
const TABLE: &[TypeInfo] = &[
    t(0, "f32", 1, 4),
    t(1, "f16", 1, 2),
    t(2, "q4_0", 32, 18),
    t(3, "q4_1", 32, 20),
    t(6, "q5_0", 32, 22),
    t(7, "q5_1", 32, 24),
    t(8, "q8_0", 32, 34),
    t(9, "q8_1", 32, 36),
    t(10, "q2_K", 256, 84),
    t(11, "q3_K", 256, 110),
    t(12, "q4_K", 256, 144),
    t(13, "q5_K", 256, 176),
    t(14, "q6_K", 256, 210),
    t(15, "q8_K", 256, 292),
    t(16, "iq2_xxs", 256, 66),
    t(17, "iq2_xs", 256, 74),
    t(18, "iq3_xxs", 256, 98),
    t(19, "iq1_s", 256, 50),
    t(20, "iq4_nl", 32, 18),
    t(21, "iq3_s", 256, 110),
    t(22, "iq2_s", 256, 82),
    t(23, "iq4_xs", 256, 136),
    t(24, "i8", 1, 1),
    t(25, "i16", 1, 2),
    t(26, "i32", 1, 4),
    t(27, "i64", 1, 8),
    t(28, "f64", 1, 8),
    t(29, "iq1_m", 256, 56),
    t(30, "bf16", 1, 2),
    t(34, "tq1_0", 256, 54),
    t(35, "tq2_0", 256, 66),
    t(39, "mxfp4", 32, 17),
    t(GgmlType::Q2_0_G64.0, "q2_0", 64, 18),
    t(142, "pq2_0", 128, 34),
    t(143, "ptq1_0", 128, 28),
];

impl GgmlType {
    /// 32-bit float.
    pub const F32: GgmlType = GgmlType(0);
    /// IEEE half.
    pub const F16: GgmlType = GgmlType(1);
    /// 32 4-bit values with an fp16 scale (18 bytes).
    pub const Q4_0: GgmlType = GgmlType(2);
    /// 32 4-bit values with an fp16 scale and minimum (20 bytes).
    pub const Q4_1: GgmlType = GgmlType(3);
    /// 32 5-bit values with an fp16 scale (22 bytes).
    pub const Q5_0: GgmlType = GgmlType(6);
    /// 32 5-bit values with an fp16 scale and minimum (24 bytes).
    pub const Q5_1: GgmlType = GgmlType(7);
    /// 32 int8 with one fp16 scale (34 bytes).
    pub const Q8_0: GgmlType = GgmlType(8);
    /// 32 int8 with an fp16 scale and the scaled sum (36 bytes): activations of Q4_1 / Q5_1.
    pub const Q8_1: GgmlType = GgmlType(9);
    /// 256 4-bit values in 8 sub-blocks with 6-bit scales and minimums (144 bytes).
    pub const Q4_K: GgmlType = GgmlType(12);
    /// 256 5-bit values in 8 sub-blocks with 6-bit scales and minimums (176 bytes).
    pub const Q5_K: GgmlType = GgmlType(13);
    /// 256 6-bit values in 16 sub-blocks with int8 scales (210 bytes).
    pub const Q6_K: GgmlType = GgmlType(14);
    /// 256 int8 with an f32 scale and 16 partial sums (292 bytes): llama.cpp's activations for
    /// `tq*` weights.
    pub const Q8_K: GgmlType = GgmlType(15);
    /// bfloat16.
    pub const BF16: GgmlType = GgmlType(30);
    /// llama.cpp's base-3 ternary format: 256 weights in 54 bytes.
    pub const TQ1_0: GgmlType = GgmlType(34);
    /// llama.cpp's 2-bit ternary format: 256 weights in 66 bytes.
    pub const TQ2_0: GgmlType = GgmlType(35);
    /// PrismML's ternary format: 128 weights in 34 bytes.
    pub const PQ2_0: GgmlType = GgmlType(142);
    /// PrismML's base-3 ternary format: 128 weights in 28 bytes (element order as PrismML's own
    /// x86 `ggml_vec_dot_ptq1_0_q8_0` reads it).
    pub const PTQ1_0: GgmlType = GgmlType(143);
    /// Id 42: older PrismML files store pq2_0 bytes under it ("Q2_0", group 128); mainline
    /// llama.cpp reused it for an 18-byte group-64 layout. The reader tells them apart by the
    /// space the tensor occupies and reports the former as [`GgmlType::PQ2_0`].
    pub const Q2_0_LEGACY: GgmlType = GgmlType(42);
    /// Mainline's group-64 Q2_0 (18 bytes per 64 weights, stored under id 42): the reader
    /// reports a tensor of id 42 in that layout as this type. Its number is t2p's own (ggml
    /// has none apart from the ambiguous 42), outside ggml's range.
    pub const Q2_0_G64: GgmlType = GgmlType(1042);
    /// `(weights, bytes)` of a [`GgmlType::Q2_0_G64`] block.
    pub const Q2_0_G64_BLOCK: (u64, u64) = (64, 18);
    /// bitnet.cpp's I2_S (id 36 in its files): 2-bit codes of the whole tensor in blocks of 128
    /// weights in 32 bytes, then one f32 scale and 28 bytes of padding (`n / 4 + 32` bytes; see
    /// [`crate::format::i2s`]). Not in the block table: its size is not a block count, and the
    /// id is unused or other in other files, so the reader decides it per file.
    pub const I2_S: GgmlType = GgmlType(36);
    /// ik_llama.cpp's IQ2_BN (id 135): per row an f32 scale, then blocks of 64 weights in 16
    /// bytes (`rows * (4 + k / 4)` bytes; see [`crate::format::i2s`]).
    pub const IQ2_BN: GgmlType = GgmlType(135);
    /// ik_llama.cpp's IQ1_BN (id 134): per row an fp16 scale, then blocks of 64 weights in 13
    /// bytes of base-3 digits (`rows * (2 + 13 * k / 64)` bytes; see [`crate::format::i2s`]).
    pub const IQ1_BN: GgmlType = GgmlType(134);
    /// t2p's own: a ternary matrix already in the T2P layout, group 128 ([`BlockT2p`]: row
    /// groups of 4 rows, 136 bytes per 4 x 128 weights, the last group padded), as
    /// `libt2p convert` writes it so that a later load maps it instead of repacking. Only
    /// files carrying [`T2P_LAYOUT_KEY`](crate::format::T2P_LAYOUT_KEY) may hold it.
    ///
    /// [`BlockT2p`]: crate::format::BlockT2p
    pub const T2P: GgmlType = GgmlType(2142);
    /// As [`T2P`](Self::T2P) with a scale per 64 weights ([`BlockT2pG64`], 144 bytes per
    /// group and block), from mainline's group-64 Q2_0.
    ///
    /// [`BlockT2pG64`]: crate::format::BlockT2pG64
    pub const T2P_G64: GgmlType = GgmlType(2143);

    const fn info(self) -> Option<&'static TypeInfo> {
        // A loop rather than an iterator so that the block structs can check themselves
        // against the table at compile time.
        let mut i = 0;
        while i < TABLE.len() {
            if TABLE[i].id == self.0 {
                return Some(&TABLE[i]);
            }
            i += 1;
        }
        None
    }

    /// The type's name as ggml prints it, when the id is in the table.
    pub const fn table_name(self) -> Option<&'static str> {
        match self.info() {
            Some(i) => Some(i.name),
            None => None,
        }
    }

    /// The type's name as ggml prints it, or `type<id>` when unknown.
    pub fn name(self) -> String {
        match self.table_name() {
            Some(n) => n.to_string(),
            None if self == Self::Q2_0_LEGACY => "q2_0".to_string(),
            None if self == Self::I2_S => "i2_s".to_string(),
            None if self == Self::IQ2_BN => "iq2_bn".to_string(),
            None if self == Self::IQ1_BN => "iq1_bn".to_string(),
            None if self == Self::T2P => "t2p".to_string(),
            None if self == Self::T2P_G64 => "t2p_g64".to_string(),
            None => format!("type{}", self.0),
        }
    }

    /// `(weights per block, bytes per block)`, when the id is in the table.
    pub const fn block(self) -> Option<(u64, u64)> {
        match self.info() {
            Some(i) => Some((i.block as u64, i.bytes as u64)),
            None => None,
        }
    }

    /// Bytes of a tensor of `shape` (ggml order) in this type: a block count for the table's
    /// types, `n / 4 + 32` for [`I2_S`](Self::I2_S) (rows of a multiple of 128), `rows * (4 +
    /// k / 4)` for [`IQ2_BN`](Self::IQ2_BN) and `rows * (2 + 13 * k / 64)` for
    /// [`IQ1_BN`](Self::IQ1_BN) (rows of a multiple of 64), whole row groups of
    /// blocks for [`T2P`](Self::T2P) and [`T2P_G64`](Self::T2P_G64) (rows of a multiple of
    /// 128). `None` when the shape does not fit the layout, the size overflows, or the type
    /// has no known size.
    pub fn tensor_bytes(self, shape: &[u64]) -> Option<u64> {
        let k = *shape.first()?;
        let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        match self {
            Self::T2P | Self::T2P_G64 => {
                let block = if self == Self::T2P { 136 } else { 144 };
                let groups = (n / k.max(1)).div_ceil(4);
                k.is_multiple_of(128)
                    .then(|| groups.checked_mul(k / 128)?.checked_mul(block))
                    .flatten()
            }
            Self::I2_S => k.is_multiple_of(128).then(|| n / 4 + 32),
            Self::IQ2_BN => k
                .is_multiple_of(64)
                .then(|| (n / k.max(1)).checked_mul(4 + k / 4))
                .flatten(),
            Self::IQ1_BN => k
                .is_multiple_of(64)
                .then(|| (n / k.max(1)).checked_mul(2 + 13 * (k / 64)))
                .flatten(),
            _ => {
                let (w, b) = self.block()?;
                k.is_multiple_of(w)
                    .then(|| (n / w).checked_mul(b))
                    .flatten()
            }
        }
    }

    /// Whether a block of `weights` values in `bytes` bytes is this type's block (false for an id
    /// outside the table): how each block struct checks itself against the table at compile time.
    pub const fn has_block(self, weights: usize, bytes: usize) -> bool {
        match self.block() {
            Some((w, b)) => w == weights as u64 && b == bytes as u64,
            None => false,
        }
    }

    /// Whether the runner's `TensorStore` can load tensors of this type.
    pub fn is_loadable(self) -> bool {
        self.is_ternary()
            || self.is_quant()
            || self.is_int8_ternary()
            || self.is_t2p()
            || matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }

    /// Whether the type is t2p's own already repacked layout ([`T2P`](Self::T2P),
    /// [`T2P_G64`](Self::T2P_G64)).
    pub fn is_t2p(self) -> bool {
        matches!(self, Self::T2P | Self::T2P_G64)
    }

    /// Whether the type is a BitNet format with f32 scales (I2_S, IQ2_BN, and IQ1_BN's fp16
    /// row scales read as f32): repacked into T2P
    /// blocks of scale 1.0 and multiplied with per-token int8 activations
    /// ([`crate::matmul::Int8Matrix`]).
    pub fn is_int8_ternary(self) -> bool {
        matches!(self, Self::I2_S | Self::IQ2_BN | Self::IQ1_BN)
    }

    /// Whether the type is one of ggml's standard block types the runner multiplies as the
    /// file holds them ([`crate::format::QuantBlock`]): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
    /// Q5_K, Q6_K, and mainline's group-64 Q2_0 (which goes to T2P where its rows allow,
    /// [`has_t2p_layout`](Self::has_t2p_layout)).
    pub fn is_quant(self) -> bool {
        matches!(
            self,
            Self::Q4_0
                | Self::Q4_1
                | Self::Q5_0
                | Self::Q5_1
                | Self::Q8_0
                | Self::Q4_K
                | Self::Q5_K
                | Self::Q6_K
                | Self::Q2_0_G64
        )
    }

    /// ggml's `vec_dot_type` of a block type: what its activations are quantized to (Q8_1 for
    /// Q4_1 / Q5_1, Q8_K for the K types, Q8_0 otherwise).
    pub fn vec_dot_type(self) -> GgmlType {
        match self {
            Self::Q4_1 | Self::Q5_1 => Self::Q8_1,
            Self::Q4_K | Self::Q5_K | Self::Q6_K => Self::Q8_K,
            _ => Self::Q8_0,
        }
    }

    /// The names of every type [`is_loadable`](Self::is_loadable) accepts, for messages.
    pub fn loadable_names() -> String {
        TABLE
            .iter()
            .map(|t| GgmlType(t.id))
            .chain([
                Self::I2_S,
                Self::IQ2_BN,
                Self::IQ1_BN,
                Self::T2P,
                Self::T2P_G64,
            ])
            .filter(|t| t.is_loadable())
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether the type is a ternary block format the loader repacks into T2P whatever the
    /// row length: pq2_0 (and legacy id 42, which the reader reports as pq2_0), tq1_0, tq2_0
    /// and ptq1_0.
    pub fn is_ternary(self) -> bool {
        matches!(self, Self::PQ2_0 | Self::TQ1_0 | Self::TQ2_0 | Self::PTQ1_0)
    }

    /// Whether T2P can hold the type: [`is_ternary`](Self::is_ternary), or mainline's group-64
    /// Q2_0 (in the group-64 T2P layout, for rows of a multiple of 128 weights; other rows
    /// run as the file holds them).
    pub fn has_t2p_layout(self) -> bool {
        self.is_ternary() || self == Self::Q2_0_G64
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_unique_and_sane() {
        for (i, a) in TABLE.iter().enumerate() {
            assert!(a.block > 0 && a.bytes > 0);
            for b in &TABLE[i + 1..] {
                assert_ne!(a.id, b.id);
                assert_ne!(a.name, b.name);
            }
        }
        assert_eq!(GgmlType::PQ2_0.block(), Some((128, 34)));
        assert_eq!(GgmlType(35).name(), "tq2_0");
        assert_eq!(GgmlType::TQ1_0.block(), Some((256, 54)));
        assert_eq!(GgmlType::TQ2_0.block(), Some((256, 66)));
        assert_eq!(GgmlType::PTQ1_0.block(), Some((128, 28)));
        assert!(GgmlType::PTQ1_0.is_loadable() && GgmlType(12).is_loadable());
        assert!(!GgmlType(16).is_loadable() && !GgmlType(10).is_loadable());
        assert_eq!(GgmlType(42).block(), None);
        assert_eq!(GgmlType(999).name(), "type999");
    }
}
