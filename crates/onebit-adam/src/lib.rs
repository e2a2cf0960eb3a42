#![doc = include_str!("../README.md")]
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod allreduce;
mod error;
mod header;
mod optimizer;
pub mod reference;
mod state;
pub mod testing;

pub use allreduce::{
    AllReduceReport, AllReduceState, ErrorNorms, compressed_allreduce, compressed_allreduce_bytes,
    padded_len,
};
pub use error::{OneBitError, StateError};
pub use onebit_codec::ScaleKind;
pub use optimizer::{Config, GroupSpec, OneBitAdam, Policy, Stage, StepReport, Variant};
