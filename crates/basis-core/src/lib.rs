#![doc = include_str!("../README.md")]
//!
//! Module map: [`config`] (hyper-parameters), [`kernel`] (the step's phases,
//! for parallel adapters), [`exec`] (how planning's data-parallel pieces run), the optimizers [`Basis`], [`ExactAdam`],
//! [`RowwiseAdagrad`], [`Sgd`] behind the object-safe [`SparseOptimizer`].
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

extern crate alloc;

mod adagrad;
mod adam;
mod basis;
mod batch;
pub mod config;
mod error;
pub mod exec;
pub mod fuzzing;
pub mod kernel;
mod optimizer;
mod quant;
mod report;
mod sgd;
mod state;
mod store;
mod table;

pub use adagrad::{AdagradConfig, RowwiseAdagrad};
pub use adam::{AdamConfig, ExactAdam};
pub use basis::{Basis, BucketView, sign_of};
pub use batch::MAX_GRAD_ABS;
pub use config::{
    Accumulate, BasisConfig, Direction, NonFinitePolicy, Profile, RowIndex, RowScaleConfig,
    ScalarLrSchedule, ScalarRule, ScalarStorage, TablePrecision,
};
pub use error::{ConfigError, GrowError, StateError, StateField, StepError, TableError};
pub use optimizer::SparseOptimizer;
pub use quant::{LogCode, bf16_stochastic};
pub use report::{Diagnostics, HISTOGRAM_BINS, MemoryReport, StepReport};
pub use sgd::Sgd;
pub use state::{MAGIC, VERSION};
pub use table::{DenseTable, RowAccess};
