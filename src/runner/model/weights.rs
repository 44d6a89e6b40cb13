//! Weights as the blocks read them: matrices with what their activation needs first (the
//! Hadamard fold's rotation, bf16 rounding), the loader that takes them out of the store, and
//! the token table with its tied-head handling.

use std::collections::HashSet;

use super::error::{ModelError, Result};
use super::hadamard::{FoldKind, GdnGeometry, HadamardFold};
use crate::matmul::{Int8Matrix, Matrix, T2pMatrix};
use crate::runner::{GgmlType, TensorStore};

/// A projection as a layer holds it: the weight [`Matrix`] with what its input goes through
/// first.
pub struct Projection {
    /// The weights.
    pub matrix: Matrix,
    /// The fold's transform of the activation.
    pub fold: FoldKind,
    /// The file holds the weight in BF16: llama.cpp rounds the activation to bf16 too.
    pub bf16_input: bool,
}

/// What a matrix does to its input activation before multiplying: matrices of one kind read
/// one transformed (and quantized) copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputKind {
    /// The fold's rotation.
    pub rotation: FoldKind,
    /// Rounding to bf16 (before a BF16 weight, as llama.cpp does).
    pub bf16: bool,
}

impl InputKind {
    /// The activation as it is.
    pub const PLAIN: InputKind = InputKind {
        rotation: FoldKind::None,
        bf16: false,
    };
}

impl Projection {
    /// What its input goes through first (`round_bf16`: whether the model rounds activations
    /// before BF16 weights).
    pub fn input_kind(&self, round_bf16: bool) -> InputKind {
        InputKind {
            rotation: self.fold,
            bf16: self.bf16_input && round_bf16,
        }
    }

    /// Its T2P weights if it is ternary and reads input kind `kind`.
    pub(crate) fn ternary_for(&self, kind: InputKind, round_bf16: bool) -> Option<&T2pMatrix> {
        match &self.matrix {
            Matrix::T2p(t) if self.input_kind(round_bf16) == kind => Some(t),
            _ => None,
        }
    }

    /// Its BitNet weights if it is a BitNet matrix and reads input kind `kind`.
    pub(crate) fn int8_for(&self, kind: InputKind, round_bf16: bool) -> Option<&Int8Matrix> {
        match &self.matrix {
            Matrix::Int8(m) if self.input_kind(round_bf16) == kind => Some(m),
            _ => None,
        }
    }
}

/// Takes matrices and vectors out of the store, checks their shapes and records which of the
/// fold's listed names were honoured.
pub struct WeightLoader<'a> {
    store: &'a mut TensorStore,
    fold: Option<&'a HadamardFold>,
    honoured: HashSet<String>,
}

impl<'a> WeightLoader<'a> {
    /// A loader over `store`, applying `fold` to the matrices it lists.
    pub fn new(store: &'a mut TensorStore, fold: Option<&'a HadamardFold>) -> WeightLoader<'a> {
        WeightLoader {
            store,
            fold,
            honoured: HashSet::new(),
        }
    }

    /// Whether the store holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.store.get(name).is_some()
    }

    /// Moves matrix `name` (`rows x k`) out of the store; `geo` is the value-head geometry of
    /// an `ssm_out` whose fold permutes heads.
    pub fn mat(
        &mut self,
        name: &str,
        rows: usize,
        k: usize,
        geo: Option<GdnGeometry>,
    ) -> Result<Projection> {
        let bf16_input = self
            .store
            .get(name)
            .is_some_and(|t| t.ggml_type() == GgmlType::BF16);
        let matrix = self.matrix(name, rows, k)?;
        let fold = match self.fold {
            Some(f) if f.is_rotated(name) => {
                f.check_width(name, k)?;
                self.honoured.insert(name.to_string());
                match geo {
                    Some(g) if f.gdn_v_grouped() => FoldKind::PermuteRotate(g),
                    _ => FoldKind::Rotate,
                }
            }
            _ => FoldKind::None,
        };
        Ok(Projection {
            matrix,
            fold,
            bf16_input,
        })
    }

    fn matrix(&mut self, name: &str, rows: usize, k: usize) -> Result<Matrix> {
        let t = self
            .store
            .take(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let m = Matrix::from_tensor(t)?;
        if m.rows() != rows || m.k() != k {
            return Err(ModelError::BadShape(format!(
                "{name} is {} x {}, expected {rows} x {k}",
                m.rows(),
                m.k()
            )));
        }
        Ok(m)
    }

    /// Moves a 1-D f32-convertible tensor of `n` values out of the store.
    pub fn vector(&mut self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self
            .store
            .take(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let v = t.to_f32_vec()?;
        if v.len() != n {
            return Err(ModelError::BadShape(format!(
                "{name} has {} values, expected {n}",
                v.len()
            )));
        }
        Ok(v)
    }

    /// The token table, `output_norm` and the LM head (`output.weight`, or the table when
    /// absent: a tied head). The table's row count is the vocabulary size.
    pub fn embedding(&mut self, n_embd: usize) -> Result<Embedding> {
        let name = "token_embd.weight";
        let n_vocab = self
            .store
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?
            .n_rows();
        let table = self.matrix(name, n_vocab, n_embd)?;
        let rotated = self.fold.is_some_and(|f| f.is_rotated(name));
        if let Some(f) = self.fold.filter(|_| rotated) {
            f.check_width(name, n_embd)?;
            self.honoured.insert(name.into());
        }
        let out_norm = self.vector("output_norm.weight", n_embd)?;
        let output = match self.has("output.weight") {
            true => Some(self.mat("output.weight", n_vocab, n_embd, None)?),
            false => None,
        };
        Ok(Embedding {
            // A rotated table holds `R e`: as the head it needs `R` on its input, and it never
            // sees bf16 rounding (llama.cpp's tied head reads the table as it is).
            table: Projection {
                matrix: table,
                fold: if rotated {
                    FoldKind::Rotate
                } else {
                    FoldKind::None
                },
                bf16_input: false,
            },
            out_norm,
            output,
            n_vocab,
        })
    }

    /// Fails if the fold lists a weight no matrix honoured: skipping a rotation gives garbage.
    pub fn finish(self) -> Result<()> {
        let Some(f) = self.fold else { return Ok(()) };
        let mut missing: Vec<&str> = f.names().filter(|n| !self.honoured.contains(*n)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_unstable();
        Err(ModelError::BadShape(format!(
            "prism.hadamard: {} listed weight(s) are not matrices this runner applies \
             (e.g. {:?})",
            missing.len(),
            &missing[..missing.len().min(3)]
        )))
    }
}

/// The token table, the final norm and the LM head.
pub struct Embedding {
    /// `n_vocab x n_embd`; rows stored rotated when `table.fold` is a rotation.
    table: Projection,
    /// The final RMSNorm weight.
    pub out_norm: Vec<f32>,
    /// The LM head, `None` when tied to the table.
    output: Option<Projection>,
    /// Rows of the table.
    pub n_vocab: usize,
}

impl Embedding {
    /// Writes the embedding of token `id` into `row` (`n_embd` values).
    pub fn lookup(&self, id: u32, row: &mut [f32], fold: Option<&HadamardFold>) {
        self.table.matrix.dequantize_row(id as usize, row);
        if self.table.fold != FoldKind::None
            && let Some(f) = fold
        {
            f.unrotate(row);
        }
    }

    /// The LM head: `output.weight` or the table.
    pub fn head(&self) -> &Projection {
        self.output.as_ref().unwrap_or(&self.table)
    }

    /// Bytes the head streams per token.
    pub fn head_bytes(&self) -> usize {
        self.head().matrix.size_bytes()
    }
}
