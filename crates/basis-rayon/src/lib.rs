//! Parallel, deterministic BASIS and codec kernels, and Hogwild bucket tables.
#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod atomic_table;
mod codec;
mod dense;
mod error;
mod step;
mod striped_table;
mod sync;
mod table;

#[cfg(all(test, loom))]
mod loom_models;

pub use atomic_table::AtomicMomentTable;
pub use codec::{
    ParCompressor, par_decode_add, par_decode_into, par_pack_signs_into, par_unpack_signs,
};
pub use dense::{par_adam_step, par_adam_update};
pub use error::Error;
pub use step::{Rayon, par_exact_adam_step_dense, par_step, par_step_dense, thread_pool};
pub use striped_table::StripedMomentTable;
pub use table::{MomentParams, MomentTable};
