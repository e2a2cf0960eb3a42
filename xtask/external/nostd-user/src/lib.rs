//! A `no_std` user of the published crates: built for `x86_64-unknown-none`
//! (no `std` exists there) and tested on the host by
//! `cargo xtask publish-check`.
#![no_std]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;

use balanced_hash::OneChoice;
use basis_core::{Basis, BasisConfig, DenseTable, RowIndex, SparseOptimizer};
use comm_traits::SingleRank;
use onebit_adam::{AllReduceState, compressed_allreduce};
use onebit_codec::{Compressor, decode};

/// Errors of the crates this one uses, in one type (`?` converts them).
#[derive(Debug)]
pub enum Error {
    /// A BASIS configuration or step failed.
    Basis(basis_core::StepError),
    /// The bucketer could not be built.
    Hash(balanced_hash::HashError),
    /// BASIS rejected its configuration.
    Config(basis_core::ConfigError),
    /// The embedding table did not fit `dim`.
    Table(basis_core::TableError),
    /// Compression or decoding failed.
    Codec(onebit_codec::CodecError),
    /// The compressed all-reduce failed.
    OneBit(onebit_adam::OneBitError),
}

macro_rules! from {
    ($($variant:ident($ty:ty)),*) => {
        $(impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Self::$variant(e)
            }
        })*
    };
}
from!(
    Basis(basis_core::StepError),
    Hash(balanced_hash::HashError),
    Config(basis_core::ConfigError),
    Table(basis_core::TableError),
    Codec(onebit_codec::CodecError),
    OneBit(onebit_adam::OneBitError)
);

/// `steps` BASIS steps on a dense table of `rows` rows of `dim`, every row's
/// gradient the row itself (minimising ‖w‖²); returns the table.
pub fn train_basis(rows: u64, dim: usize, steps: usize) -> Result<Vec<f32>, Error> {
    let config = BasisConfig::default()
        .with_dim(dim)
        .with_row_index(RowIndex::Dense { rows });
    let mut opt = Basis::new(config, OneChoice::new(4, 7)?)?;
    let ids: Vec<u64> = (0..rows).collect();
    let mut weights = vec![1.0f32; ids.len() * dim];
    for _ in 0..steps {
        let grads = weights.clone();
        let mut table = DenseTable::new(&mut weights, dim)?;
        opt.step(&ids, &grads, &mut table)?;
    }
    Ok(weights)
}

/// Compress `x` once with error feedback, through the wire format, and
/// decode it: `±scale` per element.
pub fn codec_roundtrip(x: &[f32]) -> Result<Vec<f32>, Error> {
    let mut compressor = Compressor::new(x.len());
    let wire = compressor.compress(x)?.encode();
    let mut out = vec![0.0f32; x.len()];
    decode(&wire)?.decode_add(&mut out)?;
    Ok(out)
}

/// The compressed all-reduce on a single rank (no transport needed).
pub fn allreduce_single(buf: &mut [f32]) -> Result<(), Error> {
    let mut comm = SingleRank::default();
    let mut state = AllReduceState::new();
    compressed_allreduce(&mut comm, buf, &mut state)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basis_shrinks_the_table() -> Result<(), Error> {
        let w = train_basis(8, 4, 20)?;
        assert!(w.iter().all(|v| v.abs() < 1.0), "{w:?}");
        Ok(())
    }

    #[test]
    fn codec_keeps_signs() -> Result<(), Error> {
        let x = [0.5f32, -2.0, 1.0, -0.25, 3.0, -1.0, 0.0, 2.0, -4.0];
        let y = codec_roundtrip(&x)?;
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(*a < 0.0, *b < 0.0, "{x:?} -> {y:?}");
        }
        Ok(())
    }

    #[test]
    fn single_rank_allreduce_keeps_signs() -> Result<(), Error> {
        let x: Vec<f32> = (0..64).map(|i| i as f32 - 31.5).collect();
        let mut y = x.clone();
        allreduce_single(&mut y)?;
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(*a < 0.0, *b < 0.0);
        }
        Ok(())
    }
}
