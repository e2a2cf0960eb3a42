//! Export / import of the whole optimizer state of one rank, **including the
//! worker and server error buffers** (DeepSpeed drops them on checkpoint
//! load), so a restored run continues bit-identically.
//!
//! Record (all integers and floats little-endian):
//! ```text
//! magic "1BAS" | version u32 = 3 | rank u32 | size u32 (u32::MAX = unbound)
//! len u64 | groups u32 | step u64 | compressed_steps u64 | grad_count u32
//! per group: len u64 | policy u8 (1 1-bit, 2 full, 3 2-bit, 4 bf16)
//!            | v_updates u64
//!            | kind u8 (0 none, 1 all-reduce, 2 seed, 3 graded all-reduce)
//!            | kind 1, 3: calls u64 | L u64 | N u64 | e_w f32×N | M u64 | e_s f32×M
//!            | kind 2: L u64 | e f32×L
//! (L = live, i.e. compressed, coordinates of the group; N = L padded to 8P,
//! M = N/P)
//! freeze (version 2): policy u8 (1 fixed, 2 auto, 3 share)
//!            | fixed: step u64 | 0 u64 ×3;  auto: window u64 | threshold f64
//!              | min_step u64 | max_step u64
//!            | frozen_at u64 (0 = not decided) | snapshot_at u64 (0 = none)
//!            | last change f64 (NaN = none) | S u64 | v̂ snapshot f32×S
//! m f32×len | v f32×len | zero mask ⌈len/8⌉ bytes (Msb0) | grad_sum f32×len
//! crc32 u32 over everything before it
//! ```
//!
//! Not stored, because it is a function of what is: the telemetry's sign
//! bits (`m < 0` after the previous step, rebuilt from `m` on import) and the
//! per-group frozen-`v` derivatives of the 1-bit stage (rebuilt from `v` and
//! the zero mask at the first compressed step). `tests/freeze_restore.rs`
//! resumes from every step of a warm-up and checks the freeze step, every
//! report and the final bits against the uninterrupted run.
//!
//! Version 2 (the same layout without policies 3, 4 and kind 3) is read as
//! is. Version 1 (no freeze block) is still read: its run had a fixed freeze
//! step, which it did not store, so it imports into an optimizer configured
//! with [`FreezePolicy::Fixed`] (the step is the config's, as before) and is
//! refused by one configured with an automatic rule ([`FreezePolicy::Share`],
//! the default, or [`FreezePolicy::Auto`]).
//!
//! The record stores its freeze rule, and an import under another rule is
//! refused ([`StateError::Shape`], "freeze policy …"; the same rule with
//! another step bound is [`StateError::Schedule`]). So a record written
//! under the former default, `FreezePolicy::Auto(AutoFreeze::default())`,
//! is refused by an optimizer on today's default with a message naming that
//! policy, and imports exactly into one built with it
//! (`tests/freeze_restore.rs`,
//! `a_record_of_the_former_default_is_refused_by_the_new_one_and_imports_under_auto`).

use alloc::vec;
use alloc::vec::Vec;

use crate::allreduce::Shape;
use onebit_codec::{Compressor, CompressorConfig, ErrorFeedback, Grade};

use crate::StateError;
use crate::freeze::FreezeTracker;
use crate::optimizer::{OneBitAdam, Variant};
use crate::policy::Policy;
use crate::record::{Reader, Writer, read_freeze, verified_body, write_freeze};

const MAGIC: [u8; 4] = *b"1BAS";
const VERSION: u32 = 3;
/// The version before the graded policies (same layout; still read).
const VERSION_2: u32 = 2;
/// The version before the freeze block (still read).
const VERSION_1: u32 = 1;
/// Bytes of the freeze block before its snapshot length: policy u8, four
/// u64 fields, frozen_at, snapshot_at, last change.
const FREEZE_FIXED: u64 = 1 + 4 * 8 + 3 * 8;

/// The length of a record as its own fields announce it, read from the
/// bytes present (which may be cut short, or corrupted: nothing here is
/// trusted, it only sizes the record).
#[derive(Debug, PartialEq, Eq)]
enum Announced {
    /// Every length field was present: the record is this long.
    Exact(u64),
    /// The bytes end inside the fields that size the record: it is at least
    /// this long (more than the bytes present).
    AtLeast(u64),
    /// An unknown error-buffer kind or an overflowing size: the checksum and
    /// the parser will name the problem.
    Unknown,
}

/// Walks the layout in the module docs, skipping the float arrays by their
/// announced lengths.
fn announced_len(bytes: &[u8], version: u32) -> Announced {
    /// Reads the fields that size the record; `rest` is what is known to
    /// follow the current field (the CRC, then also the tail arrays).
    struct Walk<'a> {
        bytes: &'a [u8],
        rest: u64,
    }
    impl Walk<'_> {
        /// The little-endian `n`-byte field at `at`.
        fn field(&self, at: u64, n: u64) -> Result<u64, Announced> {
            let end = at.checked_add(n).ok_or(Announced::Unknown)?;
            let got = usize::try_from(at)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(a, e)| self.bytes.get(a..e));
            match got {
                Some(b) => Ok(b
                    .iter()
                    .rev()
                    .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))),
                None => Err(Announced::AtLeast(end.saturating_add(self.rest))),
            }
        }
    }
    fn add(a: u64, b: u64) -> Result<u64, Announced> {
        a.checked_add(b).ok_or(Announced::Unknown)
    }
    fn floats(n: u64) -> Result<u64, Announced> {
        n.checked_mul(4).ok_or(Announced::Unknown)
    }
    let walk = || -> Result<u64, Announced> {
        let mut w = Walk { bytes, rest: 4 };
        // magic, version, rank, size: 16 bytes; then len u64, groups u32.
        let len = w.field(16, 8)?;
        // After the groups: m, v, grad_sum (f32×len each), the zero mask
        // (⌈len/8⌉ bytes) and the CRC.
        w.rest = add(
            floats(len)?.checked_mul(3).ok_or(Announced::Unknown)?,
            len.div_ceil(8) + 4,
        )?;
        let groups = w.field(24, 4)?;
        // step u64, compressed_steps u64, grad_count u32.
        let mut at: u64 = 28 + 8 + 8 + 4;
        for _ in 0..groups {
            // len u64, policy u8, v_updates u64, kind u8.
            let kind = w.field(add(at, 17)?, 1)?;
            at = add(at, 18)?;
            match kind {
                0 => {}
                1 | 3 => {
                    // calls u64, L u64, N u64, e_w f32×N, M u64, e_s f32×M.
                    let n = w.field(add(at, 16)?, 8)?;
                    at = add(add(at, 24)?, floats(n)?)?;
                    let m = w.field(at, 8)?;
                    at = add(add(at, 8)?, floats(m)?)?;
                }
                2 => {
                    // L u64, e f32×L.
                    let l = w.field(at, 8)?;
                    at = add(add(at, 8)?, floats(l)?)?;
                }
                _ => return Err(Announced::Unknown),
            }
        }
        if version >= VERSION_2 {
            // The freeze block: its fixed part, then S u64 and f32×S.
            at = add(at, FREEZE_FIXED)?;
            let s = w.field(at, 8)?;
            at = add(add(at, 8)?, floats(s)?)?;
        }
        add(at, w.rest)
    };
    walk().map_or_else(|a| a, Announced::Exact)
}

fn policy_byte(p: Policy) -> u8 {
    match p {
        Policy::OneBit => 1,
        Policy::FullPrecision => 2,
        Policy::Graded(Grade::TwoBit) => 3,
        Policy::Graded(_) => 4,
    }
}

/// The policy a stored byte names (`None`: unknown).
fn policy_of(b: u8) -> Option<Policy> {
    match b {
        1 => Some(Policy::OneBit),
        2 => Some(Policy::FullPrecision),
        3 => Some(Policy::Graded(Grade::TwoBit)),
        4 => Some(Policy::Graded(Grade::Bf16)),
        _ => None,
    }
}

impl OneBitAdam {
    /// Serialise this rank's state (moments, zero mask, accumulated gradient,
    /// counters, and every error buffer) as a versioned, CRC-32-checked record
    /// (layout in the module docs of this crate's `src/state.rs`).
    /// Hyper-parameters are not stored: the caller rebuilds the optimizer
    /// with its config and groups, then imports.
    pub fn export_state(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(&MAGIC);
        w.u32(VERSION);
        w.bound(self.bound);
        w.u64(self.len as u64);
        w.u32(self.groups.len() as u32);
        w.u64(self.step);
        w.u64(self.compressed_steps);
        w.u32(self.grad_count);
        for g in &self.groups {
            w.u64(g.spec.len as u64);
            w.u8(policy_byte(g.spec.policy));
            w.u64(g.v_updates);
            if let Some(c) = &g.seed {
                w.u8(2);
                let mut e = vec![0.0f32; c.len()];
                // Lengths match by construction.
                let _ = c.error_into(&mut e);
                w.u64(e.len() as u64);
                w.floats(&e);
            } else if let (Some(shape), Policy::Graded(_)) = (g.graded.shape, g.spec.policy) {
                w.u8(3);
                w.u64(g.graded.calls);
                w.u64(shape.len as u64);
                w.u64(g.graded.worker.len() as u64);
                w.floats(&g.graded.worker);
                w.u64(g.graded.server.len() as u64);
                w.floats(&g.graded.server);
            } else if let Some(shape) = g.allreduce.shape {
                w.u8(1);
                w.u64(g.allreduce.calls);
                w.u64(shape.len as u64);
                let we = g.allreduce.worker_error();
                let se = g.allreduce.server_error();
                w.u64(we.len() as u64);
                w.floats(&we);
                w.u64(se.len() as u64);
                w.floats(&se);
            } else {
                w.u8(0);
            }
        }
        write_freeze(&mut w, self.config.freeze, &self.freeze);
        w.floats(&self.m);
        w.floats(&self.v);
        w.mask(&self.zero);
        w.floats(&self.grad_sum);
        let crc = crc32fast::hash(&w.0);
        w.u32(crc);
        w.0
    }

    /// Restore a record written by [`Self::export_state`] on an optimizer
    /// built with the same groups (and config). On error `self` is unchanged.
    ///
    /// # Errors
    /// [`StateError::OtherOptimizer`] for a 0/1 Adam record,
    /// [`StateError::BadMagic`], [`StateError::UnsupportedVersion`],
    /// [`StateError::Truncated`] / [`StateError::TrailingBytes`] (fewer or
    /// more bytes than the record's length fields announce, checked before
    /// the checksum), [`StateError::Checksum`], [`StateError::Shape`] (other
    /// parameter count, groups, policies, variant or freeze rule),
    /// [`StateError::Schedule`] (the same freeze rule with another fixed
    /// step or `max_step`), [`StateError::NonFinite`].
    pub fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let seen = bytes.len().min(MAGIC.len());
        if bytes.get(..4) == Some(&crate::zero_one_state::MAGIC[..]) {
            return Err(StateError::OtherOptimizer("0/1 Adam"));
        }
        if bytes[..seen] != MAGIC[..seen] {
            return Err(StateError::BadMagic);
        }
        let mut version = VERSION;
        if let Some(v) = bytes.get(4..8) {
            version = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
            if version != VERSION && version != VERSION_2 && version != VERSION_1 {
                return Err(StateError::UnsupportedVersion(version));
            }
        }
        let found = bytes.len() as u64;
        match announced_len(bytes, version) {
            Announced::Exact(needed) | Announced::AtLeast(needed) if found < needed => {
                return Err(StateError::Truncated { needed, found });
            }
            Announced::Exact(needed) if found > needed => {
                return Err(StateError::TrailingBytes);
            }
            _ => {}
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
        next.compressed_steps = r.u64()?;
        next.grad_count = r.u32()?;
        for (gi, g) in next.groups.iter_mut().enumerate() {
            if r.u64()? != g.spec.len as u64 {
                return Err(StateError::Shape("group length"));
            }
            let stored = r.u8()?;
            if stored != policy_byte(g.spec.policy) {
                return Err(match policy_of(stored) {
                    Some(saved) => StateError::Policy {
                        group: gi,
                        saved,
                        here: g.spec.policy,
                    },
                    None => StateError::Shape("group policy"),
                });
            }
            g.v_updates = r.u64()?;
            g.seed = None;
            g.frozen = None;
            g.allreduce = Default::default();
            g.graded = Default::default();
            match r.u8()? {
                0 => {}
                1 => {
                    let (rank, size) = next.bound.ok_or(StateError::Shape("rank"))?;
                    let calls = r.u64()?;
                    let len = usize::try_from(r.u64()?)
                        .ok()
                        .filter(|&l| l <= g.spec.len)
                        .ok_or(StateError::Shape("compressed length"))?;
                    let shape = Shape {
                        len,
                        ranks: size,
                        rank,
                    };
                    let we = r.floats_exact(shape.padded(), "worker error length")?;
                    let se = r.floats_exact(shape.server_len(), "server error length")?;
                    g.allreduce
                        .restore(shape, calls, &we, &se)
                        .map_err(|_| StateError::NonFinite)?;
                }
                3 => {
                    let (rank, size) = next.bound.ok_or(StateError::Shape("rank"))?;
                    let Policy::Graded(grade) = g.spec.policy else {
                        return Err(StateError::Shape("error buffer kind"));
                    };
                    let calls = r.u64()?;
                    let len = usize::try_from(r.u64()?)
                        .ok()
                        .filter(|&l| l <= g.spec.len)
                        .ok_or(StateError::Shape("compressed length"))?;
                    let shape = Shape {
                        len,
                        ranks: size,
                        rank,
                    };
                    let we = r.floats_exact(shape.padded(), "worker error length")?;
                    let se = r.floats_exact(shape.server_len(), "server error length")?;
                    g.graded
                        .bind(len, size, rank, grade)
                        .map_err(|_| StateError::Shape("graded state"))?;
                    g.graded.worker = we;
                    g.graded.server = se;
                    g.graded.calls = calls;
                }
                2 => {
                    let Variant::DecayedGradient { beta, scale } = self.config.variant else {
                        return Err(StateError::Shape("variant"));
                    };
                    let len = r.u64()?;
                    if len > g.spec.len as u64 {
                        return Err(StateError::Shape("compressed length"));
                    }
                    let e = r.floats(len)?;
                    let config = CompressorConfig::default()
                        .with_feedback(ErrorFeedback::Decayed { beta })
                        .with_scale(scale)
                        .with_chunk(None);
                    let mut c = Compressor::with_config(e.len(), config)
                        .map_err(|_| StateError::Shape("variant"))?;
                    c.set_error(&e).map_err(|_| StateError::NonFinite)?;
                    g.seed = Some(c);
                }
                _ => return Err(StateError::Shape("error buffer kind")),
            }
        }
        next.freeze = if version == VERSION_1 {
            // A v1 run froze at a fixed step it did not store: the config's.
            if self.config.freeze.fixed_step().is_none() {
                return Err(StateError::Shape(
                    "freeze policy (a version-1 record comes from a fixed freeze step; \
                     build the optimizer with FreezePolicy::Fixed to import it)",
                ));
            }
            FreezeTracker::new(self.config.freeze)
        } else {
            let one_bit: usize = self
                .groups
                .iter()
                .filter(|g| g.spec.policy.compresses())
                .map(|g| g.spec.len)
                .sum();
            read_freeze(&mut r, self.config.freeze, next.step, one_bit)?
        };
        next.m = r.floats(self.len as u64)?;
        // Telemetry's sign bits are not stored: they are `m < 0`.
        next.rebuild_negative();
        next.v = r.floats(self.len as u64)?;
        next.zero = r.mask(self.len)?;
        next.recount_zero_left();
        next.grad_sum = r.floats(self.len as u64)?;
        // Unknown until a step checks it (the record's sums are not trusted).
        next.sum_finite = false;
        // A sum with nothing counted is never saved (a step zeroes both).
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
