//! d-choice bucketing ("power of d choices") with the choice remembered per key.

use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

use hashbrown::{HashMap, hash_map::Entry};

use crate::{Bucketer, HashError, mix::GOLDEN, mix::SeededMix, reduce};

mod saved;

/// Sparse choice map: `ahash` with its fixed default keys (no runtime RNG, `no_std`).
type ChoiceMap = HashMap<u64, u8, BuildHasherDefault<ahash::AHasher>>;

/// What a bucket's load counts, and so what d-choice balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Weighting {
    /// Each key adds its weight once, when it is first assigned
    /// (`assign` = weight 1: loads count distinct keys). The default.
    #[default]
    Distinct,
    /// Every `assign`/`assign_weighted` call adds its weight to the key's
    /// bucket, first sight or not: loads follow observed frequency, so later
    /// keys avoid buckets that hold hot keys.
    Frequency,
}

/// Where remembered choices live.
#[derive(Debug, Clone)]
enum Store {
    /// Dense ids `0..n_keys`: `bits` bits per key; code 0 = never assigned,
    /// code `c + 1` = chose candidate `c`. Key `k`'s code starts at bit
    /// `k · bits`, bit `i` being bit `i % 64` of word `i / 64` (LSB first).
    /// Plain `u64` words, not a pointer-width bit vector: the layout (and
    /// every result) is the same on 64-bit, 32-bit and wasm targets.
    Dense {
        n_keys: u64,
        bits: usize,
        codes: Vec<u64>,
    },
    /// Arbitrary u64 ids: key → chosen candidate index.
    Sparse(ChoiceMap),
}

/// Bits per dense key: enough for "unassigned" plus `d` choices, `ceil(log2(d + 1))`.
const fn dense_bits(d: u8) -> usize {
    match d {
        2 | 3 => 2,
        _ => 3,
    }
}

/// Reads the `bits`-bit code at bit `start` (LSB first: bit `i` is bit
/// `i % 64` of word `i / 64`, a code may straddle two words). This is the hot
/// path of every look-up.
#[inline]
fn read_code(words: &[u64], start: usize, bits: usize) -> u8 {
    let (word, offset) = (start / 64, start % 64);
    let mut v = words.get(word).copied().unwrap_or(0) >> offset;
    if offset + bits > 64 {
        v |= words.get(word + 1).copied().unwrap_or(0) << (64 - offset);
    }
    // `bits ≤ 3`, so the masked value fits in u8.
    (v & ((1 << bits) - 1)) as u8
}

/// Writes the `bits`-bit `code` at bit `start`, the inverse of [`read_code`].
#[inline]
fn write_code(words: &mut [u64], start: usize, bits: usize, code: u8) {
    let (word, offset) = (start / 64, start % 64);
    let mask = (1u64 << bits) - 1;
    let code = u64::from(code) & mask;
    if let Some(w) = words.get_mut(word) {
        *w = (*w & !(mask << offset)) | (code << offset);
    }
    if offset + bits > 64 {
        let high = offset + bits - 64;
        if let Some(w) = words.get_mut(word + 1) {
            *w = (*w & !((1u64 << high) - 1)) | (code >> (64 - offset));
        }
    }
}

/// d-choice bucketer: each key has `d` candidate buckets (from `d` derived
/// seeds); on first sight it takes the least-loaded candidate (ties → the
/// lowest candidate index) and that choice is remembered.
///
/// - **Candidates**: candidate `j` is `reduce(hash_u64(key, seed + j·0x9e3779b97f4a7c15), B)`
///   (wrapping add), so candidate 0 is exactly [`OneChoice`](crate::OneChoice)
///   with the same seed.
/// - **Look-ups** ([`Bucketer::bucket`]) read the remembered choice and hash
///   once: allocation-free, never mutating.
/// - **Keys never assigned**: `bucket` returns candidate 0 (the one-choice
///   bucket) and remembers nothing.
/// - **Dense store** ([`DChoice::dense`]): ids `0..n_keys`, `ceil(log2(d+1))`
///   bits per key (2 bits for d = 2 or 3, 3 bits for d = 4: one state more
///   than `log2 d` marks "not yet assigned"). A key `≥ n_keys` cannot be
///   remembered: `bucket` gives candidate 0, [`DChoice::try_assign`] returns
///   [`HashError::KeyOutOfRange`], and [`Bucketer::assign`] returns candidate
///   0 without remembering or loading it (counted by [`DChoice::unremembered`]).
/// - **Sparse store** ([`DChoice::sparse`]): any u64 id, a `hashbrown` map
///   `u64 → u8` (17 bytes per slot: ≈ 19–39 bytes per key, as the table is
///   filled to between 7/16 and 7/8 of its power-of-two size).
/// - **Loads**: one `u64` per bucket, see [`Weighting`].
///
/// ```
/// use balanced_hash::{Bucketer, DChoice};
/// let mut h = DChoice::dense(1_000, 10, 2, 42)?;
/// let b = h.assign(7);          // chooses and remembers
/// assert_eq!(h.bucket(7), b);   // pure look-up afterwards
/// assert_eq!(h.loads().iter().sum::<u64>(), 1);
/// assert_eq!(h.try_assign(5_000), Err(balanced_hash::HashError::KeyOutOfRange { key: 5_000, n_keys: 1_000 }));
/// # Ok::<(), balanced_hash::HashError>(())
/// ```
#[derive(Debug, Clone)]
pub struct DChoice {
    buckets: u32,
    d: u8,
    seed: u64,
    weighting: Weighting,
    mixes: [SeededMix; 4],
    loads: Vec<u64>,
    store: Store,
    assigned: u64,
    unremembered: u64,
}

impl DChoice {
    fn with_store(buckets: u32, d: u8, seed: u64, store: Store) -> Result<Self, HashError> {
        let mut loads = Vec::new();
        loads
            .try_reserve_exact(buckets as usize)
            .map_err(|_| HashError::AllocationFailed)?;
        loads.resize(buckets as usize, 0);
        let mix = |j: u64| SeededMix::new(seed.wrapping_add(j.wrapping_mul(GOLDEN)));
        Ok(Self {
            buckets,
            d,
            seed,
            weighting: Weighting::Distinct,
            mixes: [mix(0), mix(1), mix(2), mix(3)],
            loads,
            store,
            assigned: 0,
            unremembered: 0,
        })
    }

    const fn check(buckets: u32, d: u8) -> Result<(), HashError> {
        if buckets == 0 {
            return Err(HashError::ZeroBuckets);
        }
        if d < 2 || d > 4 {
            return Err(HashError::InvalidChoices { d });
        }
        Ok(())
    }

    /// A d-choice bucketer for dense ids `0..n_keys`, remembering choices in a
    /// bit vector of `ceil(log2(d+1))` bits per key (allocated up front).
    ///
    /// # Errors
    /// [`HashError::ZeroBuckets`] if `buckets == 0`, [`HashError::InvalidChoices`]
    /// if `d ∉ 2..=4`, [`HashError::AllocationFailed`] if the tables do not fit.
    pub fn dense(n_keys: u64, buckets: u32, d: u8, seed: u64) -> Result<Self, HashError> {
        Self::check(buckets, d)?;
        let bits = dense_bits(d);
        let total_bits = usize::try_from(n_keys)
            .ok()
            .and_then(|n| n.checked_mul(bits))
            .ok_or(HashError::AllocationFailed)?;
        let words = total_bits.div_ceil(64);
        let mut codes: Vec<u64> = Vec::new();
        codes
            .try_reserve_exact(words)
            .map_err(|_| HashError::AllocationFailed)?;
        codes.resize(words, 0);
        Self::with_store(
            buckets,
            d,
            seed,
            Store::Dense {
                n_keys,
                bits,
                codes,
            },
        )
    }

    /// A d-choice bucketer for arbitrary u64 ids, remembering choices in a
    /// `hashbrown` map that grows as keys are assigned.
    ///
    /// # Errors
    /// [`HashError::ZeroBuckets`] if `buckets == 0`, [`HashError::InvalidChoices`]
    /// if `d ∉ 2..=4`, [`HashError::AllocationFailed`] if the load table does not fit.
    pub fn sparse(buckets: u32, d: u8, seed: u64) -> Result<Self, HashError> {
        Self::check(buckets, d)?;
        Self::with_store(buckets, d, seed, Store::Sparse(ChoiceMap::default()))
    }

    /// Sets what loads count (default [`Weighting::Distinct`]). Set it before
    /// assigning keys: existing loads are kept as they are.
    #[must_use]
    pub fn with_weighting(mut self, weighting: Weighting) -> Self {
        self.weighting = weighting;
        self
    }

    /// What loads count.
    #[must_use]
    pub const fn weighting(&self) -> Weighting {
        self.weighting
    }

    /// The number of choices `d` (2..=4).
    #[must_use]
    pub const fn d(&self) -> u8 {
        self.d
    }

    /// The seed this bucketer was built with.
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// The dense id range `0..n_keys`, or `None` for a sparse bucketer.
    #[must_use]
    pub const fn dense_keys(&self) -> Option<u64> {
        match self.store {
            Store::Dense { n_keys, .. } => Some(n_keys),
            Store::Sparse(_) => None,
        }
    }

    /// Current bucket loads (length `B`), as defined by [`Weighting`].
    #[must_use]
    pub fn loads(&self) -> &[u64] {
        &self.loads
    }

    /// Number of distinct keys whose choice is remembered.
    #[must_use]
    pub const fn assigned_keys(&self) -> u64 {
        self.assigned
    }

    /// Number of `assign` calls that could not remember their key (dense key
    /// out of range, or the sparse map could not grow); they returned
    /// candidate 0 and did not change the loads.
    #[must_use]
    pub const fn unremembered(&self) -> u64 {
        self.unremembered
    }

    /// Candidate bucket `j` of `key` (`None` if `j ≥ d`).
    #[must_use]
    pub fn candidate(&self, key: u64, j: u8) -> Option<u32> {
        (j < self.d).then(|| self.candidate_bucket(key, j))
    }

    #[inline]
    fn candidate_bucket(&self, key: u64, j: u8) -> u32 {
        reduce(self.mixes[usize::from(j & 3)].hash(key), self.buckets)
    }

    /// The remembered choice (candidate index) of `key`, `None` if never assigned.
    #[inline]
    #[must_use]
    pub fn choice(&self, key: u64) -> Option<u8> {
        match &self.store {
            Store::Dense {
                n_keys,
                bits,
                codes,
            } => {
                if key >= *n_keys {
                    return None;
                }
                // key < n_keys and n_keys · bits fit in usize (checked in `dense`).
                let start = key as usize * bits;
                read_code(codes, start, *bits).checked_sub(1)
            }
            Store::Sparse(map) => map.get(&key).copied(),
        }
    }

    /// Least-loaded candidate of `key` (ties → lowest index): `(choice, bucket)`.
    #[inline]
    fn least_loaded(&self, key: u64) -> (u8, u32) {
        let mut best = (0, self.candidate_bucket(key, 0));
        let mut best_load = self.loads[best.1 as usize];
        for j in 1..self.d {
            let b = self.candidate_bucket(key, j);
            let load = self.loads[b as usize];
            if load < best_load {
                best = (j, b);
                best_load = load;
            }
        }
        best
    }

    #[inline]
    fn add_load(&mut self, bucket: u32, weight: u64) {
        let slot = &mut self.loads[bucket as usize];
        *slot = slot.saturating_add(weight);
    }

    /// [`DChoice::try_assign_weighted`] with weight 1.
    ///
    /// # Errors
    /// As [`DChoice::try_assign_weighted`].
    #[inline]
    pub fn try_assign(&mut self, key: u64) -> Result<u32, HashError> {
        self.try_assign_weighted(key, 1)
    }

    /// The bucket of `key`; on first sight, chooses the least-loaded candidate
    /// and remembers it. The load of the returned bucket grows by `weight` on
    /// first sight ([`Weighting::Distinct`]) or on every call
    /// ([`Weighting::Frequency`]).
    ///
    /// # Errors
    /// [`HashError::KeyOutOfRange`] for a dense bucketer and `key ≥ n_keys`;
    /// [`HashError::AllocationFailed`] if the sparse map cannot grow. Nothing
    /// changes on error.
    pub fn try_assign_weighted(&mut self, key: u64, weight: u64) -> Result<u32, HashError> {
        let frequency = self.weighting == Weighting::Frequency;
        let (bucket, first) = match &self.store {
            Store::Dense { n_keys, bits, .. } => {
                let (n_keys, bits) = (*n_keys, *bits);
                if key >= n_keys {
                    return Err(HashError::KeyOutOfRange { key, n_keys });
                }
                if let Some(c) = self.choice(key) {
                    (self.candidate_bucket(key, c), false)
                } else {
                    let (c, b) = self.least_loaded(key);
                    if let Store::Dense { codes, .. } = &mut self.store {
                        write_code(codes, key as usize * bits, bits, c + 1);
                    }
                    (b, true)
                }
            }
            Store::Sparse(map) => {
                if let Some(&c) = map.get(&key) {
                    (self.candidate_bucket(key, c), false)
                } else {
                    let (c, b) = self.least_loaded(key);
                    if let Store::Sparse(map) = &mut self.store {
                        map.try_reserve(1)
                            .map_err(|_| HashError::AllocationFailed)?;
                        map.insert(key, c);
                    }
                    (b, true)
                }
            }
        };
        if first {
            self.assigned += 1;
        }
        if first || frequency {
            self.add_load(bucket, weight);
        }
        Ok(bucket)
    }

    /// Like [`DChoice::try_assign_weighted`], but a key that cannot be
    /// remembered gets candidate 0 (its [`Bucketer::bucket`] fallback), leaves
    /// the loads unchanged and is counted by [`DChoice::unremembered`].
    pub fn assign_weighted(&mut self, key: u64, weight: u64) -> u32 {
        match self.try_assign_weighted(key, weight) {
            Ok(bucket) => bucket,
            Err(_) => {
                self.unremembered += 1;
                self.candidate_bucket(key, 0)
            }
        }
    }

    /// Remembers `choice` for `key` (e.g. when loading a checkpoint written
    /// from [`DChoice::choice`]), adding `weight` to that bucket's load. A key
    /// already assigned is moved: its old bucket loses `weight` (saturating).
    ///
    /// # Errors
    /// [`HashError::InvalidChoice`] if `choice ≥ d`, [`HashError::KeyOutOfRange`]
    /// for a dense key `≥ n_keys`, [`HashError::AllocationFailed`] if the sparse
    /// map cannot grow. Nothing changes on error.
    pub fn restore(&mut self, key: u64, choice: u8, weight: u64) -> Result<u32, HashError> {
        if choice >= self.d {
            return Err(HashError::InvalidChoice { choice, d: self.d });
        }
        let old = match &mut self.store {
            Store::Dense {
                n_keys,
                bits,
                codes,
            } => {
                if key >= *n_keys {
                    return Err(HashError::KeyOutOfRange {
                        key,
                        n_keys: *n_keys,
                    });
                }
                let start = key as usize * *bits;
                let old = read_code(codes, start, *bits);
                write_code(codes, start, *bits, choice + 1);
                old.checked_sub(1)
            }
            Store::Sparse(map) => {
                map.try_reserve(1)
                    .map_err(|_| HashError::AllocationFailed)?;
                match map.entry(key) {
                    Entry::Occupied(mut e) => Some(e.insert(choice)),
                    Entry::Vacant(e) => {
                        e.insert(choice);
                        None
                    }
                }
            }
        };
        match old {
            Some(c) => {
                let b = self.candidate_bucket(key, c) as usize;
                self.loads[b] = self.loads[b].saturating_sub(weight);
            }
            None => self.assigned += 1,
        }
        let bucket = self.candidate_bucket(key, choice);
        self.add_load(bucket, weight);
        Ok(bucket)
    }

    /// Remembered `(key, choice)` pairs, in key order for a dense store and in
    /// map order for a sparse one — what a checkpoint needs to save.
    pub fn remembered(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        let dense = match &self.store {
            Store::Dense { n_keys, .. } => Some(*n_keys),
            Store::Sparse(_) => None,
        };
        let dense_iter = (0..dense.unwrap_or(0)).filter_map(|k| self.choice(k).map(|c| (k, c)));
        let sparse_iter = match &self.store {
            Store::Sparse(map) => Some(map.iter().map(|(&k, &c)| (k, c))),
            Store::Dense { .. } => None,
        };
        dense_iter.chain(sparse_iter.into_iter().flatten())
    }
}

impl Bucketer for DChoice {
    #[inline]
    fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The remembered bucket of `key`, or candidate 0 if it was never assigned.
    #[inline]
    fn bucket(&self, key: u64) -> u32 {
        self.candidate_bucket(key, self.choice(key).unwrap_or(0))
    }

    /// [`DChoice::assign_weighted`] with weight 1.
    #[inline]
    fn assign(&mut self, key: u64) -> u32 {
        self.assign_weighted(key, 1)
    }

    fn memory_bytes(&self) -> usize {
        let store = match &self.store {
            Store::Dense { codes, .. } => size_of_val(codes.as_slice()),
            Store::Sparse(map) => map.allocation_size(),
        };
        size_of::<Self>() + self.loads.capacity() * size_of::<u64>() + store
    }

    fn identity(&self) -> crate::BucketerIdentity {
        crate::BucketerIdentity {
            kind: crate::BucketerIdentity::KIND_D_CHOICE,
            choices: self.d,
            seed: self.seed,
        }
    }

    /// `true`: the remembered choices and the loads decide where keys land.
    fn has_state(&self) -> bool {
        true
    }

    /// The remembered choices, the loads and the counters, in a layout that is
    /// the same on every target (dense: the code words; sparse: pairs in key
    /// order).
    fn save_state(&self, out: &mut Vec<u8>) {
        self.save(out);
    }

    /// Restores what [`DChoice::save_state`](Bucketer::save_state) wrote, so
    /// that every later `assign` and `bucket` is the saving bucketer's.
    ///
    /// # Errors
    /// [`HashError::StateMismatch`] when another `d`, `B`, seed, weighting or
    /// key store saved it; [`HashError::MalformedState`] for damaged bytes.
    fn load_state(&mut self, bytes: &[u8]) -> Result<(), HashError> {
        self.load(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit `i` of the LSB-first word layout, one bit at a time: the obviously
    /// correct reference for the word-level reads and writes.
    fn bit(words: &[u64], i: usize) -> u8 {
        ((words[i / 64] >> (i % 64)) & 1) as u8
    }

    #[test]
    fn read_and_write_code_match_a_bit_by_bit_reference() {
        let words = [
            0x0123_4567_89ab_cdef_u64,
            0xfedc_ba98_7654_3210,
            0x5555_aaaa_3333_cccc,
        ];
        for bits in 1..=3 {
            for start in 0..=(192 - bits) {
                let expected = (0..bits).fold(0u8, |v, i| v | (bit(&words, start + i) << i));
                assert_eq!(
                    read_code(&words, start, bits),
                    expected,
                    "bits={bits} start={start}"
                );
                for code in 0..(1u8 << bits) {
                    let mut raw = words;
                    write_code(&mut raw, start, bits, code);
                    for i in 0..192 {
                        let want = if (start..start + bits).contains(&i) {
                            (code >> (i - start)) & 1
                        } else {
                            bit(&words, i)
                        };
                        assert_eq!(bit(&raw, i), want, "bits={bits} start={start} bit {i}");
                    }
                }
            }
        }
    }
}
