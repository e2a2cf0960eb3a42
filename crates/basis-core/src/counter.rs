//! Per-row update counters: the exact 2-byte saturating counter, or a
//! compact log-scale (Morris-style) counter of 3 or 4 bits packed into
//! 64-bit words (issue 26, 2026-12-06).
//!
//! A compact counter stores a level `L` whose estimate is `v_L` from a fixed
//! table (`0, 1, 2, 4, …` for [`RowCounter::Log4`]). The kernel adds 1 to the
//! estimate as it adds 1 to an exact count; storing `v_L + 1` rounds it
//! *stochastically* between its two neighbouring levels, up with probability
//! `1/(v_{L+1} − v_L)`, so `E[v_next] = v_L + 1` and the estimate after `n`
//! updates is unbiased, `E[v] = n`, until the top level (where it saturates,
//! as the exact counter does at 65 535). The randomness comes from the
//! caller's deterministic bits (a hash of the configuration's seed, the step
//! and the row's key), so every run draws the same increments and an
//! exported state continues bit for bit.
//!
//! Why a compact counter is enough: `Accumulate::EmaAnnealed` (β 0.99,
//! power 1) reads the count only through `max(β, 1 − 1/n)`, which is β for
//! every `n ≤ 100`; past that a relative error in `n` moves the step by
//! about half that error (the step goes as `n^(−1/2)`), against the EMA's
//! step which does not anneal at all.

use alloc::vec::Vec;

use crate::error::{ConfigError, GrowError, StateError, try_filled};

/// How a row's update count is kept (the rules that read one:
/// [`Accumulate::CountAnnealed`](crate::Accumulate::CountAnnealed) and
/// [`Accumulate::EmaAnnealed`](crate::Accumulate::EmaAnnealed)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum RowCounter {
    /// The exact count, 2 bytes per row, saturating at 65 535.
    Exact,
    /// A 4-bit log-scale counter (0.5 B/row): levels `0, 1, 2, 4, …,
    /// 16 384`, stochastic increments, unbiased up to 16 384 updates.
    Log4,
    /// A 3-bit log-scale counter (stored 21 to a 64-bit word: 0.38 B/row):
    /// levels `0, 1, 4, 16, …, 4 096`, stochastic increments, unbiased up to
    /// 4 096 updates (the default from 2026-12-06 until
    /// [`RowCounter::Log3Wide`] replaced it: it met every cell the exact
    /// count did up to 10^6 examples, docs/RESULTS.md).
    Log3,
    /// A 3-bit log-scale counter over the exact counter's range (0.38 B/row,
    /// as [`RowCounter::Log3`]): levels `0, 1, 64, 256, 1 024, 4 096,
    /// 16 384, 65 535`, stochastic increments, unbiased up to 65 535
    /// updates, where it saturates as the exact counter does. From 64 on these
    /// are `Log3`'s levels (×4), and below 100 the default rule does not
    /// read the count, so the levels 4 and 16 are traded for 16 384 and
    /// 65 535: `Log3` saturates at 4 096 updates, which a hot row of a
    /// 10^7-example stream at batch 256 (39 000 steps) passes early, and
    /// from there its β stays `1 − 1/4 096` and its steps stop shrinking
    /// (docs/RESULTS.md, "The row counter's range at 10^7"). The default
    /// (session 16): the same cells as `Log3` on the short benchmark and
    /// the 10^6 stream, and the 10^7 stream's at the carried-over rate.
    #[default]
    Log3Wide,
}

/// [`RowCounter::Log4`]'s levels: doubling from 1 (Morris with base 2).
const LOG4: [u16; 16] = [
    0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
];

/// [`RowCounter::Log3`]'s levels: ×4 from 1.
const LOG3: [u16; 8] = [0, 1, 4, 16, 64, 256, 1024, 4096];

/// [`RowCounter::Log3Wide`]'s levels: ×4 from 64, topped at `u16::MAX`.
const LOG3_WIDE: [u16; 8] = [0, 1, 64, 256, 1024, 4096, 16384, 65535];

impl RowCounter {
    /// Bits per row (16 for the exact counter).
    pub const fn bits(self) -> u32 {
        match self {
            Self::Exact => 16,
            Self::Log4 => 4,
            Self::Log3 | Self::Log3Wide => 3,
        }
    }

    /// The estimates of a compact counter's levels, ascending (`None` for
    /// the exact counter).
    pub const fn levels(self) -> Option<&'static [u16]> {
        match self {
            Self::Exact => None,
            Self::Log4 => Some(&LOG4),
            Self::Log3 => Some(&LOG3),
            Self::Log3Wide => Some(&LOG3_WIDE),
        }
    }

    /// The level a compact counter stores for `count` with random `bits`:
    /// `count` between levels `v_L ≤ count < v_{L+1}` goes up with
    /// probability `(count − v_L)/(v_{L+1} − v_L)` (to within 2^−32), so
    /// `E[v_level] = count` below the top level; at or above it, the top.
    pub(crate) fn level_of(levels: &[u16], count: u16, bits: u64) -> u8 {
        let top = levels.len() - 1;
        // `levels` starts at 0 and ascends: the last level ≤ count.
        let lo = levels.partition_point(|&v| v <= count) - 1;
        if lo == top {
            return top as u8;
        }
        let (a, b) = (u64::from(levels[lo]), u64::from(levels[lo + 1]));
        let r = bits >> 32;
        let up = r * (b - a) < (u64::from(count) - a) << 32;
        (lo + usize::from(up)) as u8
    }
}

/// The per-row counters of a store, in the layout of a [`RowCounter`].
#[derive(Debug, Clone)]
pub(crate) enum Counts {
    Exact(Vec<u16>),
    /// `per_word` levels of `width` bits in each word, slot `s` at word
    /// `s / per_word`, bits `width·(s % per_word)` up.
    Packed {
        kind: RowCounter,
        words: Vec<u64>,
        len: usize,
    },
}

impl Counts {
    /// `rows` counters at 0.
    pub(crate) fn new(kind: RowCounter, rows: u64) -> Result<Self, ConfigError> {
        Ok(match kind {
            RowCounter::Exact => Self::Exact(try_filled(rows, 1, 0u16)?),
            _ => {
                let per = u64::from(64 / kind.bits());
                let words = try_filled(rows.div_ceil(per), 1, 0u64)?;
                // The allocation above succeeded, so `rows` fits a usize.
                Self::Packed {
                    kind,
                    words,
                    len: rows as usize,
                }
            }
        })
    }

    /// An empty store of the same kind with room for `n` slots.
    pub(crate) fn empty_like(&self, n: usize) -> Self {
        match self {
            Self::Exact(_) => Self::Exact(Vec::with_capacity(n)),
            Self::Packed { kind, .. } => Self::Packed {
                kind: *kind,
                words: Vec::with_capacity(n.div_ceil(per_word(*kind))),
                len: 0,
            },
        }
    }

    /// The stored raw value of `slot`: the count, or a compact level.
    pub(crate) fn raw(&self, slot: usize) -> u16 {
        match self {
            Self::Exact(v) => v[slot],
            Self::Packed { kind, words, .. } => {
                let (w, shift, mask) = place(*kind, slot);
                ((words[w] >> shift) & mask) as u16
            }
        }
    }

    /// Sets `slot`'s raw value (a level below the kind's level count).
    pub(crate) fn set_raw(&mut self, slot: usize, raw: u16) {
        match self {
            Self::Exact(v) => v[slot] = raw,
            Self::Packed { kind, words, .. } => {
                let (w, shift, mask) = place(*kind, slot);
                words[w] = (words[w] & !(mask << shift)) | ((u64::from(raw) & mask) << shift);
            }
        }
    }

    /// The count (exact) or its estimate (compact) of `slot`.
    pub(crate) fn get(&self, slot: usize) -> u16 {
        match self {
            Self::Exact(v) => v[slot],
            Self::Packed { kind, .. } => match kind.levels() {
                Some(levels) => levels[usize::from(self.raw(slot))],
                None => self.raw(slot),
            },
        }
    }

    /// Stores `count` for `slot`: exactly, or as a compact level rounded
    /// stochastically with `bits` (see [`RowCounter::level_of`]).
    pub(crate) fn store(&mut self, slot: usize, count: u16, bits: u64) {
        match self {
            Self::Exact(v) => v[slot] = count,
            Self::Packed { kind, .. } => {
                let level = match kind.levels() {
                    Some(levels) => RowCounter::level_of(levels, count, bits),
                    None => 0,
                };
                self.set_raw(slot, u16::from(level));
            }
        }
    }

    /// Whether [`store`](Self::store) reads its random bits.
    pub(crate) fn rounds(&self) -> bool {
        matches!(self, Self::Packed { .. })
    }

    /// Appends one slot at 0.
    pub(crate) fn push_zero(&mut self) {
        match self {
            Self::Exact(v) => v.push(0),
            Self::Packed { kind, words, len } => {
                if *len % per_word(*kind) == 0 {
                    words.push(0);
                }
                // A word kept after a swap-removal may hold stale bits.
                let (w, shift, mask) = place(*kind, *len);
                words[w] &= !(mask << shift);
                *len += 1;
            }
        }
    }

    /// Slots held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Exact(v) => v.len(),
            Self::Packed { len, .. } => *len,
        }
    }

    /// Reserves room for `extra` more slots, fallibly.
    pub(crate) fn try_reserve(&mut self, extra: usize) -> Result<(), ()> {
        match self {
            Self::Exact(v) => v.try_reserve(extra).map_err(|_| ()),
            Self::Packed { kind, words, len } => {
                let need = (*len + extra).div_ceil(per_word(*kind));
                words
                    .try_reserve(need.saturating_sub(words.len()))
                    .map_err(|_| ())
            }
        }
    }

    /// Grows to `n` slots at 0 (`rows` names them in the error).
    pub(crate) fn grow(&mut self, n: usize, rows: u64) -> Result<(), GrowError> {
        match self {
            Self::Exact(v) => crate::error::try_grow(v, n, 0, rows),
            Self::Packed { kind, words, len } => {
                let old = *len;
                if n <= old {
                    return Ok(());
                }
                crate::error::try_grow(words, n.div_ceil(per_word(*kind)), 0, rows)?;
                *len = n;
                // Slots past the old length in its last word may hold
                // stale bits of a removed slot.
                for s in old..n {
                    let (w, shift, mask) = place(*kind, s);
                    words[w] &= !(mask << shift);
                }
                Ok(())
            }
        }
    }

    /// Moves slot `last` into `slot` and drops the last slot.
    pub(crate) fn swap_remove(&mut self, slot: usize, last: usize) {
        match self {
            Self::Exact(v) => crate::row_move::swap_remove_slot(v, 1, slot, last),
            Self::Packed { .. } => {
                let moved = self.raw(last);
                self.set_raw(slot, moved);
                self.set_raw(last, 0);
                if let Self::Packed { kind, words, len } = self {
                    *len = last;
                    words.truncate(last.div_ceil(per_word(*kind)));
                }
            }
        }
    }

    /// Heap bytes (capacity).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Self::Exact(v) => v.capacity() * size_of::<u16>(),
            Self::Packed { words, .. } => words.capacity() * size_of::<u64>(),
        }
    }

    /// Bytes of one slot's raw value in a state or row blob (2 exact, 1
    /// compact: the level).
    pub(crate) fn blob_bytes(&self) -> usize {
        match self {
            Self::Exact(_) => 2,
            Self::Packed { .. } => 1,
        }
    }

    /// Writes `slot`'s raw value in the blob layout.
    pub(crate) fn write(&self, w: &mut crate::state::Writer, slot: usize) {
        match self {
            Self::Exact(v) => w.u16(v[slot]),
            Self::Packed { .. } => w.u8(self.raw(slot) as u8),
        }
    }

    /// Reads one raw value in the blob layout (a level beyond the kind's
    /// levels is [`StateError::Malformed`]).
    pub(crate) fn read(&self, r: &mut crate::state::Reader<'_>) -> Result<u16, StateError> {
        match self {
            Self::Exact(_) => r.u16(),
            Self::Packed { kind, .. } => {
                let level = r.u8()?;
                if u32::from(level) >> kind.bits() != 0 {
                    return Err(StateError::Malformed);
                }
                Ok(u16::from(level))
            }
        }
    }

    /// The state fingerprint's value of this layout (1 for the exact
    /// counter, as before compact counters existed, so older states read).
    pub(crate) fn fingerprint(&self) -> u64 {
        match self {
            Self::Exact(_) => 1,
            Self::Packed { kind, .. } => match kind {
                RowCounter::Log4 => 2,
                RowCounter::Log3 => 3,
                RowCounter::Log3Wide => 4,
                RowCounter::Exact => 1,
            },
        }
    }
}

/// Slots per 64-bit word of a compact counter.
const fn per_word(kind: RowCounter) -> usize {
    (64 / kind.bits()) as usize
}

/// `(word, shift, mask)` of `slot`.
fn place(kind: RowCounter, slot: usize) -> (usize, u32, u64) {
    let per = per_word(kind);
    let bits = kind.bits();
    (slot / per, bits * (slot % per) as u32, (1u64 << bits) - 1)
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::quant::random_bits;
    use alloc::vec;
    use proptest::prelude::*;

    /// The exact distribution of a compact counter's estimate after `n`
    /// updates, by dynamic programming over the levels in f64 (the slow
    /// reference): `p[L]` = P(level L), and the expectation lost to
    /// saturation (Σ over the updates of P(at the top before it)).
    fn distribution(kind: RowCounter, n: u32) -> (Vec<f64>, f64) {
        let levels = kind.levels().unwrap();
        let mut p = vec![0.0f64; levels.len()];
        p[0] = 1.0;
        let mut lost = 0.0;
        for _ in 0..n {
            let mut q = vec![0.0f64; levels.len()];
            for (l, &pl) in p.iter().enumerate() {
                if l + 1 == levels.len() {
                    q[l] += pl;
                    lost += pl;
                    continue;
                }
                let gap = f64::from(levels[l + 1] - levels[l]);
                q[l + 1] += pl / gap;
                q[l] += pl * (1.0 - 1.0 / gap);
            }
            p = q;
        }
        (p, lost)
    }

    fn moments(kind: RowCounter, p: &[f64]) -> (f64, f64) {
        let levels = kind.levels().unwrap();
        let mean: f64 = p.iter().zip(levels).map(|(q, &v)| q * f64::from(v)).sum();
        let var: f64 = p
            .iter()
            .zip(levels)
            .map(|(q, &v)| q * (f64::from(v) - mean).powi(2))
            .sum();
        (mean, var)
    }

    /// Runs `trials` counters `n` updates each through [`Counts`] as the
    /// optimizer does (estimate + 1, stored with hashed bits), returns the
    /// mean and variance of the estimates and the level histogram.
    fn simulate(kind: RowCounter, n: u32, trials: usize, seed: u64) -> (f64, f64, Vec<usize>) {
        let mut c = Counts::new(kind, trials as u64).unwrap();
        for step in 0..u64::from(n) {
            for slot in 0..trials {
                let count = c.get(slot).saturating_add(1);
                c.store(slot, count, random_bits(seed, step, slot as u64));
            }
        }
        let levels = kind.levels().unwrap();
        let mut hist = vec![0usize; levels.len()];
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for slot in 0..trials {
            hist[usize::from(c.raw(slot))] += 1;
            let v = f64::from(c.get(slot));
            s += v;
            s2 += v * v;
        }
        let mean = s / trials as f64;
        (mean, s2 / trials as f64 - mean * mean, hist)
    }

    /// Below the top level the estimate is unbiased: the exact distribution
    /// has mean `n` less what saturation at the top level lost (under
    /// 1 % of n here: 0.2 % for `Log3` at 400), and the simulated counters (4 000
    /// rows, hashed bits) have a mean within 4 standard errors of `n` and a
    /// level histogram matching the exact distribution (each level's count
    /// within 4 binomial standard deviations + 3).
    #[test]
    fn the_estimate_is_unbiased_against_the_exact_distribution() {
        let trials = 4000;
        for (kind, ns) in [
            (RowCounter::Log4, &[1u32, 3, 50, 100, 300, 1000][..]),
            (RowCounter::Log3, &[1u32, 5, 100, 400][..]),
            (RowCounter::Log3Wide, &[1u32, 9, 100, 3000][..]),
        ] {
            for &n in ns {
                let (p, lost) = distribution(kind, n);
                let (mean, var) = moments(kind, &p);
                // Unbiased but for the top level's saturation, which is
                // rare this far below it.
                assert!(
                    (mean - (f64::from(n) - lost)).abs() < 1e-9 * f64::from(n),
                    "{kind:?} {n}: {mean}"
                );
                assert!(lost < 1e-2 * f64::from(n), "{kind:?} {n}: {lost}");
                let (m, v, hist) = simulate(kind, n, trials, 0xC0FFEE ^ u64::from(n));
                let se = (var / trials as f64).sqrt();
                assert!(
                    (m - f64::from(n)).abs() <= 4.0 * se + 1e-9,
                    "{kind:?} {n}: mean {m}, se {se}"
                );
                // The variance is the reference's within 30 % (4 000 draws).
                assert!(
                    (v - var).abs() <= 0.3 * var + 1e-9,
                    "{kind:?} {n}: var {v} vs {var}"
                );
                for (l, (&h, &q)) in hist.iter().zip(&p).enumerate() {
                    let e = q * trials as f64;
                    let sd = (e * (1.0 - q)).sqrt();
                    assert!(
                        (h as f64 - e).abs() <= 4.0 * sd + 3.0,
                        "{kind:?} {n} level {l}: {h} vs {e}"
                    );
                }
            }
        }
    }

    /// At the top level the counter saturates (as the exact one at 65 535).
    #[test]
    fn the_top_level_saturates() {
        for kind in [RowCounter::Log4, RowCounter::Log3, RowCounter::Log3Wide] {
            let levels = kind.levels().unwrap();
            let top = *levels.last().unwrap();
            for bits in [0u64, u64::MAX, 0x1234_5678_9ABC_DEF0] {
                assert_eq!(
                    usize::from(RowCounter::level_of(levels, top.saturating_add(1), bits)),
                    levels.len() - 1
                );
                assert_eq!(
                    usize::from(RowCounter::level_of(levels, u16::MAX, bits)),
                    levels.len() - 1
                );
            }
            // A representable count stores exactly whatever the bits.
            for (l, &v) in levels.iter().enumerate() {
                for bits in [0u64, u64::MAX] {
                    assert_eq!(usize::from(RowCounter::level_of(levels, v, bits)), l);
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push,
        Set(usize, u16),
        Remove(usize),
        Grow(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Push),
            (any::<usize>(), any::<u16>()).prop_map(|(s, v)| Op::Set(s, v)),
            any::<usize>().prop_map(Op::Remove),
            (0usize..40).prop_map(Op::Grow),
        ]
    }

    proptest! {
        /// The packed layout against a plain `Vec<u16>` of levels through
        /// any sequence of pushes, writes, swap-removals and growth: every
        /// slot reads back what the reference holds, and the words hold no
        /// more than `len` slots need.
        #[test]
        fn packing_matches_a_plain_vector(
            log3 in any::<bool>(),
            start in 0u64..70,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let kind = if log3 { RowCounter::Log3 } else { RowCounter::Log4 };
            let mask = (1u16 << kind.bits()) - 1;
            let mut c = Counts::new(kind, start).unwrap();
            let mut r = vec![0u16; start as usize];
            for op in ops {
                match op {
                    Op::Push => {
                        c.push_zero();
                        r.push(0);
                    }
                    Op::Set(s, v) if !r.is_empty() => {
                        let s = s % r.len();
                        c.set_raw(s, v & mask);
                        r[s] = v & mask;
                    }
                    Op::Remove(s) if !r.is_empty() => {
                        let s = s % r.len();
                        let last = r.len() - 1;
                        c.swap_remove(s, last);
                        r.swap_remove(s);
                    }
                    Op::Grow(extra) => {
                        let n = r.len() + extra;
                        c.grow(n, n as u64).unwrap();
                        r.resize(n, 0);
                    }
                    _ => {}
                }
                prop_assert_eq!(c.len(), r.len());
                for (s, &v) in r.iter().enumerate() {
                    prop_assert_eq!(c.raw(s), v, "slot {}", s);
                    prop_assert_eq!(c.get(s), kind.levels().unwrap()[usize::from(v)]);
                }
                if let Counts::Packed { words, .. } = &c {
                    prop_assert_eq!(words.len(), r.len().div_ceil(per_word(kind)));
                }
            }
        }
    }
}
