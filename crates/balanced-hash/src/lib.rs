//! MurmurHash3, Lemire range reduction and balanced multi-choice bucketing.
#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::vec::Vec;

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
pub use error::{HashError, SavedSetting};
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
///
/// # Example
///
/// Two choices per key keep the fullest bucket far closer to the mean than
/// one choice does (the max load drops from `≈ mean + √(2·mean·ln B)` to
/// `≈ mean + ln ln B / ln 2`).
///
/// ```
/// use balanced_hash::{Bucketer, DChoice, OneChoice, count_loads};
///
/// let (keys, buckets) = (100_000u64, 1_000u32);
/// let mut one = OneChoice::new(buckets, 7)?;
/// let mut two = DChoice::sparse(buckets, 2, 7)?;
/// let max = |loads: Vec<u64>| loads.into_iter().max().unwrap_or(0);
/// let one_max = max(count_loads(&mut one, 0..keys)?);
/// let two_max = max(count_loads(&mut two, 0..keys)?);
/// assert!(two_max < one_max);
/// assert!(two_max <= 105, "mean 100, two-choice max {two_max}");
/// // A key keeps the bucket it was assigned.
/// let b = two.assign(42);
/// assert_eq!((two.bucket(42), b < two.buckets()), (b, true));
/// # Ok::<(), balanced_hash::HashError>(())
/// ```
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
    /// What decides where keys land, so that saved per-bucket state can be
    /// refused when it is read back under another bucketer (state exported
    /// by `basis-core` records it). The default, [`BucketerIdentity::CUSTOM`],
    /// says nothing beyond "not one of this crate's strategies".
    fn identity(&self) -> BucketerIdentity {
        BucketerIdentity::CUSTOM
    }
    /// Whether this bucketer holds state of its own, beyond its
    /// [`identity`](Bucketer::identity), that decides where keys land (a
    /// [`DChoice`]'s remembered choices and loads). Saved optimizer state
    /// that does not carry it cannot be restored exactly and is refused.
    /// Default `false`: a bucketer that overrides [`Bucketer::save_state`]
    /// must override this too.
    fn has_state(&self) -> bool {
        false
    }
    /// Appends this bucketer's own state to `out`, in a byte format that is
    /// the same on every target (little-endian, no pointer-width sizes, no
    /// hash-map order). Writes nothing by default.
    fn save_state(&self, out: &mut Vec<u8>) {
        let _ = out;
    }
    /// Replaces this bucketer's state with `bytes` written by
    /// [`Bucketer::save_state`] of a bucketer built alike (same identity and
    /// bucket count). The default accepts only empty state.
    ///
    /// # Errors
    /// [`HashError::StateMismatch`] when `bytes` came from a bucketer set up
    /// differently, [`HashError::MalformedState`] when they are damaged,
    /// [`HashError::AllocationFailed`] when the state does not fit. Nothing
    /// changes on error.
    fn load_state(&mut self, bytes: &[u8]) -> Result<(), HashError> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(HashError::MalformedState)
        }
    }
}

/// The strategy, number of choices and seed of a [`Bucketer`]: two bucketers
/// with equal identities and bucket counts place every key alike (up to the
/// choices a d-choice bucketer remembers, which are its own state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketerIdentity {
    /// Strategy tag: [`BucketerIdentity::KIND_CUSTOM`], `KIND_ONE_CHOICE` or
    /// `KIND_D_CHOICE`.
    pub kind: u8,
    /// Hash choices per key (1 for one-choice and custom bucketers).
    pub choices: u8,
    /// The hash seed (0 for custom bucketers).
    pub seed: u64,
}

impl BucketerIdentity {
    /// Tag of a bucketer defined outside this crate.
    pub const KIND_CUSTOM: u8 = 0;
    /// Tag of [`OneChoice`].
    pub const KIND_ONE_CHOICE: u8 = 1;
    /// Tag of [`DChoice`].
    pub const KIND_D_CHOICE: u8 = 2;
    /// The identity of a bucketer that does not report one.
    pub const CUSTOM: Self = Self {
        kind: Self::KIND_CUSTOM,
        choices: 1,
        seed: 0,
    };
}
