//! MurmurHash3, Lemire range reduction and balanced multi-choice bucketing.
#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod bytes_key;
mod d_choice;
mod error;
mod mix;
pub mod murmur3;
mod one_choice;
mod sign;
mod stats;

pub use bytes_key::key_of_bytes;
pub use d_choice::{DChoice, Weighting};
pub use error::HashError;
pub use mix::{hash_u64, reduce};
pub use one_choice::OneChoice;
pub use sign::SignHash;
pub use stats::{LoadStats, count_loads};

/// Maps keys (u64 row ids) to buckets `0..buckets()`.
///
/// `bucket` is a pure look-up (never mutates, never allocates). Strategies that
/// remember a choice per key (d-choice) assign on first sight through `assign`;
/// `bucket` on a key never assigned returns the strategy's documented fallback
/// (for [`DChoice`]: candidate 0, which is the [`OneChoice`] bucket).
pub trait Bucketer {
    /// Number of buckets `B` (≥ 1).
    fn buckets(&self) -> u32;
    /// The bucket of `key`, `< buckets()`.
    fn bucket(&self, key: u64) -> u32;
    /// The bucket of `key`, choosing and remembering it on first sight.
    fn assign(&mut self, key: u64) -> u32 {
        self.bucket(key)
    }
    /// Bytes this bucketer holds (remembered choices, loads), for memory reports.
    fn memory_bytes(&self) -> usize {
        0
    }
}
