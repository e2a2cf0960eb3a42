//! MurmurHash3, Lemire range reduction and balanced multi-choice bucketing.
#![no_std]
#![forbid(unsafe_code)]

/// Maps keys (u64 row ids) to buckets `0..buckets()`.
///
/// `bucket` is a pure look-up (never mutates, never allocates). Strategies that
/// remember a choice per key (d-choice) assign on first sight through `assign`;
/// `bucket` on a key never assigned returns the strategy's documented fallback.
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
