//! Keyed steps: the row a step hashes (its key, e.g. a global id) apart
//! from the row it stores (its slot in a caller-owned table). A table that
//! owns the `id → slot` map numbers its rows in arrival order; an optimizer
//! that hashed slot numbers would change its bucket assignment (hence the
//! model) with that order. [`slot_keys`] checks a batch's keys and slots
//! and gives the key of each distinct slot.

use alloc::vec::Vec;

use crate::error::StepError;

/// `(slot, key)` of every distinct slot of the batch, ascending by slot,
/// after checking that `keys` and `slots` pair one-to-one (a slot repeated
/// in the batch must repeat its key, and two slots must not share a key).
///
/// # Errors
/// [`StepError::KeyLength`] for slices of different lengths,
/// [`StepError::KeyConflict`] naming the first (lowest) conflicting slot,
/// or, for a key given to two slots, the lowest such key.
pub(crate) fn slot_keys(keys: &[u64], slots: &[u64]) -> Result<Vec<(u64, u64)>, StepError> {
    if keys.len() != slots.len() {
        return Err(StepError::KeyLength {
            keys: keys.len(),
            slots: slots.len(),
        });
    }
    let mut pairs: Vec<(u64, u64)> = slots.iter().copied().zip(keys.iter().copied()).collect();
    pairs.sort_unstable();
    pairs.dedup();
    // Sorted by (slot, key): one slot with two keys sits side by side.
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(StepError::KeyConflict {
            key: w[1].1,
            slot: w[0].0,
        });
    }
    let mut by_key: Vec<(u64, u64)> = pairs.iter().map(|&(s, k)| (k, s)).collect();
    by_key.sort_unstable();
    if let Some(w) = by_key.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(StepError::KeyConflict {
            key: w[0].0,
            slot: w[1].1,
        });
    }
    Ok(pairs)
}

/// The key of `slot` in [`slot_keys`]' output (the slot itself if absent,
/// which the callers rule out: they look up slots of the same batch).
pub(crate) fn key_of(pairs: &[(u64, u64)], slot: u64) -> u64 {
    pairs
        .binary_search_by_key(&slot, |p| p.0)
        .map_or(slot, |i| pairs[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_checked_both_ways() {
        assert_eq!(
            slot_keys(&[10, 20, 10], &[1, 0, 1]),
            Ok(alloc::vec![(0, 20), (1, 10)])
        );
        assert_eq!(
            slot_keys(&[1], &[1, 2]),
            Err(StepError::KeyLength { keys: 1, slots: 2 })
        );
        assert_eq!(
            slot_keys(&[10, 11], &[3, 3]),
            Err(StepError::KeyConflict { key: 11, slot: 3 })
        );
        assert_eq!(
            slot_keys(&[10, 10], &[3, 4]),
            Err(StepError::KeyConflict { key: 10, slot: 4 })
        );
        let pairs = slot_keys(&[7, 9], &[5, 2]).unwrap();
        assert_eq!((key_of(&pairs, 5), key_of(&pairs, 2)), (7, 9));
    }
}
