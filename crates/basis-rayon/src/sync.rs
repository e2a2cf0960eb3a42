//! The one place concurrent code takes its atomics and locks from.
//!
//! Under `cfg(loom)` (model checking, `cargo xtask loom`) these are loom's
//! instrumented types, so every interleaving the models explore goes through
//! the exact code that ships; otherwise they are `core`/`std`'s.

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

// `Mutex` has no `core` equivalent: std is the only home it has.
#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

/// Only the loom models' deliberately torn variant (two separate words) uses it.
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::AtomicU32;
