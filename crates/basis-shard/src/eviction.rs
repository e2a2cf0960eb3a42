//! [`Eviction`]: which rows an owner frees, by last-seen step (a TTL)
//! and/or a capacity bound (least recently seen first), and the choice of
//! the rows to free (a pure function of the rows' last-seen steps and ids,
//! so every run and rank decides alike).
//!
//! An owner sweeps at the start of a training `lookup`, every
//! `sweep_every` steps, before routing: the rows it frees are gone for that
//! lookup already, and a returning id starts again from its [`RowInit`]
//! value (and, if admission is on, must be admitted again). The capacity
//! bound holds after each sweep; between sweeps a rank holds at most the
//! rows created since. BASIS: the bucket state is shared by many rows and
//! stays; only the row and its per-row state go.
//!
//! [`RowInit`]: crate::RowInit

use alloc::vec::Vec;

use crate::ShardError;

/// Which rows an owner frees, and when.
///
/// An owner sweeps at the start of a training `lookup`, every
/// `sweep_every` steps, before routing: the rows it frees are gone for that
/// lookup already, and a returning id starts again from its
/// [`RowInit`](crate::RowInit) value and fresh optimizer state (and, with
/// admission on, must be admitted again). The capacity bound holds after
/// each sweep; between sweeps a rank also holds the rows created since.
/// BASIS keeps its bucket state (shared by many rows); only the row and its
/// per-row state go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    /// Free rows not looked up in the last `ttl` training steps.
    pub ttl: Option<u64>,
    /// After the TTL, free the least recently seen rows (ties: smaller id
    /// first) until at most `capacity` are held.
    pub capacity: Option<usize>,
    /// Sweep every this many training steps (at least 1).
    pub sweep_every: u64,
}

impl Eviction {
    /// Rows unseen for `ttl` steps go, checked every step.
    pub fn ttl(ttl: u64) -> Self {
        Self {
            ttl: Some(ttl),
            capacity: None,
            sweep_every: 1,
        }
    }

    /// At most `rows` rows after each sweep (every step).
    pub fn capacity(rows: usize) -> Self {
        Self {
            ttl: None,
            capacity: Some(rows),
            sweep_every: 1,
        }
    }

    /// With a capacity bound too.
    #[must_use]
    pub fn with_capacity(mut self, rows: usize) -> Self {
        self.capacity = Some(rows);
        self
    }

    /// Sweeping every `steps` steps (a sweep reads every row's last-seen
    /// step: `4 B × rows`).
    #[must_use]
    pub fn with_sweep_every(mut self, steps: u64) -> Self {
        self.sweep_every = steps;
        self
    }

    pub(crate) fn check(&self) -> Result<(), ShardError> {
        if self.sweep_every == 0 {
            return Err(ShardError::BadConfig("eviction sweeps every 0 steps"));
        }
        if self.ttl == Some(0) {
            return Err(ShardError::BadConfig(
                "an eviction TTL of 0 steps frees every row",
            ));
        }
        Ok(())
    }

    /// Whether training step `step` (1-based) starts with a sweep.
    pub(crate) fn sweeps_before(&self, step: u64) -> bool {
        step > 1 && (step - 1).is_multiple_of(self.sweep_every)
    }

    /// The slots to free, decreasing, when `now` training steps are done:
    /// `last_seen[s]` is slot `s`'s last step, `ids[s]` its id.
    pub(crate) fn select(&self, last_seen: &[u32], ids: &[u64], now: u64) -> Vec<u32> {
        let expired = |s: usize| match self.ttl {
            Some(ttl) => u64::from(last_seen[s]).saturating_add(ttl) <= now,
            None => false,
        };
        let mut gone: Vec<u32> = (0..last_seen.len())
            .filter(|&s| expired(s))
            .map(|s| s as u32)
            .collect();
        if let Some(cap) = self.capacity {
            let left = last_seen.len() - gone.len();
            if left > cap {
                let mut alive: Vec<(u32, u64, u32)> = (0..last_seen.len())
                    .filter(|&s| !expired(s))
                    .map(|s| (last_seen[s], ids[s], s as u32))
                    .collect();
                let extra = left - cap;
                alive.select_nth_unstable(extra - 1);
                gone.extend(alive[..extra].iter().map(|e| e.2));
            }
        }
        gone.sort_unstable_by_key(|&s| core::cmp::Reverse(s));
        gone
    }
}
