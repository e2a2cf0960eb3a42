//! The byte reader and writer of this crate's state records (1-bit Adam's
//! `state.rs`, 0/1 Adam's `zero_one_state.rs`, 1-bit LAMB's
//! `lamb_state.rs`): little-endian integers and floats, float vectors
//! checked finite, and a reader that reports a short record as
//! [`StateError::Truncated`] instead of panicking. The record layouts stay
//! in their own files; only the primitives are shared.

use alloc::vec::Vec;

use crate::StateError;
use crate::freeze::{AutoFreeze, FreezePolicy, FreezeTracker};

/// The rank binding of an unbound state (both fields).
const UNBOUND: u32 = u32::MAX;

/// A rank binding as every record stores it: rank, then group size (`u32`
/// each; both `u32::MAX` when the state is bound to no group).
pub(crate) fn put_bound(out: &mut Vec<u8>, bound: Option<(usize, usize)>) {
    let (rank, size) = bound.map_or((UNBOUND, UNBOUND), |(r, s)| (r as u32, s as u32));
    out.extend_from_slice(&rank.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
}

/// The record's bytes before its trailing CRC-32, once that CRC matches.
/// The caller has checked the record's length; a record too short for a
/// header and a CRC is refused here too, so the split cannot panic.
pub(crate) fn verified_body(bytes: &[u8]) -> Result<&[u8], StateError> {
    let Some(cut) = bytes.len().checked_sub(4).filter(|&c| c >= 8) else {
        return Err(StateError::Truncated {
            needed: 12,
            found: bytes.len() as u64,
        });
    };
    let (body, tail) = bytes.split_at(cut);
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(StateError::Checksum { stored, computed });
    }
    Ok(body)
}

/// Appends little-endian fields to a record.
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    pub(crate) fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn f64(&mut self, x: f64) {
        self.u64(x.to_bits());
    }
    /// A rank binding ([`put_bound`]).
    pub(crate) fn bound(&mut self, bound: Option<(usize, usize)>) {
        put_bound(&mut self.0, bound);
    }
    /// A bit mask ([`put_mask`]).
    pub(crate) fn mask(&mut self, bits: &[bool]) {
        put_mask(&mut self.0, bits);
    }
    /// The floats, no length ([`put_floats`]).
    pub(crate) fn floats(&mut self, xs: &[f32]) {
        put_floats(&mut self.0, xs);
    }
    /// A length-prefixed float vector (`u64` count, then the floats).
    pub(crate) fn floats_prefixed(&mut self, xs: &[f32]) {
        self.u64(xs.len() as u64);
        put_floats(&mut self.0, xs);
    }
}

/// `xs` as little-endian `f32`s, no length.
pub(crate) fn put_floats(out: &mut Vec<u8>, xs: &[f32]) {
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// `bits` packed most significant bit first, `⌈len/8⌉` bytes (the zero
/// masks of every record).
pub(crate) fn put_mask(out: &mut Vec<u8>, bits: &[bool]) {
    let at = out.len();
    out.resize(at + bits.len().div_ceil(8), 0);
    for (i, &z) in bits.iter().enumerate() {
        if z {
            out[at + i / 8] |= 0x80 >> (i % 8);
        }
    }
}

/// Reads little-endian fields from the body of a record whose length and
/// checksum were already checked.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    /// Bytes of the whole record (for [`StateError::Truncated`]).
    total: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `body`, the rest of a record of `total` bytes.
    pub(crate) fn new(body: &'a [u8], total: usize) -> Self {
        Self { b: body, total }
    }
    /// Whether every byte was read (a record with bytes left over is
    /// refused by its caller).
    pub(crate) fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.b.len() < n {
            // Unreachable once the record's announced length matched; kept
            // so that a reader bug is an error, not a panic.
            return Err(StateError::Truncated {
                needed: (self.total - self.b.len()).saturating_add(n) as u64,
                found: self.total as u64,
            });
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, StateError> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, StateError> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
    pub(crate) fn f64(&mut self) -> Result<f64, StateError> {
        Ok(f64::from_bits(self.u64()?))
    }
    pub(crate) fn f32(&mut self) -> Result<f32, StateError> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(f32::from_le_bytes(w))
    }
    /// A rank binding ([`put_bound`]): `None` unbound, else `(rank, size)`
    /// with `rank < size`.
    pub(crate) fn bound(&mut self) -> Result<Option<(usize, usize)>, StateError> {
        match (self.u32()?, self.u32()?) {
            (UNBOUND, UNBOUND) => Ok(None),
            (rank, size) if rank < size => Ok(Some((rank as usize, size as usize))),
            _ => Err(StateError::Shape("rank")),
        }
    }
    /// A mask of `len` bits ([`put_mask`]).
    pub(crate) fn mask(&mut self, len: usize) -> Result<Vec<bool>, StateError> {
        let packed = self.take(len.div_ceil(8))?;
        Ok((0..len)
            .map(|i| packed[i / 8] & (0x80 >> (i % 8)) != 0)
            .collect())
    }
    /// `n` floats, checked finite; the length is checked against the bytes
    /// left before allocating.
    pub(crate) fn floats(&mut self, n: u64) -> Result<Vec<f32>, StateError> {
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(4))
            .ok_or(StateError::Truncated {
                needed: u64::MAX,
                found: self.total as u64,
            })?;
        let raw = self.take(bytes)?;
        let mut out = Vec::with_capacity(raw.len() / 4);
        for w in raw.chunks_exact(4) {
            let x = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            if !x.is_finite() {
                return Err(StateError::NonFinite);
            }
            out.push(x);
        }
        Ok(out)
    }
    /// A length-prefixed float vector ([`Writer::floats_prefixed`]).
    pub(crate) fn floats_prefixed(&mut self) -> Result<Vec<f32>, StateError> {
        let n = self.u64()?;
        self.floats(n)
    }
    /// A length-prefixed float vector whose length must equal `want`
    /// ([`StateError::Shape`]`(what)` otherwise, before reading the floats).
    pub(crate) fn floats_exact(
        &mut self,
        want: usize,
        what: &'static str,
    ) -> Result<Vec<f32>, StateError> {
        if self.u64()? != want as u64 {
            return Err(StateError::Shape(what));
        }
        self.floats(want as u64)
    }
}

/// A freeze policy as a record stores it: kind (1 fixed, 2 auto, 3 share), then four
/// `u64` fields.
fn freeze_fields(p: FreezePolicy) -> (u8, [u64; 4]) {
    match p {
        FreezePolicy::Fixed(n) => (1, [n, 0, 0, 0]),
        FreezePolicy::Auto(a) => (2, [a.window, a.threshold.to_bits(), a.min_step, a.max_step]),
        FreezePolicy::Share(a) => (3, [a.window, a.threshold.to_bits(), a.min_step, a.max_step]),
    }
}

/// The freeze block of 1-bit Adam's and 1-bit LAMB's records: the policy
/// ([`freeze_fields`]), the freeze step and the snapshot's step (0: none),
/// the last measured change (NaN: none) and the snapshot, length-prefixed.
pub(crate) fn write_freeze(w: &mut Writer, policy: FreezePolicy, fz: &FreezeTracker) {
    let (kind, fields) = freeze_fields(policy);
    w.u8(kind);
    for x in fields {
        w.u64(x);
    }
    w.u64(fz.frozen_at.unwrap_or(0));
    w.u64(fz.snapshot_at.unwrap_or(0));
    w.f64(fz.last_change.unwrap_or(f64::NAN));
    w.floats_prefixed(&fz.snapshot);
}

/// Reads [`write_freeze`]'s block back for an optimizer with `policy`, whose
/// record is at `step` and whose snapshot covers `snapshot_len` elements;
/// refuses another policy and a state that policy cannot reach.
pub(crate) fn read_freeze(
    r: &mut Reader<'_>,
    policy: FreezePolicy,
    step: u64,
    snapshot_len: usize,
) -> Result<FreezeTracker, StateError> {
    let kind = r.u8()?;
    let mut fields = [0u64; 4];
    for f in &mut fields {
        *f = r.u64()?;
    }
    let (here_kind, here) = freeze_fields(policy);
    if (kind, fields) != (here_kind, here) {
        // The same rule with another step bound (a fixed step, or the
        // automatic rule's `max_step`, which `min_step` may follow when it
        // is lower): a schedule of another length, named with both values.
        let step = match kind {
            1 => Some(("freeze_step", 0)),
            2 | 3 if fields[..2] == here[..2] && fields[3] != here[3] => Some(("max_step", 3)),
            _ => None,
        };
        if let (true, Some((field, i))) = (kind == here_kind, step) {
            return Err(StateError::Schedule {
                field,
                saved: fields[i],
                here: here[i],
            });
        }
        // The former default (before `FreezePolicy::Share`): say which, so
        // that a record of a run that never named its policy can be read.
        if (kind, fields) == freeze_fields(FreezePolicy::Auto(AutoFreeze::default())) {
            return Err(StateError::Shape(
                "freeze policy (the record was saved under FreezePolicy::Auto(AutoFreeze::default()), \
                 the default before FreezePolicy::Share; build the optimizer with that policy to import it)",
            ));
        }
        return Err(StateError::Shape(
            "freeze policy (the record was saved under another FreezePolicy)",
        ));
    }
    let at = |x: u64| (x != 0).then_some(x);
    let frozen_at = at(r.u64()?);
    let snapshot_at = at(r.u64()?);
    let change = r.f64()?;
    let last_change = (!change.is_nan()).then_some(change);
    let snapshot = r.floats_prefixed()?;
    let consistent = match (policy, frozen_at) {
        (FreezePolicy::Fixed(n), f) => f == Some(n) && snapshot_at.is_none(),
        (FreezePolicy::Auto(_) | FreezePolicy::Share(_), Some(f)) => {
            f <= step.max(1) && snapshot_at.is_none()
        }
        (FreezePolicy::Auto(_) | FreezePolicy::Share(_), None) => {
            snapshot_at.is_none_or(|s| s <= step)
        }
    };
    let snapshot_ok = match snapshot_at {
        Some(_) => snapshot.len() == snapshot_len,
        None => snapshot.is_empty(),
    };
    if !(consistent && snapshot_ok) {
        return Err(StateError::Shape("freeze state (step or snapshot length)"));
    }
    if last_change.is_some_and(|c| c.is_infinite() || c < 0.0) {
        return Err(StateError::NonFinite);
    }
    Ok(FreezeTracker {
        frozen_at,
        snapshot,
        snapshot_at,
        last_change,
    })
}
