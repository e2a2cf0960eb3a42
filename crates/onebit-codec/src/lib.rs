#![doc = include_str!("../README.md")]
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

mod compressor;
mod error;
pub mod fuzzing;
mod pack;
pub mod reference;
pub mod scale;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod simd;
pub mod stochastic;
mod wire;

pub use compressor::{Compressor, CompressorConfig, ErrorFeedback, full_step_chunk};
pub use error::CodecError;
pub use pack::{pack_signs, pack_signs_into, packed_len, sign_bit, unpack_add, unpack_signs};
pub use scale::{ScaleKind, check_finite};
pub use wire::{
    CHECKSUM_LEN, Compressed, HEADER_LEN, MAGIC, VERSION, VERSION_1, crc32c, decode, encoded_len,
};
