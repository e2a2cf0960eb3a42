//! The lock-free moment table: one `AtomicU64` per coordinate holds the
//! `(M, V)` pair as two f32 bit patterns, updated by compare-and-swap.
//!
//! Why a 64-bit pair and not two `AtomicU32`s: one CAS moves `M_bj` and
//! `V_bj` together, so a reader can never see `M` from one set of updates and
//! `V` from another (the torn pair the loom models look for), and one CAS per
//! coordinate is half the read-modify-writes of two.
//!
//! Memory ordering: every access is `Relaxed`. The cells carry the data
//! themselves and publish nothing else, and read-modify-writes on one
//! location are totally ordered and always read the latest value in that
//! order, so a CAS loop never loses an update at any ordering. What `Relaxed`
//! does not give (and the table does not promise): an order *across*
//! coordinates or between `t_b` and the cells — a concurrent snapshot may see
//! coordinate 0 after an update and coordinate 1 before it.

use crate::Error;
use crate::sync::{AtomicU64, Ordering};
use crate::table::{self, MomentParams, MomentTable};

/// Packs `(m, v)` into one word: `m` in the low 32 bits, `v` in the high.
#[inline]
pub(crate) fn pack(m: f32, v: f32) -> u64 {
    u64::from(m.to_bits()) | (u64::from(v.to_bits()) << 32)
}

/// Inverse of [`pack`].
#[inline]
pub(crate) fn unpack(word: u64) -> (f32, f32) {
    // Truncation keeps exactly the low / high 32 bits, which is the point.
    #[allow(clippy::cast_possible_truncation)]
    (
        f32::from_bits(word as u32),
        f32::from_bits((word >> 32) as u32),
    )
}

/// One coordinate's `(M, V)` pair.
#[derive(Debug)]
pub(crate) struct PairCell(AtomicU64);

impl PairCell {
    pub(crate) fn new(m: f32, v: f32) -> Self {
        Self(AtomicU64::new(pack(m, v)))
    }

    /// The current pair (both halves from the same moment in the cell's history).
    #[inline]
    pub(crate) fn load(&self) -> (f32, f32) {
        unpack(self.0.load(Ordering::Relaxed))
    }

    /// Atomically replaces the pair by `f(pair)`; returns the new pair.
    /// `f` may run more than once (once per lost CAS race), so it must be pure.
    #[inline]
    pub(crate) fn update(&self, f: impl Fn(f32, f32) -> (f32, f32)) -> (f32, f32) {
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (m, v) = unpack(current);
            let (new_m, new_v) = f(m, v);
            match self.0.compare_exchange_weak(
                current,
                pack(new_m, new_v),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return (new_m, new_v),
                Err(actual) => current = actual,
            }
        }
    }

    /// The deliberately broken update (plain load then store, no CAS) that the
    /// loom models must catch losing updates.
    #[cfg(all(test, loom))]
    pub(crate) fn update_racy(&self, f: impl Fn(f32, f32) -> (f32, f32)) {
        let (m, v) = unpack(self.0.load(Ordering::Relaxed));
        let (new_m, new_v) = f(m, v);
        self.0.store(pack(new_m, new_v), Ordering::Relaxed);
    }
}

/// Lock-free Hogwild table of bucket moments: `B × d` pair cells updated by
/// CAS, plus one atomic step count per bucket.
///
/// ```
/// use basis_rayon::{AtomicMomentTable, MomentTable};
///
/// let table = AtomicMomentTable::new(4, 2)?;
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| table.accumulate(1, &[1.0, -2.0]).unwrap());
///     }
/// });
/// let (mut m, mut v) = ([0.0; 2], [0.0; 2]);
/// assert_eq!(table.snapshot(1, &mut m, &mut v)?, 4);
/// assert_eq!((m, v), ([4.0, -8.0], [4.0, 16.0]));
/// # Ok::<(), basis_rayon::Error>(())
/// ```
#[derive(Debug)]
pub struct AtomicMomentTable {
    dim: usize,
    cells: Box<[PairCell]>,
    steps: Box<[AtomicU64]>,
}

impl AtomicMomentTable {
    /// A zeroed table of `buckets × dim` moments.
    ///
    /// Fails with `BadShape` when either is zero or `buckets · dim` overflows.
    pub fn new(buckets: usize, dim: usize) -> Result<Self, Error> {
        let n = table::cells(buckets, dim)?;
        Ok(Self {
            dim,
            cells: (0..n).map(|_| PairCell::new(0.0, 0.0)).collect(),
            steps: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    pub(crate) fn bucket_cells(&self, bucket: usize) -> &[PairCell] {
        &self.cells[bucket * self.dim..(bucket + 1) * self.dim]
    }

    /// The deliberately broken accumulate (see [`PairCell::update_racy`]).
    #[cfg(all(test, loom))]
    pub(crate) fn accumulate_racy(&self, bucket: usize, grad: &[f32]) {
        self.steps[bucket].fetch_add(1, Ordering::Relaxed);
        for (cell, &g) in self.bucket_cells(bucket).iter().zip(grad) {
            cell.update_racy(|m, v| (m + g, v + g * g));
        }
    }
}

impl MomentTable for AtomicMomentTable {
    fn buckets(&self) -> usize {
        self.steps.len()
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn accumulate(&self, bucket: usize, grad: &[f32]) -> Result<u64, Error> {
        table::check_update(self.buckets(), self.dim, bucket, grad)?;
        let t = self.steps[bucket].fetch_add(1, Ordering::Relaxed) + 1;
        for (cell, &g) in self.bucket_cells(bucket).iter().zip(grad) {
            cell.update(|m, v| (m + g, v + g * g));
        }
        Ok(t)
    }

    fn adam_update(
        &self,
        bucket: usize,
        grad: &[f32],
        params: &MomentParams,
        direction: &mut [f32],
    ) -> Result<u64, Error> {
        params.validate()?;
        table::check_update(self.buckets(), self.dim, bucket, grad)?;
        table::check_len(self.dim, direction.len())?;
        let t = self.steps[bucket].fetch_add(1, Ordering::Relaxed) + 1;
        let corrections = params.corrections(t);
        let cells = self.bucket_cells(bucket);
        for ((cell, &g), out) in cells.iter().zip(grad).zip(direction.iter_mut()) {
            let (m, v) = cell.update(|m, v| params.ema(m, v, g));
            *out = params.direction(m, v, corrections);
        }
        Ok(t)
    }

    fn snapshot(&self, bucket: usize, m: &mut [f32], v: &mut [f32]) -> Result<u64, Error> {
        table::check_bucket(self.buckets(), bucket)?;
        table::check_len(self.dim, m.len())?;
        table::check_len(self.dim, v.len())?;
        let t = self.steps[bucket].load(Ordering::Relaxed);
        for ((cell, m), v) in self.bucket_cells(bucket).iter().zip(m).zip(v) {
            (*m, *v) = cell.load();
        }
        Ok(t)
    }

    fn memory_bytes(&self) -> usize {
        size_of_val(&*self.cells) + size_of_val(&*self.steps)
    }
}
