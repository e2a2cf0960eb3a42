//! What the table's integration tests share: a 64-bit mixer for
//! deterministic ids, a gradient that is a pure function of
//! `(step, salt, id)`, and the exact-Adam optimizer most of them step with.
// Each test file is its own crate and uses only part of this module.
#![allow(dead_code, clippy::unwrap_used)]

use basis_core::{AdamConfig, ExactAdam, RowIndex};
use basis_shard::BoxedOptimizer;

/// splitmix64's finaliser: a bijection on u64 that scatters nearby inputs.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A gradient in [-0.1, 0.1)^D as a function of `(step, salt, id)` only
/// (salt: e.g. the rank shifted past the id bits, or 0), so every group
/// size and every replay of a step sees the same values.
pub(crate) fn grad<const D: usize>(step: u64, salt: u64, id: u64) -> [f32; D] {
    let mut g = [0.0; D];
    for (j, x) in g.iter_mut().enumerate() {
        let u = mix(id ^ step.wrapping_mul(0x1234_5678) ^ salt ^ j as u64);
        *x = ((u >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2;
    }
    g
}

/// Exact Adam (lr 0.05) with dense growable row state of `dim` values.
pub(crate) fn adam(dim: usize) -> BoxedOptimizer {
    BoxedOptimizer(Box::new(
        ExactAdam::new(
            AdamConfig::default()
                .with_dim(dim)
                .with_lr(0.05)
                .with_row_index(RowIndex::Dense { rows: 0 }),
        )
        .unwrap(),
    ))
}
