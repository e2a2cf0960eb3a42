#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

mod allreduce;
pub mod dense;
mod error;
mod freeze;
mod fused;
mod graded;
mod header;
mod kernel;
mod lamb;
mod lamb_state;
mod memory;
mod optimizer;
mod overlap;
mod policy;
mod record;
// Single-threaded simulations the tests compare against: test support, not API.
#[doc(hidden)]
pub mod reference;
// The slow 1-bit LAMB simulation the tests compare against: test support, not API.
#[doc(hidden)]
pub mod reference_lamb;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod simd;
mod state;
mod zero_one;
mod zero_one_state;
// The single-threaded simulation of 0/1 Adam the tests compare against.
#[doc(hidden)]
pub mod reference_zero_one;
// A deterministic training problem for tests and benches: test support, not API.
#[doc(hidden)]
pub mod testing;

/// The crate of [`comm_traits::Communicator`], whose types appear in this
/// crate's API ([`OneBitError::Comm`], the reports' byte counts), so users
/// name them without pinning a version of their own.
pub use comm_traits;

pub use allreduce::{
    AllReduceReport, AllReduceState, ErrorNorms, compressed_allreduce, compressed_allreduce_bytes,
    padded_len,
};
pub use dense::{AdamW, Kernel};
pub use error::{OneBitError, StateError};
pub use freeze::{AutoFreeze, FreezePolicy};
pub use graded::{GradedState, graded_allreduce, graded_allreduce_bytes};
pub use lamb::{LambConfig, LambGroup, LambStepReport, OneBitLamb};
pub use memory::Memory;
pub use onebit_codec::{Grade, ScaleKind};
pub use optimizer::finite::FiniteCheck;
pub use optimizer::split::SplitStep;
pub use optimizer::{Config, GroupSpec, GroupTelemetry, OneBitAdam, Stage, StepReport, Variant};
pub use overlap::overlapped_allreduce;
pub use policy::{Policy, WarmupReduce};
pub use zero_one::{ZeroOneAdam, ZeroOneConfig, ZeroOneMemory, ZeroOneReport, ZeroOneStage};
