//! A [`DChoice`]'s own state (remembered choices, loads, counters) as bytes,
//! for optimizer checkpoints ([`Bucketer::save_state`](crate::Bucketer::save_state)).
//!
//! Layout, little-endian: format `u8` (= 1), `d` `u8`, buckets `u32`, seed
//! `u64`, weighting `u8` (0 distinct, 1 frequency), store `u8` (0 dense,
//! 1 sparse), `n_keys` `u64` (dense only), assigned `u64`, unremembered
//! `u64`, the loads (`buckets` × `u64`), then the choices: dense, the code
//! words (`ceil(n_keys · bits / 64)` × `u64`, laid out as in `Store::Dense`);
//! sparse, `assigned` pairs `(key u64, choice u8)` in ascending key order.
//! Nothing depends on pointer width or hash-map order: the bytes are the
//! same on every target.

use alloc::vec::Vec;

use super::{ChoiceMap, DChoice, Store, read_code};
use crate::{HashError, SavedSetting, Weighting};

/// Format tag of the layout above.
const FORMAT: u8 = 1;

const fn weighting_tag(w: Weighting) -> u8 {
    match w {
        Weighting::Distinct => 0,
        Weighting::Frequency => 1,
    }
}

/// Reads the layout; every shortfall is [`HashError::MalformedState`].
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HashError> {
        if self.0.len() < n {
            return Err(HashError::MalformedState);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, HashError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, HashError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, HashError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// `n` `u64` values, checking the length before allocating.
    fn u64s(&mut self, n: usize) -> Result<Vec<u64>, HashError> {
        if n.checked_mul(8).is_none_or(|b| b > self.0.len()) {
            return Err(HashError::MalformedState);
        }
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| HashError::AllocationFailed)?;
        for _ in 0..n {
            out.push(self.u64()?);
        }
        Ok(out)
    }
}

/// The remembered choices read back, before they replace the bucketer's.
enum Loaded {
    Dense(Vec<u64>),
    Sparse(ChoiceMap),
}

impl DChoice {
    /// Appends the layout above to `out`.
    pub(super) fn save(&self, out: &mut Vec<u8>) {
        out.push(FORMAT);
        out.push(self.d);
        out.extend_from_slice(&self.buckets.to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.push(weighting_tag(self.weighting));
        match &self.store {
            Store::Dense { n_keys, .. } => {
                out.push(0);
                out.extend_from_slice(&n_keys.to_le_bytes());
            }
            Store::Sparse(_) => out.push(1),
        }
        out.extend_from_slice(&self.assigned.to_le_bytes());
        out.extend_from_slice(&self.unremembered.to_le_bytes());
        self.loads
            .iter()
            .for_each(|l| out.extend_from_slice(&l.to_le_bytes()));
        match &self.store {
            Store::Dense { codes, .. } => codes
                .iter()
                .for_each(|w| out.extend_from_slice(&w.to_le_bytes())),
            Store::Sparse(map) => {
                // Hash-map order differs between targets and runs; key order does not.
                let mut pairs: Vec<(u64, u8)> = map.iter().map(|(&k, &c)| (k, c)).collect();
                pairs.sort_unstable_by_key(|&(k, _)| k);
                for (k, c) in pairs {
                    out.extend_from_slice(&k.to_le_bytes());
                    out.push(c);
                }
            }
        }
    }

    /// Reads the layout above and, only if all of it is valid, replaces this
    /// bucketer's choices, loads and counters with it.
    pub(super) fn load(&mut self, bytes: &[u8]) -> Result<(), HashError> {
        let mismatch = |setting| Err(HashError::StateMismatch { setting });
        let mut r = Cursor(bytes);
        if r.u8()? != FORMAT {
            return mismatch(SavedSetting::Format);
        }
        if r.u8()? != self.d {
            return mismatch(SavedSetting::Choices);
        }
        if r.u32()? != self.buckets {
            return mismatch(SavedSetting::Buckets);
        }
        if r.u64()? != self.seed {
            return mismatch(SavedSetting::Seed);
        }
        let weighting = r.u8()?;
        if weighting > 1 {
            return Err(HashError::MalformedState);
        }
        if weighting != weighting_tag(self.weighting) {
            return mismatch(SavedSetting::Weighting);
        }
        let dense = match r.u8()? {
            0 => Some(r.u64()?),
            1 => None,
            _ => return Err(HashError::MalformedState),
        };
        if dense != self.dense_keys() {
            return mismatch(SavedSetting::KeyStore);
        }
        let assigned = r.u64()?;
        let unremembered = r.u64()?;
        let loads = r.u64s(self.buckets as usize)?;
        let loaded = match &self.store {
            Store::Dense {
                n_keys,
                bits,
                codes,
            } => {
                let words = r.u64s(codes.len())?;
                let (n_keys, bits) = (*n_keys, *bits);
                // n_keys · bits fits in usize: checked when this store was built.
                let total = n_keys as usize * bits;
                let mut remembered = 0u64;
                for key in 0..n_keys as usize {
                    let code = read_code(&words, key * bits, bits);
                    if code > self.d {
                        return Err(HashError::MalformedState);
                    }
                    remembered += u64::from(code != 0);
                }
                let padding = total % 64;
                let dirty_tail = padding != 0 && words.last().is_some_and(|w| w >> padding != 0);
                if remembered != assigned || dirty_tail {
                    return Err(HashError::MalformedState);
                }
                Loaded::Dense(words)
            }
            Store::Sparse(_) => {
                // Each pair is 9 bytes; compare in u64 (usize may be 32 bits).
                if assigned.checked_mul(9) != Some(r.0.len() as u64) {
                    return Err(HashError::MalformedState);
                }
                let mut map = ChoiceMap::default();
                // `assigned` ≤ len / 9 fits in usize now.
                map.try_reserve(assigned as usize)
                    .map_err(|_| HashError::AllocationFailed)?;
                let mut previous = None;
                for _ in 0..assigned {
                    let (key, choice) = (r.u64()?, r.u8()?);
                    if choice >= self.d || previous.is_some_and(|p| p >= key) {
                        return Err(HashError::MalformedState);
                    }
                    previous = Some(key);
                    map.insert(key, choice);
                }
                Loaded::Sparse(map)
            }
        };
        if !r.0.is_empty() {
            return Err(HashError::MalformedState);
        }
        match (&mut self.store, loaded) {
            (Store::Dense { codes, .. }, Loaded::Dense(words)) => *codes = words,
            (Store::Sparse(map), Loaded::Sparse(loaded)) => *map = loaded,
            // `loaded` was built from this store's variant just above.
            _ => return Err(HashError::MalformedState),
        }
        self.loads = loads;
        self.assigned = assigned;
        self.unremembered = unremembered;
        Ok(())
    }
}
