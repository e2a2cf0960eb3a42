//! Parallel, deterministic BASIS and codec kernels, and Hogwild bucket tables.
#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![forbid(unsafe_code)]

/// `with_<field>` setters of a `#[non_exhaustive]` configuration: users in
/// other crates cannot write its struct literal, so each field gets a
/// chainable setter (`Config::default().with_lr(0.1)`).
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
pub use step::{Rayon, par_step, par_step_dense, thread_pool};
pub use striped_table::StripedMomentTable;
pub use table::{MomentParams, MomentTable};
