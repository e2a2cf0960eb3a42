//! Export / import of one rank's whole [`ZeroOneAdam`] state — moments, the
//! anchor, the mask, the accumulated gradient, the schedule
//! counters and every error buffer — so a run saved at any step (inside a
//! local-step interval, inside the variance schedule) continues
//! bit-identically. Versioned and CRC-32-checked like 1-bit Adam's record
//! (`src/state.rs`), under its own magic, so neither optimizer imports the
//! other's state ([`StateError::OtherOptimizer`]).
//!
//! Record (all integers and floats little-endian):
//! ```text
//! magic "01AS" | version u32 = 1 | rank u32 | size u32 (u32::MAX = unbound)
//! len u64 | groups u32 | step u64 | grad_count u32
//! var_freeze_step u64 | var_update_scaler u64 | local_step_scaler u64
//! | local_step_clipper u64                       (must equal the config's)
//! var_interval u64 | var_counter u64 | local_interval u64 | local_counter u64
//! | lrs f64
//! per group: len u64 | policy u8 | kind u8 (0 none, 1 all-reduce)
//!            | kind 1: calls u64 | N u64 | e_w f32×N | M u64 | e_s f32×M
//! m f32×len | v f32×len | anchor f32×len | mask ⌈len/8⌉ bytes (Msb0)
//! | grad_sum f32×len
//! crc32 u32 over everything before it
//! ```
//! The learning rate is not stored (the caller's schedule sets it), nor
//! is [`crate::ZeroOneConfig::variance_reduce`], on purpose: its bfloat16
//! mean keeps nothing between steps (no error buffers, unlike the 1-bit
//! all-reduce), so a record holds the same fields whichever reduce wrote
//! it, and a run may go on under the other one (1-bit Adam's
//! `warmup_reduce` is left out of its record the same way, and no
//! `StateError` refuses a differing hyper-parameter that leaves no state
//! behind, `preconditioned` neither). Ranks that disagree on it still fail
//! together, at the header of the next step that communicates: its layout
//! hashes it. So the record's version stays 1.

use alloc::vec::Vec;

use crate::StateError;
use crate::allreduce::Shape;
use crate::policy::Policy;
use crate::record::{Reader, put_bound, put_floats, put_mask, verified_body};
use crate::zero_one::{Schedule, ZeroOneAdam, policy_code};

pub(crate) const MAGIC: [u8; 4] = *b"01AS";
/// 1-bit Adam's magic (`src/state.rs`), to name it when refused.
const ONE_BIT_MAGIC: [u8; 4] = *b"1BAS";
const VERSION: u32 = 1;
/// Bytes before the first group: magic, version, rank, size, len, groups,
/// step, grad_count, the four schedule parameters, the five counters.
const HEAD: u64 = 4 + 4 + 4 + 4 + 8 + 4 + 8 + 4 + 4 * 8 + 5 * 8;

/// The little-endian integer of `n ≤ 8` bytes at `at`, if present.
fn field(b: &[u8], at: u64, n: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let end = at.checked_add(usize::try_from(n).ok()?)?;
    let bytes = b.get(at..end)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
    )
}

/// The record length the fields announce: `Ok(exact)`, or `Err(at_least)`
/// when the bytes end inside a field that sizes it (`u64::MAX` for a size
/// that overflows).
fn announced_len(b: &[u8]) -> Result<u64, u64> {
    let add = |a: u64, c: u64| a.checked_add(c).ok_or(u64::MAX);
    let floats = |n: u64| n.checked_mul(4).ok_or(u64::MAX);
    let need = |at: u64, n: u64, rest: u64| at.saturating_add(n).saturating_add(rest);
    // After the groups: m, v, anchor, grad_sum, the mask and the CRC.
    let len = field(b, 16, 8).ok_or(need(16, 8, 4))?;
    let tail = add(
        floats(len)?.checked_mul(4).ok_or(u64::MAX)?,
        len.div_ceil(8) + 4,
    )?;
    let groups = field(b, 24, 4).ok_or(need(24, 4, tail))?;
    let mut at = HEAD;
    for _ in 0..groups {
        // len u64, policy u8, kind u8.
        let kind = field(b, at + 9, 1).ok_or(need(at, 10, tail))?;
        at = add(at, 10)?;
        if kind == 1 {
            let n = field(b, at + 8, 8).ok_or(need(at, 16, tail))?;
            at = add(add(at, 16)?, floats(n)?)?;
            let m = field(b, at, 8).ok_or(need(at, 8, tail))?;
            at = add(add(at, 8)?, floats(m)?)?;
        }
    }
    add(at, tail)
}

impl ZeroOneAdam {
    /// Serialise this rank's state as a versioned, CRC-32-checked record
    /// (layout in the module docs of this crate's `src/zero_one_state.rs`).
    /// Hyper-parameters are not stored (the four schedule parameters are,
    /// to be checked): the caller rebuilds the optimizer with its config and
    /// groups, then imports.
    pub fn export_state(&self) -> Vec<u8> {
        let mut w = Vec::new();
        w.extend_from_slice(&MAGIC);
        w.extend_from_slice(&VERSION.to_le_bytes());
        put_bound(&mut w, self.bound);
        w.extend_from_slice(&(self.len as u64).to_le_bytes());
        w.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
        w.extend_from_slice(&self.step.to_le_bytes());
        w.extend_from_slice(&self.grad_count.to_le_bytes());
        let c = &self.config;
        let s = &self.schedule;
        for x in [
            c.var_freeze_step,
            c.var_update_scaler,
            c.local_step_scaler,
            c.local_step_clipper,
            s.var_interval,
            s.var_counter,
            s.local_interval,
            s.local_counter,
            s.lrs.to_bits(),
        ] {
            w.extend_from_slice(&x.to_le_bytes());
        }
        for g in &self.groups {
            w.extend_from_slice(&(g.spec.len as u64).to_le_bytes());
            w.push(policy_code(g.spec.policy));
            if g.errors.shape.is_some() {
                w.push(1);
                w.extend_from_slice(&g.errors.calls.to_le_bytes());
                for e in [g.errors.worker_error(), g.errors.server_error()] {
                    w.extend_from_slice(&(e.len() as u64).to_le_bytes());
                    put_floats(&mut w, &e);
                }
            } else {
                w.push(0);
            }
        }
        put_floats(&mut w, &self.m);
        put_floats(&mut w, &self.v);
        put_floats(&mut w, &self.anchor);
        put_mask(&mut w, &self.zero);
        put_floats(&mut w, &self.grad_sum);
        let crc = crc32fast::hash(&w);
        w.extend_from_slice(&crc.to_le_bytes());
        w
    }

    /// Restore a record written by [`Self::export_state`] on an optimizer
    /// built with the same groups and schedule parameters. On error `self`
    /// is unchanged.
    ///
    /// # Errors
    /// [`StateError::OtherOptimizer`] for a 1-bit Adam record,
    /// [`StateError::BadMagic`], [`StateError::UnsupportedVersion`],
    /// [`StateError::Truncated`] / [`StateError::TrailingBytes`] (fewer or
    /// more bytes than the length fields announce, checked before the
    /// checksum), [`StateError::Checksum`], [`StateError::Shape`] (another
    /// parameter count, group layout, schedule parameter, or inconsistent
    /// counters), [`StateError::Schedule`] (another `var_freeze_step` or
    /// `local_step_scaler`), [`StateError::NonFinite`].
    pub fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let seen = bytes.len().min(4);
        if bytes[..seen] == ONE_BIT_MAGIC[..seen] && seen == 4 {
            return Err(StateError::OtherOptimizer("1-bit Adam"));
        }
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
        match announced_len(bytes) {
            Ok(needed) | Err(needed) if found < needed => {
                return Err(StateError::Truncated { needed, found });
            }
            Ok(needed) if found > needed => return Err(StateError::TrailingBytes),
            Err(_) => {
                return Err(StateError::Truncated {
                    needed: u64::MAX,
                    found,
                });
            }
            Ok(_) => {}
        }
        let body = verified_body(bytes)?;
        let mut r = Reader::new(&body[8..], bytes.len());
        let mut next = self.clone();
        next.bound = r.bound()?;
        if r.u64()? != self.len as u64 {
            return Err(StateError::Shape("parameter count"));
        }
        if r.u32()? != self.groups.len() as u32 {
            return Err(StateError::Shape("group count"));
        }
        next.step = r.u64()?;
        next.grad_count = r.u32()?;
        let c = self.config;
        // The two step counts a caller may derive from its run's length
        // are a schedule (named with both values); the other two are the
        // rule's shape.
        for (want, what, schedule) in [
            (c.var_freeze_step, "var_freeze_step", true),
            (c.var_update_scaler, "var_update_scaler", false),
            (c.local_step_scaler, "local_step_scaler", true),
            (c.local_step_clipper, "local_step_clipper", false),
        ] {
            let saved = r.u64()?;
            if saved != want {
                return Err(if schedule {
                    StateError::Schedule {
                        field: what,
                        saved,
                        here: want,
                    }
                } else {
                    StateError::Shape(what)
                });
            }
        }
        next.schedule = Schedule {
            var_interval: r.u64()?,
            var_counter: r.u64()?,
            local_interval: r.u64()?,
            local_counter: r.u64()?,
            lrs: f64::from_bits(r.u64()?),
        };
        check_schedule(&next)?;
        for g in &mut next.groups {
            if r.u64()? != g.spec.len as u64 {
                return Err(StateError::Shape("group length"));
            }
            if r.u8()? != policy_code(g.spec.policy) {
                return Err(StateError::Shape("group policy"));
            }
            g.errors = Default::default();
            match r.u8()? {
                0 => {}
                1 if g.spec.policy == Policy::OneBit => {
                    let (rank, ranks) = next.bound.ok_or(StateError::Shape("rank"))?;
                    let calls = r.u64()?;
                    let shape = Shape {
                        len: g.spec.len,
                        ranks,
                        rank,
                    };
                    let we = r.floats_exact(shape.padded(), "worker error length")?;
                    let se = r.floats_exact(shape.server_len(), "server error length")?;
                    g.errors
                        .restore(shape, calls, &we, &se)
                        .map_err(|_| StateError::NonFinite)?;
                }
                _ => return Err(StateError::Shape("error buffer kind")),
            }
        }
        next.m = r.floats(self.len as u64)?;
        next.v = r.floats(self.len as u64)?;
        next.anchor = r.floats(self.len as u64)?;
        next.zero = r.mask(self.len)?;
        next.grad_sum = r.floats(self.len as u64)?;
        if next.grad_count == 0 && next.grad_sum.iter().any(|&s| s.to_bits() != 0) {
            return Err(StateError::Shape("gradient sum without a gradient count"));
        }
        if !r.is_empty() {
            return Err(StateError::TrailingBytes);
        }
        *self = next;
        Ok(())
    }
}

/// Counters a run of this config can reach: intervals powers of two (the
/// local one up to the clipper, or the clipper itself), counters below their scalers, `lrs`
/// finite and ≥ 0 (0 before the freeze).
fn check_schedule(o: &ZeroOneAdam) -> Result<(), StateError> {
    let (c, s) = (&o.config, &o.schedule);
    let ok = s.var_interval.is_power_of_two()
        && s.var_counter < c.var_update_scaler
        && (s.local_interval.is_power_of_two() || s.local_interval == c.local_step_clipper)
        && s.local_interval <= c.local_step_clipper
        && s.local_counter < c.local_step_scaler
        && s.lrs.is_finite()
        && s.lrs >= 0.0
        && (o.step >= c.var_freeze_step || (s.lrs == 0.0 && s.local_counter == 0));
    if ok {
        Ok(())
    } else {
        Err(StateError::Shape("schedule counters"))
    }
}
