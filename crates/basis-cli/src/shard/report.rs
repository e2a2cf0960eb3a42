//! Gathering what a sharded run reports per rank (rows, ids served, bytes
//! sent split sparse and dense, resident memory, state and index bytes per
//! row; the record is `crate::shard_report`) to every rank, and the model
//! checksum over all shards.

use super::Rank;
use crate::shard_report::{RankReport, ShardReport};
use comm_traits::Communicator;

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

const FIELDS: usize = 11;

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
        stats.rows_evicted,
        stats.grads_dropped,
        mem.row_bytes as u64,
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
                rows_evicted: f(8),
                grads_dropped: f(9),
                row_bytes: f(10),
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
        row_precision: me.table.precision().name(),
        row_bytes_per_row: per_row(ranks.iter().map(|r| r.row_bytes).sum()),
        rows_evicted: ranks.iter().map(|r| r.rows_evicted).sum(),
        grads_dropped: ranks.iter().map(|r| r.grads_dropped).sum(),
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
