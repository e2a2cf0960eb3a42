#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

/// The `bitvec` crate [`pack_signs`] returns a `BitVec<u8, Msb0>` of, so
/// users name its types without pinning a version of their own.
pub use bitvec;

/// `with_<field>` setters of a `#[non_exhaustive]` configuration: users in
/// other crates cannot write its struct literal, so each field gets a
/// chainable setter (`Config::default().with_lr(0.1)`). Exported (hidden) so
/// the crates built on this one use the same macro instead of a copy.
#[doc(hidden)]
#[macro_export]
macro_rules! with_setters {
    ($ty:ident { $($setter:ident => $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("This configuration with [`", stringify!($field), "`](Self::", stringify!($field), ") set to `", stringify!($field), "`.")]
                #[must_use]
                pub const fn $setter(mut self, $field: $t) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

mod compressor;
mod error;
pub mod exec;
pub mod graded;
// Entry points of the fuzz targets: test support, not API.
#[doc(hidden)]
pub mod fuzzing;
mod pack;
// Slow, obviously correct implementations the tests compare against.
#[doc(hidden)]
pub mod reference;
pub mod scale;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod simd;
pub mod stochastic;
mod vector;

/// x86_64 run-time CPU feature detection that works without `std`
/// (`cpuid` + `xgetbv`, cached); shared with `onebit-adam`'s kernels.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub mod cpu {
    pub use crate::simd::{has_avx, has_avx2, has_avx512f, has_fma};
}
pub mod wire;

pub use compressor::{Compressor, CompressorConfig, ErrorFeedback, full_step_chunk};
pub use error::CodecError;
pub use graded::Grade;
pub use pack::{
    pack_signs, pack_signs_into, packed_len, sign_bit, unpack_add, unpack_signs, unpack_sum,
};
pub use scale::{ScaleKind, check_finite};
// The format constants (`MAGIC`, `VERSION`, `VERSION_1`) stay in `wire`.
pub use wire::{CHECKSUM_LEN, Compressed, HEADER_LEN, crc32c, decode, encoded_len};
