//! `Bucketer::save_state` / `load_state` of `DChoice`: the layout as
//! documented (rebuilt here from the public accessors), save → load →
//! continue identical to never stopping, and every bad input a typed error
//! that changes nothing.
#![allow(clippy::unwrap_used, reason = "tests: a panic is a failing test")]

use balanced_hash::{Bucketer, DChoice, HashError, OneChoice, SavedSetting, Weighting};
use proptest::prelude::*;

const KEYS: u64 = 200;

fn make(dense: bool, buckets: u32, d: u8, seed: u64, weighting: Weighting) -> DChoice {
    let h = if dense {
        DChoice::dense(KEYS, buckets, d, seed)
    } else {
        DChoice::sparse(buckets, d, seed)
    };
    h.unwrap().with_weighting(weighting)
}

/// Bits per dense key, as documented: `ceil(log2(d + 1))`.
fn bits(d: u8) -> usize {
    if d <= 3 { 2 } else { 3 }
}

/// The documented layout, written from `remembered()`, `loads()` and the
/// counters, one bit at a time for the dense codes.
fn reference_layout(h: &DChoice) -> Vec<u8> {
    let mut out = vec![1, h.d()];
    out.extend(h.buckets().to_le_bytes());
    out.extend(h.seed().to_le_bytes());
    out.push(u8::from(h.weighting() == Weighting::Frequency));
    match h.dense_keys() {
        Some(n) => {
            out.push(0);
            out.extend(n.to_le_bytes());
        }
        None => out.push(1),
    }
    out.extend(h.assigned_keys().to_le_bytes());
    out.extend(h.unremembered().to_le_bytes());
    h.loads().iter().for_each(|l| out.extend(l.to_le_bytes()));
    match h.dense_keys() {
        Some(n) => {
            let b = bits(h.d());
            let total = n as usize * b;
            let mut words = vec![0u64; total.div_ceil(64)];
            for (key, choice) in h.remembered() {
                let code = u64::from(choice) + 1;
                for i in 0..b {
                    let at = key as usize * b + i;
                    words[at / 64] |= ((code >> i) & 1) << (at % 64);
                }
            }
            words.iter().for_each(|w| out.extend(w.to_le_bytes()));
        }
        None => {
            let mut pairs: Vec<(u64, u8)> = h.remembered().collect();
            pairs.sort_unstable();
            for (k, c) in pairs {
                out.extend(k.to_le_bytes());
                out.push(c);
            }
        }
    }
    out
}

fn saved(h: &DChoice) -> Vec<u8> {
    let mut out = Vec::new();
    h.save_state(&mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The bytes are the documented layout; loading them into a fresh
    /// bucketer built alike, then assigning more keys (some new, some seen),
    /// matches the original bucketer doing the same, key by key.
    #[test]
    fn save_load_continue_is_identical(
        dense in any::<bool>(),
        frequency in any::<bool>(),
        buckets in 1u32..40,
        d in 2u8..=4,
        seed in any::<u64>(),
        before in proptest::collection::vec((0u64..KEYS + 10, 1u64..4), 0..200),
        after in proptest::collection::vec((0u64..KEYS + 10, 1u64..4), 0..200),
    ) {
        let weighting = if frequency { Weighting::Frequency } else { Weighting::Distinct };
        let mut original = make(dense, buckets, d, seed, weighting);
        // Keys past the dense range are counted by `unremembered`.
        for &(k, w) in &before { original.assign_weighted(k, w); }
        let bytes = saved(&original);
        prop_assert_eq!(&bytes, &reference_layout(&original));
        let mut loaded = make(dense, buckets, d, seed, weighting);
        loaded.assign(3); // state of its own, replaced by the load
        prop_assert_eq!(loaded.load_state(&bytes), Ok(()));
        prop_assert_eq!(saved(&loaded), bytes);
        for &(k, w) in &after {
            prop_assert_eq!(loaded.assign_weighted(k, w), original.assign_weighted(k, w));
        }
        prop_assert_eq!(loaded.loads(), original.loads());
        prop_assert_eq!(saved(&loaded), saved(&original));
        for k in 0..KEYS + 10 { prop_assert_eq!(loaded.bucket(k), original.bucket(k)); }
    }
}

/// A bucketer with some of everything: assigned keys, a rejected key, loads.
fn busy(dense: bool, d: u8) -> DChoice {
    let mut h = make(dense, 7, d, 5, Weighting::Distinct);
    for k in [0, 3, 9, 150, 199, 7_000] {
        h.assign_weighted(k, 2);
    }
    h
}

#[test]
fn another_setup_is_a_state_mismatch_naming_the_setting() {
    let mismatch = |setting| Err(HashError::StateMismatch { setting });
    for dense in [true, false] {
        let bytes = saved(&busy(dense, 2));
        let cases = [
            (
                make(dense, 7, 3, 5, Weighting::Distinct),
                SavedSetting::Choices,
            ),
            (
                make(dense, 8, 2, 5, Weighting::Distinct),
                SavedSetting::Buckets,
            ),
            (
                make(dense, 7, 2, 6, Weighting::Distinct),
                SavedSetting::Seed,
            ),
            (
                make(dense, 7, 2, 5, Weighting::Frequency),
                SavedSetting::Weighting,
            ),
            (
                make(!dense, 7, 2, 5, Weighting::Distinct),
                SavedSetting::KeyStore,
            ),
        ];
        for (mut h, setting) in cases {
            let before = saved(&h);
            assert_eq!(h.load_state(&bytes), mismatch(setting), "{setting}");
            assert_eq!(saved(&h), before);
        }
        if dense {
            let mut other_range = DChoice::dense(KEYS + 1, 7, 2, 5).unwrap();
            assert_eq!(
                other_range.load_state(&bytes),
                mismatch(SavedSetting::KeyStore)
            );
        }
        let mut future = bytes.clone();
        future[0] = 2;
        assert_eq!(
            busy(dense, 2).load_state(&future),
            mismatch(SavedSetting::Format)
        );
    }
}

#[test]
fn damaged_state_is_malformed_and_changes_nothing() {
    for dense in [true, false] {
        for d in 2..=4 {
            let bytes = saved(&busy(dense, d));
            let mut h = make(dense, 7, d, 5, Weighting::Distinct);
            h.assign(42);
            let before = saved(&h);
            for len in 0..bytes.len() {
                assert!(h.load_state(&bytes[..len]).is_err(), "truncated to {len}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(h.load_state(&longer), Err(HashError::MalformedState));
            assert_eq!(saved(&h), before);
        }
    }
    // The header is 1 + 1 + 4 + 8 + 1 + 1 (+ 8 dense) + 8 + 8, then 7 loads.
    let choices_at = |dense: bool| 32 + if dense { 8 } else { 0 } + 7 * 8;
    // Dense, d = 2: key 0's code set to 3 (> d), then a set padding bit.
    let bytes = saved(&busy(true, 2));
    let mut bad = bytes.clone();
    bad[choices_at(true)] |= 0b11;
    let mut h = make(true, 7, 2, 5, Weighting::Distinct);
    assert_eq!(h.load_state(&bad), Err(HashError::MalformedState));
    let mut bad = bytes.clone();
    let last = bad.len() - 1; // 200 keys · 2 bits = 400 bits: bits 400..448 are padding
    bad[last] |= 0x80;
    assert_eq!(h.load_state(&bad), Err(HashError::MalformedState));
    // Dense: an assigned count that disagrees with the codes.
    let mut bad = bytes.clone();
    bad[24] ^= 1; // low byte of `assigned` (after the 8-byte n_keys)
    assert_eq!(h.load_state(&bad), Err(HashError::MalformedState));
    // Sparse: a choice ≥ d, then keys out of order.
    let bytes = saved(&busy(false, 2));
    let at = choices_at(false);
    let mut h = make(false, 7, 2, 5, Weighting::Distinct);
    let mut bad = bytes.clone();
    bad[at + 8] = 2;
    assert_eq!(h.load_state(&bad), Err(HashError::MalformedState));
    let mut bad = bytes.clone();
    bad[at..at + 9].copy_from_slice(&bytes[at + 9..at + 18]);
    assert_eq!(h.load_state(&bad), Err(HashError::MalformedState));
    assert_eq!(h.load_state(&bytes), Ok(()));
}

#[test]
fn stateless_bucketers_save_nothing_and_accept_only_nothing() {
    let mut one = OneChoice::new(7, 5).unwrap();
    assert!(!one.has_state());
    assert!(DChoice::sparse(7, 2, 5).unwrap().has_state());
    let mut out = Vec::new();
    one.save_state(&mut out);
    assert!(out.is_empty());
    assert_eq!(one.load_state(&[]), Ok(()));
    assert_eq!(one.load_state(&[1]), Err(HashError::MalformedState));
}
