//! The locked moment table: buckets spread over `S` mutex-guarded stripes
//! (bucket `b` lives in stripe `b mod S`), each update holds its stripe's lock.
//!
//! Costs one lock per row update instead of `d` CASes, and gives more: a
//! [`snapshot`](MomentTable::snapshot) sees a whole bucket (`t_b`, every
//! `M_bj`, every `V_bj`) from the same set of updates. Memory ordering comes
//! from the mutex (acquire on lock, release on unlock).

use crate::Error;
use crate::sync::Mutex;
use crate::table::{self, MomentParams, MomentTable};

/// One stripe: the step counts and `[M | V]` slots of its buckets.
#[derive(Debug)]
struct Stripe {
    steps: Vec<u64>,
    /// Slot `k` (bucket `k·S + s`) is `moments[2dk .. 2dk+d]` = M, then d of V.
    moments: Vec<f32>,
}

/// Hogwild table of bucket moments behind striped locks.
///
/// ```
/// use basis_rayon::{MomentTable, StripedMomentTable};
///
/// let table = StripedMomentTable::new(4, 2)?;
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| table.accumulate(3, &[1.0, -2.0]).unwrap());
///     }
/// });
/// let (mut m, mut v) = ([0.0; 2], [0.0; 2]);
/// assert_eq!(table.snapshot(3, &mut m, &mut v)?, 4);
/// assert_eq!((m, v), ([4.0, -8.0], [4.0, 16.0]));
/// # Ok::<(), basis_rayon::Error>(())
/// ```
#[derive(Debug)]
pub struct StripedMomentTable {
    buckets: usize,
    dim: usize,
    stripes: Box<[Mutex<Stripe>]>,
}

impl StripedMomentTable {
    /// Stripes used by [`new`](Self::new) (or fewer, one per bucket): enough
    /// that two threads on distinct buckets rarely share a lock.
    pub const DEFAULT_STRIPES: usize = 1024;

    /// A zeroed table with `min(buckets, DEFAULT_STRIPES)` stripes.
    ///
    /// Fails with `BadShape` when `buckets` or `dim` is zero or too large.
    pub fn new(buckets: usize, dim: usize) -> Result<Self, Error> {
        Self::with_stripes(buckets, dim, buckets.min(Self::DEFAULT_STRIPES))
    }

    /// A zeroed table with `stripes` locks (clamped to `buckets`).
    ///
    /// Fails with `BadShape` as [`new`](Self::new), `InvalidParams` when
    /// `stripes` is 0.
    pub fn with_stripes(buckets: usize, dim: usize, stripes: usize) -> Result<Self, Error> {
        table::cells(buckets, dim)?;
        if stripes == 0 {
            return Err(Error::InvalidParams);
        }
        let stripes = stripes.min(buckets);
        let make = |s: usize| {
            let slots = (buckets - s).div_ceil(stripes);
            Mutex::new(Stripe {
                steps: vec![0; slots],
                moments: vec![0.0; slots * 2 * dim],
            })
        };
        Ok(Self {
            buckets,
            dim,
            stripes: (0..stripes).map(make).collect(),
        })
    }

    /// Runs `f(t_b, M_b, V_b)` with bucket `bucket`'s stripe locked.
    fn with_bucket<R>(
        &self,
        bucket: usize,
        f: impl FnOnce(&mut u64, &mut [f32], &mut [f32]) -> R,
    ) -> R {
        let n = self.stripes.len();
        let (stripe, slot) = (bucket % n, bucket / n);
        // A poisoned lock only means another thread panicked mid-update of
        // plain floats; the data is still floats, so carry on with it.
        let mut guard = self.stripes[stripe]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Stripe { steps, moments } = &mut *guard;
        let (m, v) = moments[slot * 2 * self.dim..(slot + 1) * 2 * self.dim].split_at_mut(self.dim);
        f(&mut steps[slot], m, v)
    }
}

impl MomentTable for StripedMomentTable {
    fn buckets(&self) -> usize {
        self.buckets
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn accumulate(&self, bucket: usize, grad: &[f32]) -> Result<u64, Error> {
        table::check_update(self.buckets, self.dim, bucket, grad)?;
        Ok(self.with_bucket(bucket, |t, m, v| {
            *t += 1;
            for ((m, v), &g) in m.iter_mut().zip(v.iter_mut()).zip(grad) {
                *m += g;
                *v += g * g;
            }
            *t
        }))
    }

    fn adam_update(
        &self,
        bucket: usize,
        grad: &[f32],
        params: &MomentParams,
        direction: &mut [f32],
    ) -> Result<u64, Error> {
        params.validate()?;
        table::check_update(self.buckets, self.dim, bucket, grad)?;
        table::check_len(self.dim, direction.len())?;
        Ok(self.with_bucket(bucket, |t, m, v| {
            *t += 1;
            let corrections = params.corrections(*t);
            for (((m, v), &g), out) in m
                .iter_mut()
                .zip(v.iter_mut())
                .zip(grad)
                .zip(direction.iter_mut())
            {
                (*m, *v) = params.ema(*m, *v, g);
                *out = params.direction(*m, *v, corrections);
            }
            *t
        }))
    }

    fn snapshot(&self, bucket: usize, m: &mut [f32], v: &mut [f32]) -> Result<u64, Error> {
        table::check_bucket(self.buckets, bucket)?;
        table::check_len(self.dim, m.len())?;
        table::check_len(self.dim, v.len())?;
        Ok(self.with_bucket(bucket, |t, bm, bv| {
            m.copy_from_slice(bm);
            v.copy_from_slice(bv);
            *t
        }))
    }

    fn memory_bytes(&self) -> usize {
        let per_stripe = |s: &Mutex<Stripe>| {
            let guard = s.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            size_of_val(&*guard.steps) + size_of_val(&*guard.moments)
        };
        size_of_val(&*self.stripes) + self.stripes.iter().map(per_stripe).sum::<usize>()
    }
}
