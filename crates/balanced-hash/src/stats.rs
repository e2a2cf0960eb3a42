//! Load statistics of a bucket assignment.

use alloc::vec::Vec;

use crate::{Bucketer, HashError};

/// Histograms have at most this many bins; wider load ranges use wider bins.
const MAX_HISTOGRAM_BINS: u64 = 1024;

/// Summary of bucket loads: extremes, balance and fit to the uniform law.
///
/// ```
/// use balanced_hash::LoadStats;
/// let s = LoadStats::from_loads(&[3, 1, 0, 4])?;
/// assert_eq!((s.total, s.max, s.min, s.empty_buckets), (8, 4, 0, 1));
/// assert_eq!(s.mean, 2.0);
/// assert_eq!(s.max_over_mean, 2.0);
/// assert_eq!(s.histogram, vec![1, 1, 0, 1, 1]); // buckets with load 0, 1, 2, 3, 4
/// # Ok::<(), balanced_hash::HashError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoadStats {
    /// Number of buckets `B`.
    pub buckets: usize,
    /// Sum of all loads `N`.
    pub total: u64,
    /// Smallest load.
    pub min: u64,
    /// Largest load.
    pub max: u64,
    /// Mean load `N / B`.
    pub mean: f64,
    /// `max / mean` (1.0 when every load is 0).
    pub max_over_mean: f64,
    /// Buckets with load 0.
    pub empty_buckets: u64,
    /// Pearson's chi-square against the uniform law, `Σ (load − mean)² / mean`
    /// (0.0 when every load is 0). With `B − 1` degrees of freedom; for
    /// independent uniform placement its expectation is ≈ `B − 1`.
    pub chi_square: f64,
    /// `histogram[i]` = number of buckets whose load is in
    /// `[i·bin_width, (i+1)·bin_width)`; covers `0..=max`.
    pub histogram: Vec<u64>,
    /// Width of a histogram bin: 1 while `max < 1024`, then
    /// `ceil((max + 1) / 1024)` so there are at most 1024 bins.
    pub bin_width: u64,
}

impl LoadStats {
    /// Statistics of the given per-bucket loads.
    ///
    /// # Errors
    /// [`HashError::ZeroBuckets`] when `loads` is empty,
    /// [`HashError::AllocationFailed`] if the histogram cannot be allocated.
    pub fn from_loads(loads: &[u64]) -> Result<Self, HashError> {
        if loads.is_empty() {
            return Err(HashError::ZeroBuckets);
        }
        let buckets = loads.len();
        let (mut total, mut min, mut max, mut empty) = (0u64, u64::MAX, 0u64, 0u64);
        for &load in loads {
            total = total.saturating_add(load);
            min = min.min(load);
            max = max.max(load);
            empty += u64::from(load == 0);
        }
        // f64 is the statistic's domain; exactness beyond 2^53 is not needed.
        let mean = total as f64 / buckets as f64;
        let (max_over_mean, chi_square) = if total == 0 {
            (1.0, 0.0)
        } else {
            let ss: f64 = loads
                .iter()
                .map(|&l| {
                    let dev = l as f64 - mean;
                    dev * dev
                })
                .sum();
            (max as f64 / mean, ss / mean)
        };
        let bin_width = (max / MAX_HISTOGRAM_BINS) + 1;
        let bins = usize::try_from(max / bin_width + 1).map_err(|_| HashError::AllocationFailed)?;
        let mut histogram = Vec::new();
        histogram
            .try_reserve_exact(bins)
            .map_err(|_| HashError::AllocationFailed)?;
        histogram.resize(bins, 0);
        for &load in loads {
            // load / bin_width ≤ max / bin_width < bins, which fits in usize.
            histogram[(load / bin_width) as usize] += 1;
        }
        Ok(Self {
            buckets,
            total,
            min,
            max,
            mean,
            max_over_mean,
            empty_buckets: empty,
            chi_square,
            histogram,
            bin_width,
        })
    }

    /// Assigns every key of `keys` with [`Bucketer::assign`] (so d-choice
    /// bucketers choose and remember) and returns the statistics of how many
    /// keys landed in each bucket (a repeated key counts each time).
    ///
    /// # Errors
    /// As [`count_loads`].
    pub fn from_keys<B, I>(bucketer: &mut B, keys: I) -> Result<Self, HashError>
    where
        B: Bucketer + ?Sized,
        I: IntoIterator<Item = u64>,
    {
        Self::from_loads(&count_loads(bucketer, keys)?)
    }

    /// Degrees of freedom of [`LoadStats::chi_square`]: `B − 1`.
    #[must_use]
    pub fn degrees_of_freedom(&self) -> usize {
        self.buckets - 1
    }

    /// `max − mean`: how far the fullest bucket is above the average.
    #[must_use]
    pub fn excess(&self) -> f64 {
        self.max as f64 - self.mean
    }
}

/// Per-bucket key counts after [`Bucketer::assign`]-ing every key of `keys`.
///
/// # Errors
/// [`HashError::ZeroBuckets`] if the bucketer reports 0 buckets,
/// [`HashError::BucketOutOfRange`] if it returns a bucket `≥ buckets()`,
/// [`HashError::AllocationFailed`] if the count table cannot be allocated.
pub fn count_loads<B, I>(bucketer: &mut B, keys: I) -> Result<Vec<u64>, HashError>
where
    B: Bucketer + ?Sized,
    I: IntoIterator<Item = u64>,
{
    let buckets = bucketer.buckets();
    if buckets == 0 {
        return Err(HashError::ZeroBuckets);
    }
    let mut loads = Vec::new();
    loads
        .try_reserve_exact(buckets as usize)
        .map_err(|_| HashError::AllocationFailed)?;
    loads.resize(buckets as usize, 0u64);
    for key in keys {
        let bucket = bucketer.assign(key);
        let slot = loads
            .get_mut(bucket as usize)
            .ok_or(HashError::BucketOutOfRange { bucket, buckets })?;
        *slot += 1;
    }
    Ok(loads)
}
