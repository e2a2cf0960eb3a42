//! [`GroupReport`]: what every rank of a sharded table holds and served
//! (rows, ids served, bytes sent, resident memory, state, index and row
//! bytes), all-gathered to every rank with their summary (skews, bytes per
//! row), and the warning a skewed id stream earns; [`ShardedTable::group_checksum`],
//! one checksum of the whole model over the ranks. With the `serde`
//! feature the reports serialize (a runtime's JSON record).

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use basis_core::SparseOptimizer;
use comm_traits::Communicator;

use crate::{ShardError, ShardedTable};

/// One rank's figures.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Rows this rank owns.
    pub rows: u64,
    /// Bytes sent by the table's exchanges (ids, rows, gradients, evaluation).
    pub bytes_sent_sparse: u64,
    /// Bytes sent by the caller's own (dense) exchanges, as passed to
    /// [`ShardedTable::report`].
    pub bytes_sent_dense: u64,
    /// Resident set size of the process at the end (`VmRSS`; 0 without
    /// `/proc`; under `LocalComm` all ranks share one process, so they
    /// report the same).
    pub rss_bytes: u64,
    /// Peak resident set (`VmHWM`) of the process (0 without `/proc`).
    pub peak_rss_bytes: u64,
    /// Optimizer state bytes (without scratch buffers).
    pub state_bytes: u64,
    /// Bytes of the shard's id index.
    pub index_bytes: u64,
    /// Bytes of the shard's row values at their stored width, capacity
    /// included.
    pub row_bytes: u64,
    /// Ids this rank served as an owner in training steps (every rank's
    /// requests, summed over steps): the rows it looked up, returned and
    /// stepped.
    pub ids_served: u64,
    /// Rows this rank freed ([`Eviction`](crate::Eviction)).
    pub rows_evicted: u64,
    /// Gradient rows this rank dropped because their id had no row yet
    /// ([`Admission`](crate::Admission)), one per requesting rank and step.
    pub grads_dropped: u64,
}

/// Every rank's figures and their summary.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupReport {
    /// Rank by rank.
    pub ranks: Vec<RankReport>,
    /// Most rows on one rank over the mean (1 = perfectly even; `P` = all
    /// rows on one rank; no rows anywhere counts as even).
    pub row_skew: f64,
    /// Most ids served by one rank over the mean (the request load; 1 =
    /// even, `P` = one rank serves every request).
    pub served_skew: f64,
    /// All optimizer state over all rows.
    pub state_bytes_per_row: f64,
    /// All index bytes over all rows.
    pub index_bytes_per_row: f64,
    /// How rows are stored ([`RowPrecision::name`](crate::RowPrecision::name)).
    pub row_precision: &'static str,
    /// All row-value bytes over all rows (at the stored width).
    pub row_bytes_per_row: f64,
    /// Rows over all ranks.
    pub rows: u64,
    /// Rows freed by eviction over all ranks.
    pub rows_evicted: u64,
    /// Gradient rows dropped (ids not admitted yet) over all ranks.
    pub grads_dropped: u64,
    /// Seconds the caller spent in training steps: 0 from
    /// [`ShardedTable::report`], for the caller to set.
    pub train_secs: f64,
    /// Training examples per second over all ranks: 0 from
    /// [`ShardedTable::report`], for the caller to set.
    pub examples_per_sec: f64,
}

/// Row or request skew above which [`GroupReport::skew_warning`] warns:
/// one rank then holds or serves half as much again as the mean, and the
/// job runs at that rank's pace (with the even hash, measured skews are
/// 1.00–1.02). One-choice BASIS places whole buckets, so its balance is as
/// fine as `B/P` buckets per rank allow: 1.01–1.02 at 71 buckets
/// (synthetic, P = 2…4), 1.36 at 6 buckets over 4 ranks (MovieLens-100k),
/// and a rank past the last bucket (`B < P`) holds nothing, which the
/// warning then reports.
pub const SKEW_WARNING: f64 = 1.5;

impl GroupReport {
    /// A one-line warning when the rows or the requests are skewed beyond
    /// [`SKEW_WARNING`] (naming the busiest rank and its share), else `None`.
    pub fn skew_warning(&self) -> Option<String> {
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

    /// The report of `ranks` (in rank order, `rank` fields set), with its
    /// summary; `row_precision` names the rows' storage.
    pub fn of_ranks(ranks: Vec<RankReport>, row_precision: &'static str) -> Self {
        let rows: u64 = ranks.iter().map(|r| r.rows).sum();
        let per_row = |f: fn(&RankReport) -> u64| {
            ranks.iter().map(f).sum::<u64>() as f64 / rows.max(1) as f64
        };
        Self {
            row_skew: skew(ranks.iter().map(|r| r.rows)),
            served_skew: skew(ranks.iter().map(|r| r.ids_served)),
            state_bytes_per_row: per_row(|r| r.state_bytes),
            index_bytes_per_row: per_row(|r| r.index_bytes),
            row_precision,
            row_bytes_per_row: per_row(|r| r.row_bytes),
            rows_evicted: ranks.iter().map(|r| r.rows_evicted).sum(),
            grads_dropped: ranks.iter().map(|r| r.grads_dropped).sum(),
            ranks,
            rows,
            train_secs: 0.0,
            examples_per_sec: 0.0,
        }
    }
}

/// Most over mean of `xs` (1 = even; all zero counts as even).
fn skew(xs: impl Iterator<Item = u64> + Clone) -> f64 {
    let (n, total) = xs.clone().fold((0u64, 0u64), |(n, t), x| (n + 1, t + x));
    let max = xs.max().unwrap_or(0);
    if total == 0 {
        1.0
    } else {
        max as f64 * n as f64 / total as f64
    }
}

/// `(VmRSS, VmHWM)` of this process in bytes, from `/proc/self/status`
/// (0 where it is missing).
pub fn process_memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// Words of a [`RankReport`] on the wire (all but the rank).
const FIELDS: usize = 11;

impl<O: SparseOptimizer> ShardedTable<O> {
    /// Collective: every rank's figures, all-gathered (every rank gets the
    /// same report). `dense_bytes` is what the caller's own (dense)
    /// exchanges sent on this rank; memory is the process's
    /// ([`process_memory`]).
    ///
    /// # Errors
    /// [`ShardError::Comm`] when the all-gather fails.
    pub fn report(
        &self,
        comm: &mut dyn Communicator,
        dense_bytes: u64,
    ) -> Result<GroupReport, ShardError> {
        let (mem, stats, (rss, peak)) = (self.memory(), self.stats(), process_memory());
        let mine: [u64; FIELDS] = [
            mem.rows,
            stats.bytes_sent,
            dense_bytes,
            rss,
            peak,
            mem.state_bytes as u64,
            mem.index_bytes as u64,
            mem.row_bytes as u64,
            stats.ids_served,
            stats.rows_evicted,
            stats.grads_dropped,
        ];
        let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut all = vec![0u8; bytes.len() * comm.size()];
        comm.all_gather(&bytes, &mut all)?;
        let ranks = all
            .chunks_exact(8 * FIELDS)
            .enumerate()
            .map(|(rank, c)| {
                let f =
                    |k: usize| u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
                RankReport {
                    rank,
                    rows: f(0),
                    bytes_sent_sparse: f(1),
                    bytes_sent_dense: f(2),
                    rss_bytes: f(3),
                    peak_rss_bytes: f(4),
                    state_bytes: f(5),
                    index_bytes: f(6),
                    row_bytes: f(7),
                    ids_served: f(8),
                    rows_evicted: f(9),
                    grads_dropped: f(10),
                }
            })
            .collect();
        Ok(GroupReport::of_ranks(ranks, self.precision().name()))
    }

    /// Collective: CRC-32 over every rank's [`checksum`](Self::checksum)
    /// (in rank order) and then the caller's replicated `dense` values:
    /// equal on two runs of the same group size iff they hold the same
    /// model, bit for bit.
    ///
    /// # Errors
    /// [`ShardError::Comm`] when the all-gather fails.
    pub fn group_checksum(
        &self,
        comm: &mut dyn Communicator,
        dense: &[f32],
    ) -> Result<u32, ShardError> {
        let mut all = vec![0u8; 8 * comm.size()];
        comm.all_gather(&self.checksum().to_le_bytes(), &mut all)?;
        let mut h = crc32fast::Hasher::new();
        h.update(&all);
        for x in dense {
            h.update(&x.to_le_bytes());
        }
        Ok(h.finalize())
    }
}
