//! The one place concurrent code takes its atomics and locks from.
//!
//! Under `cfg(loom)` in this crate's own tests (the model checking of
//! `cargo xtask loom`) these are loom's instrumented types, so every
//! interleaving the models explore runs the exact code that ships; otherwise
//! they are `core`/`std`'s. (`test` is part of the condition because loom is
//! a dev-dependency: a non-test build under `--cfg loom`, e.g. of a crate
//! that depends on this one, keeps the real atomics.)

#[cfg(all(test, loom))]
pub(crate) use loom::sync::Mutex;
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(all(test, loom)))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
// `Mutex` has no `core` equivalent: std is its only home.
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::Mutex;

/// Only the loom models' deliberately torn variant (two separate words) uses it.
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::AtomicU32;
