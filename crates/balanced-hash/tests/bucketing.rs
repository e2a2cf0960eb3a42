//! Bucketers against obviously-correct slow references, and their properties.
#![allow(clippy::unwrap_used, reason = "tests: a panic is a failing test")]

extern crate alloc;

use alloc::collections::BTreeMap;

use balanced_hash::murmur3::fmix64;
use balanced_hash::{
    Bucketer, DChoice, HashError, LoadStats, OneChoice, Weighting, count_loads, hash_u64, reduce,
};
use proptest::prelude::*;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// `hash_u64` exactly as documented.
fn reference_hash(key: u64, seed: u64) -> u64 {
    let m = fmix64(seed ^ 0x9e3779b97f4a7c15) | 1;
    let a = fmix64(seed.wrapping_add(0x6a09e667f3bcc909));
    fmix64(key.wrapping_mul(m) ^ a)
}

/// `floor(h · n / 2^64)` by long division on u128 (no shift trick).
fn reference_reduce(h: u64, n: u32) -> u32 {
    let product = u128::from(h) * u128::from(n);
    (product / (1u128 << 64)) as u32
}

/// d-choice as documented, with a `BTreeMap` of choices and naive loads.
struct RefDChoice {
    buckets: u32,
    d: u8,
    seed: u64,
    frequency: bool,
    choices: BTreeMap<u64, u8>,
    loads: Vec<u64>,
}

impl RefDChoice {
    fn new(buckets: u32, d: u8, seed: u64, frequency: bool) -> Self {
        Self {
            buckets,
            d,
            seed,
            frequency,
            choices: BTreeMap::new(),
            loads: vec![0; buckets as usize],
        }
    }
    fn candidate(&self, key: u64, j: u8) -> u32 {
        let seed_j = self.seed.wrapping_add(u64::from(j).wrapping_mul(GOLDEN));
        reference_reduce(reference_hash(key, seed_j), self.buckets)
    }
    fn bucket(&self, key: u64) -> u32 {
        self.candidate(key, self.choices.get(&key).copied().unwrap_or(0))
    }
    fn assign(&mut self, key: u64, weight: u64) -> u32 {
        if let Some(&c) = self.choices.get(&key) {
            let b = self.candidate(key, c);
            if self.frequency {
                self.loads[b as usize] += weight;
            }
            return b;
        }
        // Least loaded, ties to the lowest candidate index.
        let c = (0..self.d)
            .min_by_key(|&j| (self.loads[self.candidate(key, j) as usize], j))
            .unwrap();
        self.choices.insert(key, c);
        let b = self.candidate(key, c);
        self.loads[b as usize] += weight;
        b
    }
}

fn max_load(loads: &[u64]) -> u64 {
    loads.iter().copied().max().unwrap_or(0)
}

proptest! {
    #[test]
    fn hash_u64_and_reduce_match_their_definitions(key in any::<u64>(), seed in any::<u64>(), n in 1u32..) {
        let h = hash_u64(key, seed);
        prop_assert_eq!(h, reference_hash(key, seed));
        let r = reduce(h, n);
        prop_assert_eq!(r, reference_reduce(h, n));
        prop_assert!(r < n);
        // Lemire's bucket is the k with k·2^64 ≤ h·n < (k+1)·2^64.
        let product = u128::from(h) * u128::from(n);
        prop_assert!(u128::from(r) << 64 <= product && product < (u128::from(r) + 1) << 64);
    }

    #[test]
    fn one_choice_is_reduce_of_hash_and_in_range(buckets in 1u32.., seed in any::<u64>(), keys in proptest::collection::vec(any::<u64>(), 1..64)) {
        let h = OneChoice::new(buckets, seed).unwrap();
        for k in keys {
            let b = h.bucket(k);
            prop_assert!(b < buckets);
            prop_assert_eq!(b, reference_reduce(reference_hash(k, seed), buckets));
        }
    }

    /// Dense and sparse stores both match the reference, call by call, in both
    /// weighting modes, on key streams with repeats.
    #[test]
    fn d_choice_matches_reference(
        buckets in 1u32..40,
        d in 2u8..=4,
        seed in any::<u64>(),
        frequency in any::<bool>(),
        calls in proptest::collection::vec((0u64..60, 1u64..5), 0..300),
    ) {
        let weighting = if frequency { Weighting::Frequency } else { Weighting::Distinct };
        let mut reference = RefDChoice::new(buckets, d, seed, frequency);
        let mut dense = DChoice::dense(60, buckets, d, seed).unwrap().with_weighting(weighting);
        let mut sparse = DChoice::sparse(buckets, d, seed).unwrap().with_weighting(weighting);
        for &(key, weight) in &calls {
            let expected = reference.assign(key, weight);
            prop_assert_eq!(dense.assign_weighted(key, weight), expected);
            prop_assert_eq!(sparse.try_assign_weighted(key, weight), Ok(expected));
        }
        prop_assert_eq!(dense.loads(), &reference.loads[..]);
        prop_assert_eq!(sparse.loads(), &reference.loads[..]);
        for key in 0..80 {
            let expected = reference.bucket(key);
            prop_assert!(expected < buckets);
            prop_assert_eq!(dense.bucket(key), expected);
            prop_assert_eq!(sparse.bucket(key), expected);
            prop_assert_eq!(dense.choice(key), reference.choices.get(&key).copied());
            prop_assert_eq!(sparse.choice(key), reference.choices.get(&key).copied());
        }
        let distinct = reference.choices.len() as u64;
        prop_assert_eq!(dense.assigned_keys(), distinct);
        prop_assert_eq!(sparse.assigned_keys(), distinct);
        // Loads sum to the weights they are defined to count.
        let total: u64 = if frequency {
            calls.iter().map(|c| c.1).sum()
        } else {
            let mut first = BTreeMap::new();
            for &(k, w) in &calls { first.entry(k).or_insert(w); }
            first.values().sum()
        };
        prop_assert_eq!(dense.loads().iter().sum::<u64>(), total);
    }

    /// Same seed → same buckets; a different seed → a different map.
    #[test]
    fn deterministic_per_seed(buckets in 2u32..1000, d in 2u8..=4, seed in any::<u64>(), start in any::<u64>()) {
        let keys: Vec<u64> = (0..64).map(|i| start.wrapping_add(i)).collect();
        let (mut a, mut b) = (DChoice::sparse(buckets, d, seed).unwrap(), DChoice::sparse(buckets, d, seed).unwrap());
        let (one_a, one_b) = (OneChoice::new(buckets, seed).unwrap(), OneChoice::new(buckets, seed).unwrap());
        let other = OneChoice::new(buckets, seed ^ 1).unwrap();
        let mut differs = false;
        for &k in &keys {
            prop_assert_eq!(a.assign(k), b.assign(k));
            prop_assert_eq!(one_a.bucket(k), one_b.bucket(k));
            differs |= one_a.bucket(k) != other.bucket(k);
        }
        prop_assert_eq!(a.loads(), b.loads());
        // 64 keys all agreeing under two seeds has probability ≤ 2^-64.
        prop_assert!(differs);
    }

    /// Every key is counted exactly once, and every bucket is in range.
    #[test]
    fn counts_sum_to_n(buckets in 1u32..500, d in 2u8..=4, seed in any::<u64>(), n in 0u64..5000) {
        let mut one = OneChoice::new(buckets, seed).unwrap();
        let mut two = DChoice::dense(n, buckets, d, seed).unwrap();
        let l1 = count_loads(&mut one, 0..n).unwrap();
        let l2 = count_loads(&mut two, 0..n).unwrap();
        prop_assert_eq!(l1.len(), buckets as usize);
        prop_assert_eq!(l1.iter().sum::<u64>(), n);
        prop_assert_eq!(l2.iter().sum::<u64>(), n);
        prop_assert_eq!(two.loads(), &l2[..]);
        prop_assert_eq!(two.assigned_keys(), n);
        let s = LoadStats::from_loads(&l2).unwrap();
        prop_assert_eq!(s.total, n);
        prop_assert_eq!(s.histogram.iter().sum::<u64>(), u64::from(buckets));
    }

    /// d-choice never has a fuller bucket than one-choice with the same seed.
    ///
    /// Not a per-instance theorem: tiny tables can lose by one (e.g. N = 5,
    /// B = 3 in ~1 % of seeds). For B ≥ 64 and N ≥ B/2 it held in all 20 000
    /// random trials we ran, and for B < 64 the loss never exceeded one.
    #[test]
    fn d_choice_never_worse_than_one_choice(
        buckets in 64u32..512, alpha_x2 in 1u64..40, d in 2u8..=4, seed in any::<u64>(), start in any::<u64>(),
    ) {
        let n = u64::from(buckets) * alpha_x2 / 2;
        let keys = || (0..n).map(|i| start.wrapping_add(i));
        let one = count_loads(&mut OneChoice::new(buckets, seed).unwrap(), keys()).unwrap();
        let many = count_loads(&mut DChoice::sparse(buckets, d, seed).unwrap(), keys()).unwrap();
        prop_assert!(max_load(&many) <= max_load(&one), "d={} max {} > {}", d, max_load(&many), max_load(&one));
    }

    /// A remembered choice never changes, however many keys come after it.
    #[test]
    fn remembered_choice_is_stable(buckets in 1u32..100, d in 2u8..=4, seed in any::<u64>(), probe in 0u64..1000, later in proptest::collection::vec(0u64..1000, 0..500)) {
        for mut h in [DChoice::dense(1000, buckets, d, seed).unwrap(), DChoice::sparse(buckets, d, seed).unwrap()] {
            let b = h.assign(probe);
            let c = h.choice(probe);
            for &k in &later {
                h.assign(k);
                prop_assert_eq!(h.bucket(probe), b);
            }
            prop_assert_eq!(h.assign(probe), b);
            prop_assert_eq!(h.choice(probe), c);
        }
    }

    /// Saving `remembered()` and `restore`-ing it rebuilds the same map and loads.
    #[test]
    fn restore_round_trips(buckets in 1u32..50, d in 2u8..=4, seed in any::<u64>(), keys in proptest::collection::vec(0u64..200, 0..300)) {
        for dense in [true, false] {
            let make = || if dense { DChoice::dense(200, buckets, d, seed) } else { DChoice::sparse(buckets, d, seed) };
            let mut original = make().unwrap();
            for &k in &keys { original.assign(k); }
            let mut restored = make().unwrap();
            for (k, c) in original.remembered() {
                prop_assert_eq!(restored.restore(k, c, 1), Ok(original.bucket(k)));
            }
            prop_assert_eq!(restored.loads(), original.loads());
            prop_assert_eq!(restored.assigned_keys(), original.assigned_keys());
            for k in 0..200 { prop_assert_eq!(restored.bucket(k), original.bucket(k)); }
        }
    }
}

/// Small tables (B < 64): d-choice's fullest bucket is no fuller than
/// one-choice's *on average* over seeds. Per seed it can be: with B = 2 the
/// two choices coincide half the time, and one seed in a few hundred gives
/// d-choice a bucket two keys fuller (found by proptest: B = 2, N = 71,
/// d = 2), so an earlier per-seed bound of "+1" failed at random in CI. The
/// seeds here are fixed, so the test is deterministic; it fails if d-choice
/// stops choosing the emptier bucket: where there is a choice (B ≥ 2,
/// N ≥ 5) it must be strictly better on average (checked: always taking the
/// first candidate, which is one-choice's bucket, fails it).
#[test]
fn d_choice_small_tables_are_no_fuller_on_average() {
    for buckets in [1u32, 2, 3, 5, 8, 13, 31, 63] {
        for n in [0u64, 1, 5, 17, 71, 150, 299] {
            for d in 2u8..=4 {
                let (mut one_sum, mut many_sum) = (0u64, 0u64);
                for seed in 0..128u64 {
                    let seed = fmix64(seed);
                    let one =
                        count_loads(&mut OneChoice::new(buckets, seed).unwrap(), 0..n).unwrap();
                    let many =
                        count_loads(&mut DChoice::sparse(buckets, d, seed).unwrap(), 0..n).unwrap();
                    one_sum += max_load(&one);
                    many_sum += max_load(&many);
                }
                assert!(
                    many_sum <= one_sum,
                    "B {buckets}, N {n}, d {d}: d-choice max loads sum to {many_sum} > {one_sum}"
                );
                // With a choice to make, the choice must help.
                if buckets >= 2 && n >= 5 {
                    assert!(
                        many_sum < one_sum,
                        "B {buckets}, N {n}, d {d}: d-choice no better ({many_sum} vs {one_sum})"
                    );
                }
            }
        }
    }
}

#[test]
fn unseen_keys_fall_back_to_the_one_choice_bucket() {
    let one = OneChoice::new(97, 5).unwrap();
    let dense = DChoice::dense(100, 97, 3, 5).unwrap();
    let sparse = DChoice::sparse(97, 4, 5).unwrap();
    for key in [0, 1, 99, 100, 1 << 40, u64::MAX] {
        assert_eq!(dense.bucket(key), one.bucket(key));
        assert_eq!(sparse.bucket(key), one.bucket(key));
        assert_eq!(dense.candidate(key, 0), Some(one.bucket(key)));
        assert_eq!(dense.choice(key), None);
    }
    assert_eq!(dense.candidate(1, 3), None);
}

#[test]
fn dense_key_out_of_range() {
    let mut h = DChoice::dense(10, 8, 2, 1).unwrap();
    let fallback = h.bucket(10);
    assert_eq!(
        h.try_assign(10),
        Err(HashError::KeyOutOfRange {
            key: 10,
            n_keys: 10
        })
    );
    assert_eq!(h.assign(10), fallback);
    assert_eq!(h.unremembered(), 1);
    assert_eq!(h.assigned_keys(), 0);
    assert_eq!(h.loads().iter().sum::<u64>(), 0);
    assert_eq!(
        h.restore(10, 0, 1),
        Err(HashError::KeyOutOfRange {
            key: 10,
            n_keys: 10
        })
    );
    assert_eq!(h.dense_keys(), Some(10));
}

#[test]
fn constructor_errors() {
    assert_eq!(OneChoice::new(0, 1), Err(HashError::ZeroBuckets));
    assert_eq!(
        DChoice::sparse(0, 2, 1).unwrap_err(),
        HashError::ZeroBuckets
    );
    assert_eq!(
        DChoice::dense(5, 0, 2, 1).unwrap_err(),
        HashError::ZeroBuckets
    );
    for d in [0, 1, 5, 255] {
        assert_eq!(
            DChoice::sparse(4, d, 1).unwrap_err(),
            HashError::InvalidChoices { d }
        );
        assert_eq!(
            DChoice::dense(4, 4, d, 1).unwrap_err(),
            HashError::InvalidChoices { d }
        );
    }
    // A dense table that cannot exist is an error, not a panic or an abort.
    assert_eq!(
        DChoice::dense(u64::MAX, 4, 2, 1).unwrap_err(),
        HashError::AllocationFailed
    );
    let mut h = DChoice::sparse(4, 3, 1).unwrap();
    assert_eq!(
        h.restore(1, 3, 1),
        Err(HashError::InvalidChoice { choice: 3, d: 3 })
    );
    assert_eq!(h.assigned_keys(), 0);
}

#[test]
fn restore_moves_an_assigned_key() {
    let mut h = DChoice::dense(4, 1000, 2, 9).unwrap();
    h.assign(3);
    let c = h.choice(3).unwrap();
    let other = 1 - c;
    let b = h.restore(3, other, 1).unwrap();
    assert_eq!(Some(b), h.candidate(3, other));
    assert_eq!(h.bucket(3), b);
    assert_eq!(h.loads().iter().sum::<u64>(), 1);
    assert_eq!(h.loads()[b as usize], 1);
    assert_eq!(h.assigned_keys(), 1);
}

#[test]
fn memory_accounting() {
    let buckets = 1000;
    for (d, bits) in [(2u8, 2usize), (3, 2), (4, 3)] {
        let h = DChoice::dense(1_000_000, buckets, d, 0).unwrap();
        let floor = 1_000_000 * bits / 8 + buckets as usize * 8;
        assert!(h.memory_bytes() >= floor, "d={d}");
        assert!(
            h.memory_bytes() <= floor + 256,
            "d={d}: {}",
            h.memory_bytes()
        );
    }
    let mut sparse = DChoice::sparse(buckets, 2, 0).unwrap();
    let empty = sparse.memory_bytes();
    for k in 0..10_000 {
        sparse.assign(k * 7919);
    }
    // hashbrown: 16-byte (u64, u8) slots + 1 control byte, load ≤ 7/8.
    let grown = sparse.memory_bytes() - empty;
    assert!(
        (10_000 * 17..=10_000 * 17 * 2 + 64).contains(&grown),
        "{grown}"
    );
    assert_eq!(OneChoice::new(buckets, 0).unwrap().memory_bytes(), 0);
}

#[test]
fn frequency_weighting_steers_new_keys_away_from_hot_buckets() {
    // A hot key seen many times loads its bucket under Frequency weighting, so
    // a new key whose candidates include that bucket avoids it.
    let mut h = DChoice::sparse(16, 2, 3)
        .unwrap()
        .with_weighting(Weighting::Frequency);
    assert_eq!(h.weighting(), Weighting::Frequency);
    let hot = h.assign_weighted(0, 1);
    for _ in 0..100 {
        assert_eq!(h.assign(0), hot);
    }
    assert_eq!(h.loads()[hot as usize], 101);
    let newcomer = (1..)
        .find(|&k| h.candidate(k, 0) == Some(hot) && h.candidate(k, 1) != Some(hot))
        .unwrap();
    assert_ne!(h.assign(newcomer), hot);
    // Under Distinct weighting repeated calls do not add load.
    let mut d = DChoice::sparse(16, 2, 3).unwrap();
    for _ in 0..100 {
        d.assign(0);
    }
    assert_eq!(d.loads().iter().sum::<u64>(), 1);
}
