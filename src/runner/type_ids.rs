//! Which layout each stored type id of a file has, decided once for the whole file.
//!
//! A few ids mean different layouts in different files: 42 is PrismML's legacy group-128 Q2_0
//! (pq2_0 bytes) in older Bonsai files and mainline llama.cpp's group-64 Q2_0 elsewhere; 36 is
//! bitnet.cpp's I2_S in its files and unused in ggml's; 135 and 134 are ik_llama.cpp's IQ2_BN and
//! IQ1_BN. A single
//! tensor's size cannot always tell them apart (a 3-row group-64 tensor of 768 weights takes
//! 216 bytes, 204 as group 128, and both round to the same 224 once aligned), so the layout is
//! the one that fits *every* tensor of the id, and a file whose tensors disagree is refused
//! with the name of a tensor that does not fit. An id no layout fits (or that t2p does not know)
//! is left as it is stored, sized by the room it has, so that `libt2p info` can still show the
//! file; the loader refuses such a tensor by name and type.

use super::error::{GgufError, Result};
use super::tensor_info::TensorInfo;
use crate::format::GgmlType;

/// The layouts a stored id may have, most likely first (the first one wins when several fit
/// every tensor: for id 42 that is pq2_0, what the id held before mainline reused it).
fn candidates(stored: u32) -> &'static [GgmlType] {
    match stored {
        42 => &[GgmlType::PQ2_0, GgmlType::Q2_0_G64],
        36 => &[GgmlType::I2_S],
        135 => &[GgmlType::IQ2_BN],
        134 => &[GgmlType::IQ1_BN],
        2142 => &[GgmlType::T2P],
        2143 => &[GgmlType::T2P_G64],
        _ => &[],
    }
}

/// Whether a tensor of `bytes` bytes fits a slot of `room` bytes: the next tensor starts at
/// most one alignment step after its end.
fn fits(bytes: u64, room: u64, alignment: u64) -> bool {
    bytes <= room && room < bytes.saturating_add(alignment.max(1))
}

/// Gives every tensor whose stored id has no fixed block size (see [`candidates`]) its layout
/// and byte size. `room[i]` is the space of tensor `i` up to the next tensor's data (or the end
/// of the file).
pub(super) fn resolve(tensors: &mut [TensorInfo], room: &[u64], alignment: u64) -> Result<()> {
    // The tensors of each such id, in one pass (a hostile file may hold many ids).
    let mut by_id: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (i, t) in tensors.iter().enumerate() {
        if t.ggml_type.block().is_none() {
            by_id.entry(t.stored_type_id).or_default().push(i);
        }
    }
    for (id, members) in by_id {
        let fit = |ty: GgmlType, i: usize| {
            ty.tensor_bytes(&tensors[i].shape)
                .filter(|&b| fits(b, room[i], alignment))
        };
        let chosen = candidates(id)
            .iter()
            .copied()
            .find(|&ty| members.iter().all(|&i| fit(ty, i).is_some()));
        if let Some(ty) = chosen {
            let sizes: Vec<u64> = members.iter().filter_map(|&i| fit(ty, i)).collect();
            for (&i, bytes) in members.iter().zip(sizes) {
                tensors[i].ggml_type = ty;
                tensors[i].n_bytes = bytes;
            }
            continue;
        }
        // No layout fits every tensor. If one fits some, the file mixes layouts under one id
        // (or a tensor is damaged): name the first tensor the best-fitting layout rejects.
        let best = candidates(id)
            .iter()
            .copied()
            .map(|ty| {
                (
                    ty,
                    members.iter().filter(|&&i| fit(ty, i).is_some()).count(),
                )
            })
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(_, n)| n);
        if let Some((ty, n)) = best {
            let &bad = members
                .iter()
                .find(|&&i| fit(ty, i).is_none())
                .expect("not every tensor fits");
            let t = &tensors[bad];
            let need = ty
                .tensor_bytes(&t.shape)
                .map_or("cannot hold its shape".to_string(), |b| {
                    format!("takes {b} bytes")
                });
            return Err(GgufError::BadTensor {
                name: t.name.clone(),
                offset: t.info_offset,
                reason: format!(
                    "type id {id}: {n} of the file's {} tensors of this id are {ty}, but this \
                     one ({} weights, shape {:?}) has {} bytes of room and as {ty} {need}; the \
                     tensors of one id must share a layout",
                    members.len(),
                    t.n_elements(),
                    t.shape,
                    room[bad],
                ),
            });
        }
        // No known layout at all: keep the stored id, sized by its room, for `info`.
        for &i in &members {
            tensors[i].n_bytes = room[i];
        }
    }
    Ok(())
}
