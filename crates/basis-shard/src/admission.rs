//! [`Admission`]: when an id seen in training gets a row (Monolith's and
//! PERSIA's feature admission), and the owner-side state that decides it
//! (a count-min sketch, or nothing for the hash-based probability).
//!
//! Semantics, the same on every rank and at any group size: the owner of an
//! id decides, at a training `lookup`, for every id it holds no row of
//! (counted once per step however many ranks asked for it). An id that is
//! not admitted reads as the row it would start as ([`RowInit`]), like an
//! unseen id on the evaluation path, and its gradients of that step are
//! dropped (counted in [`TableStats::grads_dropped`]). The step that admits
//! an id creates its row and applies that step's gradient to it.
//!
//! [`RowInit`]: crate::RowInit
//! [`TableStats::grads_dropped`]: crate::TableStats::grads_dropped

use alloc::vec::Vec;

use crate::ShardError;

/// When an id seen in training gets a row.
///
/// The owner of an id decides, at a training `lookup`, for every id it
/// holds no row of (once per step however many ranks asked for it), so
/// every group size decides alike. An id that is not admitted reads as the
/// row it would start as ([`RowInit`](crate::RowInit)), and its gradients
/// of that step are dropped (counted in
/// [`TableStats::grads_dropped`](crate::TableStats::grads_dropped)); the
/// step that admits an id creates its row and applies that step's gradient.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Admission {
    /// On first sight (the default).
    #[default]
    Always,
    /// On the training step in which its estimated count of steps seen
    /// reaches `min_count`. Counts live in a count-min sketch of `depth`
    /// rows of `width` one-byte counters (`width × depth` bytes, fixed),
    /// with conservative update, halved every `decay_every` steps (0:
    /// never) so that a long stream keeps its false-admission rate.
    ///
    /// A sketch only over-counts. An id seen `c < min_count − 1` times
    /// before is falsely admitted at a step when every one of its `depth`
    /// counters carries at least `min_count − 1 − c` increments of other
    /// ids; with `N` increments since the counters were last near zero,
    /// Markov's inequality per independent row bounds that by
    /// `(N / (width · (min_count − 1 − c)))^depth`. For example
    /// `width = 2^22`, `depth = 4`, `N = 10^6` sightings per decay window:
    /// at most `0.24^4 ≈ 0.3 %` of never-seen ids are admitted at once
    /// with `min_count = 2` (the test `false_admissions_stay_under_the_bound`
    /// measures it).
    MinCount {
        /// Steps an id must be seen in (1 = always admit, at most 255).
        min_count: u8,
        /// Counters per row.
        width: usize,
        /// Rows (independent hashes).
        depth: usize,
        /// Halve every counter every this many training steps (0: never).
        decay_every: u64,
    },
    /// At each training step in which it is seen, with probability `p`,
    /// decided by a hash of `(seed, id, step)`: every rank and thread
    /// agrees, a run is reproducible, and no state is kept. An id seen in
    /// `k` steps is admitted with probability `1 − (1 − p)^k`.
    Probability {
        /// Per-sighting admission probability, in `(0, 1]`.
        p: f64,
        /// Seed of the hash.
        seed: u64,
    },
}

impl Admission {
    /// [`Admission::MinCount`] without decay, checked.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `min_count == 0`, `width == 0` or
    /// `depth == 0`.
    pub fn min_count(min_count: u8, width: usize, depth: usize) -> Result<Self, ShardError> {
        let rule = Self::MinCount {
            min_count,
            width,
            depth,
            decay_every: 0,
        };
        rule.check()?;
        Ok(rule)
    }

    /// [`Admission::Probability`], checked.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `p` outside `(0, 1]`.
    pub fn probability(p: f64, seed: u64) -> Result<Self, ShardError> {
        let rule = Self::Probability { p, seed };
        rule.check()?;
        Ok(rule)
    }

    fn check(&self) -> Result<(), ShardError> {
        match *self {
            Self::Always => Ok(()),
            Self::MinCount {
                min_count,
                width,
                depth,
                ..
            } => {
                if min_count == 0 || width == 0 || depth == 0 {
                    Err(ShardError::BadConfig(
                        "min-count admission needs min_count, width and depth > 0",
                    ))
                } else {
                    Ok(())
                }
            }
            Self::Probability { p, .. } => {
                if p > 0.0 && p <= 1.0 {
                    Ok(())
                } else {
                    Err(ShardError::BadConfig(
                        "admission probability outside (0, 1]",
                    ))
                }
            }
        }
    }

    /// A number that differs between rules (checkpoints of another rule
    /// are refused).
    pub(crate) fn identity(&self) -> u64 {
        match *self {
            Self::Always => 0,
            Self::MinCount {
                min_count,
                width,
                depth,
                decay_every,
            } => mix(1 ^ mix(
                u64::from(min_count) ^ mix(width as u64 ^ mix(depth as u64 ^ mix(decay_every)))
            )),
            Self::Probability { p, seed } => mix(2 ^ mix(p.to_bits() ^ mix(seed))),
        }
    }
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The counter of each of the `rows` sketch rows for `id` (an
/// independent hash per row, Lemire-reduced to `width`).
fn cells(id: u64, width: usize, rows: usize) -> impl Iterator<Item = usize> + Clone {
    (0..rows).map(move |r| {
        let h = mix(id ^ mix(0xA5A5_0000 + r as u64));
        r * width + ((u128::from(h) * width as u128) >> 64) as usize
    })
}

/// The owner-side admission state: the rule and its counters.
#[derive(Debug, Clone)]
pub(crate) struct Admitter {
    rule: Admission,
    /// `depth × width` counters, row-major (empty unless `MinCount`).
    counters: Vec<u8>,
    /// `(index, old value)` of the counters changed since `commit`.
    undo: Vec<(usize, u8)>,
}

impl Admitter {
    /// The state of `rule` (fallible allocation of the sketch).
    pub(crate) fn new(rule: Admission) -> Result<Self, ShardError> {
        rule.check()?;
        let mut counters = Vec::new();
        if let Admission::MinCount { width, depth, .. } = rule {
            let n = width
                .checked_mul(depth)
                .ok_or(ShardError::BadConfig("admission sketch too large"))?;
            counters
                .try_reserve_exact(n)
                .map_err(|_| ShardError::OutOfMemory { rows: 0 })?;
            counters.resize(n, 0);
        }
        Ok(Self {
            rule,
            counters,
            undo: Vec::new(),
        })
    }

    pub(crate) fn rule(&self) -> Admission {
        self.rule
    }

    /// Whether every id is admitted on sight.
    pub(crate) fn always(&self) -> bool {
        matches!(self.rule, Admission::Always)
    }

    /// Start of training step `step`: the sketch's decay.
    pub(crate) fn begin_step(&mut self, step: u64) {
        if let Admission::MinCount { decay_every, .. } = self.rule
            && decay_every > 0
            && step > 1
            && (step - 1).is_multiple_of(decay_every)
        {
            for c in &mut self.counters {
                *c >>= 1;
            }
        }
        self.undo.clear();
    }

    /// Whether `id`, holding no row and seen in training step `step`,
    /// gets one now (call once per id and step). Changes are undone by
    /// [`rollback`](Self::rollback) until the next `begin_step`.
    pub(crate) fn admit(&mut self, id: u64, step: u64) -> bool {
        match self.rule {
            Admission::Always => true,
            Admission::Probability { p, seed } => {
                let u = mix(seed ^ mix(id ^ mix(step)));
                // 53 random bits against p: exact for every f64 p.
                ((u >> 11) as f64) < p * (1u64 << 53) as f64
            }
            Admission::MinCount {
                min_count, width, ..
            } => {
                let cells = cells(id, width, self.counters.len() / width);
                let est = cells.clone().map(|i| self.counters[i]).min().unwrap_or(0);
                let new = est.saturating_add(1);
                // Conservative update: raise only the counters below the new estimate.
                for i in cells {
                    if self.counters[i] < new {
                        self.undo.push((i, self.counters[i]));
                        self.counters[i] = new;
                    }
                }
                new >= min_count
            }
        }
    }

    /// Undo the counter changes of this step (a failed lookup).
    pub(crate) fn rollback(&mut self) {
        while let Some((i, old)) = self.undo.pop() {
            self.counters[i] = old;
        }
    }

    /// The counters (what a checkpoint holds).
    pub(crate) fn counters(&self) -> &[u8] {
        &self.counters
    }

    /// Replace the counters by a checkpoint's.
    pub(crate) fn set_counters(&mut self, counters: Vec<u8>) -> Result<(), ShardError> {
        if counters.len() != self.counters.len() {
            return Err(ShardError::Corrupt(
                "admission counters are not the sketch's size",
            ));
        }
        self.counters = counters;
        self.undo.clear();
        Ok(())
    }

    pub(crate) fn bytes(&self) -> usize {
        self.counters.capacity() + self.undo.capacity() * core::mem::size_of::<(usize, u8)>()
    }
}
