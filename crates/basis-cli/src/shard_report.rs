//! The record of a row-sharded run (`--shard rows`): per-rank figures and
//! their summary, part of every `RunResult` (`shard/report.rs` gathers it),
//! and the warning a skewed id stream earns.

use serde::Serialize;

/// One rank's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct RankReport {
    /// The rank.
    pub(crate) rank: usize,
    /// Rows this rank owns.
    pub(crate) rows: u64,
    /// Bytes sent by the sparse exchanges (ids, rows, gradients, evaluation).
    pub(crate) bytes_sent_sparse: u64,
    /// Bytes sent by the dense 1-bit Adam all-reduces.
    pub(crate) bytes_sent_dense: u64,
    /// Resident set size of the process at the end (`VmRSS`; under
    /// `LocalComm` all ranks share one process, so they report the same).
    pub(crate) rss_bytes: u64,
    /// Peak resident set (`VmHWM`) of the process.
    pub(crate) peak_rss_bytes: u64,
    /// Optimizer state bytes (without scratch buffers).
    pub(crate) state_bytes: u64,
    /// Bytes of the shard's id index (its hash map).
    pub(crate) index_bytes: u64,
    /// Bytes of the shard's row values at their stored width
    /// (`--row-precision`), capacity included.
    pub(crate) row_bytes: u64,
    /// Ids this rank served as an owner in training steps (every rank's
    /// requests, summed over steps): the rows it looked up, returned and
    /// stepped.
    pub(crate) ids_served: u64,
    /// Rows this rank freed (`--evict-ttl`, `--evict-capacity`).
    pub(crate) rows_evicted: u64,
    /// Gradient rows this rank dropped because their id had no row yet
    /// (`--admit-min-count`, `--admit-prob`), one per requesting rank and step.
    pub(crate) grads_dropped: u64,
}

/// The sharded run's per-rank figures and their summary.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct ShardReport {
    /// Rank by rank.
    pub(crate) ranks: Vec<RankReport>,
    /// Most rows on one rank over the mean (1 = perfectly even; `P` = all
    /// rows on one rank).
    pub(crate) row_skew: f64,
    /// Most ids served by one rank over the mean (the request load; 1 =
    /// even, `P` = one rank serves every request).
    pub(crate) served_skew: f64,
    /// All optimizer state over all rows.
    pub(crate) state_bytes_per_row: f64,
    /// All index bytes over all rows.
    pub(crate) index_bytes_per_row: f64,
    /// How rows are stored (`--row-precision`: `f32`, `bf16`, `f16`).
    pub(crate) row_precision: &'static str,
    /// All row-value bytes over all rows (at the stored width).
    pub(crate) row_bytes_per_row: f64,
    /// Rows over all ranks.
    pub(crate) rows: u64,
    /// Rows freed by eviction over all ranks.
    pub(crate) rows_evicted: u64,
    /// Gradient rows dropped (ids not admitted yet) over all ranks.
    pub(crate) grads_dropped: u64,
    /// Seconds spent in training steps (evaluation excluded).
    pub(crate) train_secs: f64,
    /// Training examples per second over all ranks (epochs × examples /
    /// `train_secs`).
    pub(crate) examples_per_sec: f64,
}

/// Row or request skew above which a run warns: one rank then holds or
/// serves half as much again as the mean, and the job runs at that rank's
/// pace (with the even hash, measured skews are 1.00–1.02). One-choice
/// BASIS places whole buckets, so its balance is as fine as `B/P` buckets
/// per rank allow: 1.01–1.02 at 71 buckets (synthetic, P = 2…4), 1.36 at
/// 6 buckets over 4 ranks (MovieLens-100k), and a rank past the last bucket
/// (`B < P`) holds nothing, which this warning then reports.
pub(crate) const SKEW_WARNING: f64 = 1.5;

impl ShardReport {
    /// A one-line warning when the rows or the requests are skewed beyond
    /// [`SKEW_WARNING`] (naming the busiest rank and its share), else `None`.
    pub(crate) fn skew_warning(&self) -> Option<String> {
        if self.row_skew <= SKEW_WARNING && self.served_skew <= SKEW_WARNING {
            return None;
        }
        let busiest = self.ranks.iter().max_by_key(|r| (r.ids_served, r.rows))?;
        let served: u64 = self.ranks.iter().map(|r| r.ids_served).sum();
        let pct = |x: u64, of: u64| 100.0 * x as f64 / of.max(1) as f64;
        Some(format!(
            "warning: skewed id stream over {} ranks: row skew {:.2}, request skew {:.2} \
             (max/mean, warning above {SKEW_WARNING}); rank {} owns {:.1} % of the rows \
             and served {:.1} % of the ids requested; the job runs at its pace",
            self.ranks.len(),
            self.row_skew,
            self.served_skew,
            busiest.rank,
            pct(busiest.rows, self.rows),
            pct(busiest.ids_served, served),
        ))
    }
}
