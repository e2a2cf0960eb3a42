#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
//!
//! Module map: [`config`] (hyper-parameters), [`kernel`] (the step's phases,
//! for parallel adapters), [`exec`] (how planning's data-parallel pieces run), the optimizers [`Basis`], [`ExactAdam`],
//! [`RowwiseAdagrad`], [`Sgd`] behind the object-safe [`SparseOptimizer`], and
//! the baselines users would otherwise pick: [`PartialRowwiseAdam`]
//! (FBGEMM), [`RowStepAdam`] (per-row bias correction), [`Ftrl`]
//! (FTRL-Proximal) and [`Adam8bit`] (bitsandbytes' 8-bit block-wise state).
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

extern crate alloc;

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

/// The setters of the Adam hyper-parameters [`AdamConfig`] and
/// [`BasisConfig`] share (same names, types and meaning).
macro_rules! adam_setters {
    ($ty:ident) => {
        with_setters!($ty {
    with_dim => dim: usize,
    with_lr => lr: f32,
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_bias_correction => bias_correction: bool,
        });
    };
}

mod adagrad;
mod adam;
mod adam8bit;
mod basis;
mod batch;
mod builder;
mod checks;
pub mod config;
mod config_option;
mod counter;
mod error;
pub mod exec;
mod ftrl;
// Entry points of the fuzz targets: test support, not API.
#[doc(hidden)]
pub mod fuzzing;
pub mod kernel;
mod keys;
mod kind;
mod low_precision;
mod math;
mod optimizer;
mod partial_rowwise_adam;
mod quant;
mod report;
mod row_move;
mod rows;
mod rowstep_adam;
mod sgd;
pub mod slot_index;
pub mod state;
mod store;
mod table;
// Bench and example workloads shared with basis-rayon: test support, not API.
#[doc(hidden)]
pub mod workload;

pub use adagrad::{AdagradConfig, RowwiseAdagrad};
pub use adam::{AdamConfig, ExactAdam};
pub use adam8bit::{Adam8bit, DEFAULT_BLOCK, dynamic_map};
/// The bucketers [`Basis`] is generic over, re-exported so users need no
/// separate `balanced-hash` dependency (and cannot mismatch its version).
pub use balanced_hash::{Bucketer, DChoice, OneChoice};
pub use basis::{Basis, BucketView, sign_of};
pub use batch::MAX_GRAD_ABS;
pub use builder::{LearnedScalarBuilder, RowScaledBuilder};
pub use config::{
    Accumulate, BasisConfig, ConfigOption, Direction, LEARNED_SCALAR_ROWS_PER_BUCKET,
    NonFinitePolicy, Profile, ROW_SCALED_ROWS_PER_BUCKET, RowCounter, RowIndex, RowScaleConfig,
    ScalarLrSchedule, ScalarRule, ScalarStorage, TablePrecision,
};
pub use error::{
    ConfigError, GrowError, RowStateError, RowStateUnsupported, StateError, StateField, StepError,
    TableError,
};
pub use ftrl::{Ftrl, FtrlConfig};
/// The `half` crate whose `bf16` [`bf16_stochastic`] returns, so users name
/// it without pinning a version of their own.
pub use half;
pub use low_precision::{LowPrecisionRows, RowFormat, StepRows, rounding_bits};
pub use optimizer::SparseOptimizer;
pub use partial_rowwise_adam::PartialRowwiseAdam;
pub use quant::{LogCode, bf16_stochastic};
pub use report::{Diagnostics, HISTOGRAM_BINS, MemoryReport, StepReport};
pub use rowstep_adam::RowStepAdam;
pub use sgd::Sgd;
pub use slot_index::{IndexError, Removed, SlotIndex};
pub use store::{IdBuildHasher, IdHasher};
pub use table::{DenseTable, RowAccess};
