//! [`Memory`]: the bytes one rank's [`OneBitAdam`] holds, by part.

use core::mem::size_of;

use crate::optimizer::OneBitAdam;

/// The bytes one rank's optimizer holds, by part ([`OneBitAdam::memory`]).
/// Lengths, not allocator capacities; `n` = parameters, `L` = live
/// coordinates of the 1-bit groups, `N` = `L` padded to `8P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Memory {
    /// `m` and `v`: `8n`.
    pub moments: usize,
    /// The zero mask (one `bool` per parameter) and the accumulated
    /// gradient: `5n`.
    pub mask_and_accumulator: usize,
    /// Error-feedback buffers of the 1-bit stage: `4(N + N/P)` per group
    /// with the momentum variants and per [`crate::Policy::Graded`] group, `4L` with the decayed-gradient one; 0
    /// before the first compressed step.
    pub error_feedback: usize,
    /// The automatic freeze's snapshot of `v̂`: one `f32` per element of the
    /// 1-bit groups **during the warm-up only** (taken at the first measure,
    /// freed at the freeze); 0 with a fixed freeze step.
    pub freeze_snapshot: usize,
    /// Per-step buffers (the mean-gradient copy, the packed live
    /// coordinates and the 1-bit stage's frozen denominators), reused
    /// across steps.
    pub scratch: usize,
    /// [`crate::Config::telemetry`]'s sign bits: `8·⌈n/64⌉` once the first
    /// step with telemetry has run, else 0.
    pub telemetry: usize,
}

impl Memory {
    /// Every part added up.
    pub fn total(&self) -> usize {
        self.moments
            + self.mask_and_accumulator
            + self.error_feedback
            + self.freeze_snapshot
            + self.scratch
            + self.telemetry
    }
}

impl OneBitAdam {
    /// The bytes this rank's optimizer holds now, by part.
    ///
    /// ```
    /// use onebit_adam::comm_traits::SingleRank;
    /// use onebit_adam::{AutoFreeze, Config, FreezePolicy, OneBitAdam};
    ///
    /// let auto = FreezePolicy::Auto(AutoFreeze::default().with_window(2).with_min_step(1));
    /// let mut opt = OneBitAdam::new(1000, Config::default().with_freeze(auto))?;
    /// let (mut x, g) = (vec![1.0f32; 1000], vec![0.5f32; 1000]);
    /// assert_eq!(opt.memory().moments, 8000);
    /// for _ in 0..2 {
    ///     opt.step_with_grad(&mut SingleRank::default(), &mut x, &g)?;
    /// }
    /// // Step 2 took the first snapshot: 4 bytes per element until the freeze.
    /// assert_eq!(opt.memory().freeze_snapshot, 4000);
    /// while opt.frozen_at().is_none() {
    ///     opt.step_with_grad(&mut SingleRank::default(), &mut x, &g)?;
    /// }
    /// assert_eq!(opt.memory().freeze_snapshot, 0);
    /// # Ok::<(), onebit_adam::OneBitError>(())
    /// ```
    pub fn memory(&self) -> Memory {
        let f = size_of::<f32>();
        let error_feedback = self
            .groups
            .iter()
            .map(|g| {
                g.allreduce.error_len()
                    + g.graded.error_len()
                    + g.seed.as_ref().map_or(0, |c| c.len())
            })
            .sum::<usize>()
            * f;
        let frozen: usize = self
            .groups
            .iter()
            .filter_map(|g| g.frozen.as_ref())
            .map(|fz| fz.bytes())
            .sum();
        Memory {
            moments: (self.m.len() + self.v.len()) * f,
            mask_and_accumulator: self.zero.len() * size_of::<bool>() + self.grad_sum.len() * f,
            error_feedback,
            freeze_snapshot: self.freeze.snapshot.len() * f,
            scratch: self.scratch_bytes() + frozen,
            telemetry: self.negative.iter().map(|s| s.len()).sum(),
        }
    }
}
