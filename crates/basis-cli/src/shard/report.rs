//! What a sharded run reports per rank (rows, ids served, bytes sent split
//! sparse and dense, resident memory, state and index bytes per row),
//! gathered to every rank, the warning a skewed id stream earns, and the
//! model checksum over all shards.

use super::Rank;
use comm_traits::Communicator;
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
    /// Ids this rank served as an owner in training steps (every rank's
    /// requests, summed over steps): the rows it looked up, returned and
    /// stepped.
    pub(crate) ids_served: u64,
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
    /// Rows over all ranks.
    pub(crate) rows: u64,
    /// Seconds spent in training steps (evaluation excluded).
    pub(crate) train_secs: f64,
    /// Training examples per second over all ranks (epochs × examples /
    /// `train_secs`).
    pub(crate) examples_per_sec: f64,
}

/// `VmRSS` of this process in bytes (0 where `/proc` is missing).
pub(crate) fn rss_bytes() -> u64 {
    status_kb("VmRSS:")
}

/// A `/proc/self/status` line in bytes (0 where `/proc` is missing).
fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

const FIELDS: usize = 8;

/// Row or request skew above which a run warns: one rank then holds or
/// serves half as much again as the mean, and the job runs at that rank's
/// pace (with the even hash, measured skews are 1.00–1.02). One-choice
/// BASIS places whole buckets, so its balance is as fine as `B/P` buckets
/// per rank allow: 1.01–1.02 at 71 buckets (synthetic, P = 2…4), 1.36 at
/// 6 buckets over 4 ranks (MovieLens-100k), and a rank past the last bucket
/// (`B < P`) holds nothing, which this warning then reports.
pub(crate) const SKEW_WARNING: f64 = 1.5;

/// Most over mean of `xs` (1 = even; 0 rows everywhere counts as even).
fn skew(xs: impl Iterator<Item = u64> + Clone) -> f64 {
    let (n, total) = xs.clone().fold((0u64, 0u64), |(n, t), x| (n + 1, t + x));
    let max = xs.max().unwrap_or(0);
    if total == 0 {
        1.0
    } else {
        max as f64 * n as f64 / total as f64
    }
}

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

/// All-gather every rank's figures.
pub(crate) fn gather(comm: &mut dyn Communicator, me: &Rank) -> Result<ShardReport, String> {
    let mem = me.table.memory();
    let stats = me.table.stats();
    let mine: [u64; FIELDS] = [
        mem.rows,
        stats.bytes_sent,
        me.dense_bytes,
        rss_bytes(),
        mem.state_bytes as u64,
        mem.index_bytes as u64,
        status_kb("VmHWM:"),
        stats.ids_served,
    ];
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut all = vec![0u8; bytes.len() * comm.size()];
    comm.all_gather(&bytes, &mut all)
        .map_err(|e| format!("rank {}: gathering the report: {e}", comm.rank()))?;
    let ranks: Vec<RankReport> = all
        .chunks_exact(8 * FIELDS)
        .enumerate()
        .map(|(rank, c)| {
            let f = |k: usize| u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
            RankReport {
                rank,
                rows: f(0),
                bytes_sent_sparse: f(1),
                bytes_sent_dense: f(2),
                rss_bytes: f(3),
                state_bytes: f(4),
                index_bytes: f(5),
                peak_rss_bytes: f(6),
                ids_served: f(7),
            }
        })
        .collect();
    let rows: u64 = ranks.iter().map(|r| r.rows).sum();
    let per_row = |x: u64| x as f64 / rows.max(1) as f64;
    Ok(ShardReport {
        row_skew: skew(ranks.iter().map(|r| r.rows)),
        served_skew: skew(ranks.iter().map(|r| r.ids_served)),
        state_bytes_per_row: per_row(ranks.iter().map(|r| r.state_bytes).sum()),
        index_bytes_per_row: per_row(ranks.iter().map(|r| r.index_bytes).sum()),
        ranks,
        rows,
        train_secs: 0.0,
        examples_per_sec: 0.0,
    })
}

/// CRC-32 over every rank's shard checksum `mine` (in rank order) and the
/// dense parameters: equal iff the runs are bit-identical (same `P`).
pub(crate) fn model_crc(
    comm: &mut dyn Communicator,
    mine: u32,
    dense: &[f32],
) -> Result<u32, String> {
    let mut all = vec![0u8; 4 * comm.size()];
    comm.all_gather(&mine.to_le_bytes(), &mut all)
        .map_err(|e| format!("rank {}: {e}", comm.rank()))?;
    let mut h = crc32fast::Hasher::new();
    h.update(&all);
    for x in dense {
        h.update(&x.to_le_bytes());
    }
    Ok(h.finalize())
}
