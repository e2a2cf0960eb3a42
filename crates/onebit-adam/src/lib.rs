#![doc = include_str!("../README.md")]
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

mod allreduce;
pub mod dense;
mod error;
mod header;
mod optimizer;
pub mod reference;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod simd;
mod state;
pub mod testing;

pub use allreduce::{
    AllReduceReport, AllReduceState, ErrorNorms, compressed_allreduce, compressed_allreduce_bytes,
    padded_len,
};
pub use dense::{AdamW, Kernel};
pub use error::{OneBitError, StateError};
pub use onebit_codec::ScaleKind;
pub use optimizer::{Config, GroupSpec, OneBitAdam, Policy, Stage, StepReport, Variant};
