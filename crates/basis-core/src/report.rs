//! What a step did ([`StepReport`]), what the optimizer holds ([`MemoryReport`])
//! and what to watch while training ([`Diagnostics`]).

use alloc::vec::Vec;

/// The outcome of one successful step.
///
/// ```
/// use basis_core::{Basis, BasisConfig, DenseTable, OneChoice, RowIndex, SparseOptimizer};
///
/// let config = BasisConfig::row_scaled(2).row_index(RowIndex::Dense { rows: 8 }).build()?;
/// let mut opt = Basis::new(config, OneChoice::new(4, 1)?)?;
/// let mut table = vec![0.0f32; 8 * 2];
/// // Row 3 twice (its gradients are summed) and row 5 once.
/// let grads = [1.0, 1.0, 1.0, 1.0, -1.0, 0.5];
/// let report = opt.step(&[3, 3, 5], &grads, &mut DenseTable::new(&mut table, 2)?)?;
/// assert_eq!(report.rows_updated, 2);
/// assert_eq!(report.rows_skipped_nonfinite, 0);
/// assert!((1..=2).contains(&report.buckets_touched));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct StepReport {
    /// Distinct rows updated (duplicate ids count once).
    pub rows_updated: usize,
    /// Distinct rows skipped because their summed gradient was non-finite.
    pub rows_skipped_nonfinite: usize,
    /// Distinct shared buckets written (0 for optimizers without buckets).
    pub buckets_touched: usize,
}

/// Exact bytes of optimizer state held, broken down. The caller's embedding
/// table is never included. Every figure counts allocated capacity, so it is
/// what the allocator handed out, not an estimate.
///
/// ```
/// use basis_core::{Basis, BasisConfig, OneChoice, RowIndex};
///
/// let config = BasisConfig::row_scaled(16).row_index(RowIndex::Dense { rows: 1000 }).build()?;
/// let opt = Basis::new(config, OneChoice::new(64, 1)?)?;
/// let memory = opt.memory();
/// assert_eq!(memory.total_bytes, memory.fixed_bytes() + memory.per_row_bytes() + memory.scratch);
/// assert_eq!(memory.row_index, 0); // dense rows need no id index
/// // Far below Adam's 2·d f32 per row (128 B/row here).
/// assert!(memory.bytes_per_row(1000) < 16.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct MemoryReport {
    /// Sum of all parts below.
    pub total_bytes: usize,
    /// Shared bucket tables (`M`, `V` or the `RowScaled` profile).
    pub shared_tables: usize,
    /// Per-bucket step counts `t_b`.
    pub step_counts: usize,
    /// Decode tables a 1-byte code owns (0 with the default ranges, whose
    /// tables are shared `static`s; 1 KiB per non-default code). Fixed.
    pub code_tables: usize,
    /// Per-row state values: BASIS scalars or `G_i`, Adam's `m`/`v`, AdaGrad's `G`.
    pub scalars: usize,
    /// Per-row update counters (frequency-aware scalar learning rate only).
    pub row_counters: usize,
    /// Hash-map index from sparse ids to state slots (0 for dense rows).
    pub row_index: usize,
    /// What the bucketer remembers (e.g. d-choice decisions).
    pub bucket_map: usize,
    /// Step buffers kept between steps to avoid re-allocating them
    /// (`O(batch·d)`, independent of the number of rows; 0 before the first step).
    pub scratch: usize,
    /// Rows that currently have a state slot.
    pub rows_with_state: u64,
}

impl MemoryReport {
    /// Adds up the parts into `total_bytes`.
    pub(crate) fn finish(mut self) -> Self {
        self.total_bytes = self.shared_tables
            + self.step_counts
            + self.code_tables
            + self.scalars
            + self.row_counters
            + self.row_index
            + self.bucket_map
            + self.scratch;
        self
    }

    /// State whose size does not grow with the rows: shared tables, step
    /// counts and owned code tables (they grow with the buckets `B`).
    /// Report it apart from [`per_row_bytes`](Self::per_row_bytes), or a
    /// small table's bytes/row mostly measure this.
    pub fn fixed_bytes(&self) -> usize {
        self.shared_tables + self.step_counts + self.code_tables
    }

    /// State that grows with the rows: values, counters, the sparse index
    /// and the bucketer's remembered choices.
    pub fn per_row_bytes(&self) -> usize {
        self.scalars + self.row_counters + self.row_index + self.bucket_map
    }

    /// `total_bytes / rows` (as f64; `rows == 0` gives infinity).
    pub fn bytes_per_row(&self, rows: u64) -> f64 {
        self.total_bytes as f64 / rows as f64
    }
}

/// Number of bins of [`Diagnostics::scalar_histogram`].
pub const HISTOGRAM_BINS: usize = 16;

/// Numbers worth watching during training: the scalar
/// distribution, bucket loads and update counts, non-finite rows skipped.
///
/// ```
/// use basis_core::{Basis, BasisConfig, DenseTable, HISTOGRAM_BINS, OneChoice, RowIndex};
/// use basis_core::SparseOptimizer;
///
/// let config = BasisConfig::row_scaled(2).row_index(RowIndex::Dense { rows: 8 }).build()?;
/// let mut opt = Basis::new(config, OneChoice::new(4, 1)?)?;
/// let mut table = vec![0.0f32; 8 * 2];
/// opt.step(&[1, 6], &[0.5, -0.5, 2.0, 1.0], &mut DenseTable::new(&mut table, 2)?)?;
/// let d = opt.diagnostics();
/// assert_eq!(d.steps, 1);
/// assert_eq!(d.histogram_edges.len(), HISTOGRAM_BINS + 1);
/// assert_eq!(d.bucket_loads.len(), 4);
/// assert_eq!(d.nonfinite_rows, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Diagnostics {
    /// Rows with a stored scalar (dense: every row of the range; none when
    /// scalars are frozen, `scalar_lr = 0` outside `RowScaled`).
    pub rows: u64,
    /// Histogram of the row scalars over [`Self::histogram_edges`]
    /// (log-spaced; `RowScaled`: of `log₂ G_i` over the code range).
    pub scalar_histogram: [u64; HISTOGRAM_BINS],
    /// `HISTOGRAM_BINS + 1` bin edges of the histogram.
    pub histogram_edges: [f32; HISTOGRAM_BINS + 1],
    /// Fraction of rows whose scalar sits at the lower clip bound.
    pub fraction_at_min: f64,
    /// Fraction of rows whose scalar sits at the upper clip bound.
    pub fraction_at_max: f64,
    /// Mean of the row scalars.
    pub scalar_mean: f64,
    /// Distinct rows seen per bucket (rows with state, mapped through the bucketer).
    pub bucket_loads: Vec<u32>,
    /// Updates per bucket (its step count `t_b`).
    pub bucket_updates: Vec<u32>,
    /// Rows skipped as non-finite since creation.
    pub nonfinite_rows: u64,
    /// Steps taken.
    pub steps: u64,
}
