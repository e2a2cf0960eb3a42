//! Export / import of one rank's whole [`OneBitLamb`] state — moments, the
//! fresh variance, the frozen and adapted coefficients, the momentum
//! scaling, the freeze tracker, counters and **the error buffers** — so a
//! restored run continues bit for bit (DeepSpeed resets the error buffers
//! and, mid-warm-up, the coefficients on checkpoint load).
//!
//! Record (all integers and floats little-endian), versioned and CRC-32
//! checked like 1-bit Adam's (`src/state.rs`), with its total length in the
//! header so a cut or padded record is named as such before the checksum:
//! ```text
//! magic "1BLM" | version u32 = 1 | total bytes u64 (CRC included)
//! rank u32 | size u32 (u32::MAX = unbound) | len u64 | groups u32 | step u64
//! per group: len u64 | c̄ f64 | f_prev f64 | last c f64
//!            | has scaling u8 (0/1) | s f32 (0 when absent)
//! freeze: policy u8 (1 fixed, 2 auto, 3 share) | fixed: step u64 | 0 u64 ×3;
//!         auto: window u64 | threshold f64 | min_step u64 | max_step u64
//!         | frozen_at u64 (0 = not decided) | snapshot_at u64 (0 = none)
//!         | last change f64 (NaN = none) | S u64 | v̂ snapshot f32×S
//! error feedback: kind u8 (0 none, 1 bound) | kind 1: calls u64
//!         | N u64 | e_w f32×N | M u64 | e_s f32×M   (N = len padded to 8P, M = N/P)
//! m f32×len | v f32×len | F u64 (0 or len) | v_fresh f32×F
//! zero mask ⌈len/8⌉ bytes (Msb0; the buffers' `len` is its live count)
//! crc32 u32 over everything before it
//! ```

use alloc::vec::Vec;

use crate::StateError;
use crate::allreduce::{AllReduceState, Shape};
use crate::lamb::OneBitLamb;
use crate::record::{Reader, Writer, read_freeze, verified_body, write_freeze};

const MAGIC: [u8; 4] = *b"1BLM";
const VERSION: u32 = 1;
/// magic, version, total length.
const HEAD: usize = 16;

impl OneBitLamb {
    /// Serialise this rank's state as a versioned, CRC-32-checked record
    /// (layout in the module docs of this crate's `src/lamb_state.rs`).
    /// Hyper-parameters are not stored: the caller rebuilds the optimizer
    /// with its config and groups, then imports.
    pub fn export_state(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(&MAGIC);
        w.u32(VERSION);
        w.u64(0); // total length, patched below
        w.bound(self.bound);
        w.u64(self.len as u64);
        w.u32(self.groups.len() as u32);
        w.u64(self.step);
        for g in &self.groups {
            w.u64(g.spec.len as u64);
            w.f64(g.coeff_avg);
            w.f64(g.last_factor);
            w.f64(g.last_coeff);
            w.u8(u8::from(g.scaling.is_some()));
            w.0.extend_from_slice(&g.scaling.unwrap_or(0.0).to_le_bytes());
        }
        write_freeze(&mut w, self.config.freeze, &self.freeze);
        if self.allreduce.shape.is_some() {
            w.u8(1);
            w.u64(self.allreduce.calls);
            w.floats_prefixed(&self.allreduce.worker_error());
            w.floats_prefixed(&self.allreduce.server_error());
        } else {
            w.u8(0);
        }
        w.floats_prefixed(&self.m);
        w.floats_prefixed(&self.v);
        w.floats_prefixed(&self.v_fresh);
        w.mask(&self.zero);
        let total = (w.0.len() + 4) as u64;
        w.0[8..16].copy_from_slice(&total.to_le_bytes());
        let crc = crc32fast::hash(&w.0);
        w.u32(crc);
        w.0
    }

    /// Restore a record written by [`Self::export_state`] on an optimizer
    /// built with the same groups and config. On error `self` is unchanged.
    ///
    /// # Errors
    /// [`StateError::BadMagic`], [`StateError::UnsupportedVersion`],
    /// [`StateError::Truncated`] / [`StateError::TrailingBytes`] (fewer or
    /// more bytes than the record's length field announces, checked before
    /// the checksum), [`StateError::Checksum`], [`StateError::Shape`] (other
    /// parameter count, groups, rank, freeze policy, or a record whose
    /// parts disagree about the stage), [`StateError::Schedule`] (the same
    /// freeze rule with another fixed step or `max_step`),
    /// [`StateError::NonFinite`] (a
    /// non-finite float, or a coefficient out of its range).
    pub fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let seen = bytes.len().min(MAGIC.len());
        if bytes[..seen] != MAGIC[..seen] {
            return Err(StateError::BadMagic);
        }
        if let Some(v) = bytes.get(4..8) {
            let version = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
            if version != VERSION {
                return Err(StateError::UnsupportedVersion(version));
            }
        }
        let found = bytes.len() as u64;
        let Some(t) = bytes.get(8..HEAD) else {
            return Err(StateError::Truncated {
                needed: HEAD as u64 + 4,
                found,
            });
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(t);
        let total = u64::from_le_bytes(w);
        if found < total.max(HEAD as u64 + 4) {
            return Err(StateError::Truncated {
                needed: total.max(HEAD as u64 + 4),
                found,
            });
        }
        if found > total {
            return Err(StateError::TrailingBytes);
        }
        let body = verified_body(bytes)?;
        let mut r = Reader::new(&body[HEAD..], bytes.len());
        let next = self.read(&mut r)?;
        if !r.is_empty() {
            return Err(StateError::TrailingBytes);
        }
        *self = next;
        Ok(())
    }

    /// The checked body of a record, as a new optimizer.
    fn read(&self, r: &mut Reader<'_>) -> Result<Self, StateError> {
        let mut next = self.clone();
        next.bound = r.bound()?;
        if r.u64()? != self.len as u64 {
            return Err(StateError::Shape("parameter count"));
        }
        if r.u32()? != self.groups.len() as u32 {
            return Err(StateError::Shape("group count"));
        }
        next.step = r.u64()?;
        for g in &mut next.groups {
            if r.u64()? != g.spec.len as u64 {
                return Err(StateError::Shape("group length"));
            }
            g.coeff_avg = r.f64()?;
            g.last_factor = r.f64()?;
            g.last_coeff = r.f64()?;
            let has = r.u8()?;
            let s = r.f32()?;
            g.scaling = match has {
                0 => None,
                1 => Some(s),
                _ => return Err(StateError::Shape("scaling flag")),
            };
            // Ranges the math keeps them in: c̄ ≥ 0, f_prev > 0, s > 0.
            let ok = g.coeff_avg.is_finite()
                && g.coeff_avg >= 0.0
                && g.last_factor.is_finite()
                && g.last_factor > 0.0
                && g.last_coeff.is_finite()
                && g.scaling.is_none_or(|s| s.is_finite() && s > 0.0);
            if !ok {
                return Err(StateError::NonFinite);
            }
        }
        next.freeze = read_freeze(r, self.config.freeze, next.step, self.len)?;
        // The error buffers are sized by the zero mask, which comes last:
        // read them now, check them once the mask is known.
        let errors = match r.u8()? {
            0 => None,
            1 => {
                let calls = r.u64()?;
                Some((calls, r.floats_prefixed()?, r.floats_prefixed()?))
            }
            _ => return Err(StateError::Shape("error buffer kind")),
        };
        next.m = r.floats_exact(self.len, "momentum length")?;
        next.v = r.floats_exact(self.len, "variance length")?;
        next.v_fresh = r.floats_prefixed()?;
        next.zero = r.mask(self.len)?;
        if next.zero.iter().zip(&next.m).any(|(&z, &m)| z && m != 0.0) {
            return Err(StateError::Shape("momentum of an exact-zero coordinate"));
        }
        next.allreduce = AllReduceState::new();
        if let Some((calls, we, se)) = errors {
            let (rank, ranks) = next.bound.ok_or(StateError::Shape("rank"))?;
            let shape = Shape {
                len: next.zero.iter().filter(|&&z| !z).count(),
                ranks,
                rank,
            };
            if we.len() != shape.padded() {
                return Err(StateError::Shape("worker error length"));
            }
            if se.len() != shape.server_len() {
                return Err(StateError::Shape("server error length"));
            }
            next.allreduce
                .restore(shape, calls, &we, &se)
                .map_err(|_| StateError::NonFinite)?;
        }
        // The stage the parts describe must be one: after the first
        // compressed step every group has its scaling, `v_fresh` is whole
        // and the error buffers are bound; before it, none of the first two.
        let scaled = next.groups.iter().filter(|g| g.scaling.is_some()).count();
        let compressed = match (scaled, next.v_fresh.len()) {
            (0, 0) => false,
            (s, f) if s == next.groups.len() && f == self.len => true,
            _ => return Err(StateError::Shape("stage (scaling and fresh variance)")),
        };
        if compressed
            && (next.allreduce.shape.is_none()
                || next.freeze.frozen_at.is_none_or(|f| f >= next.step))
        {
            return Err(StateError::Shape("stage (compressed without a freeze)"));
        }
        Ok(next)
    }
}
