//! The group report and checksum against each rank's own figures
//! (`memory`, `stats`, `checksum`), gathered by hand.
#![allow(clippy::unwrap_used, missing_docs)]

use basis_core::Sgd;
use basis_shard::{GroupReport, OwnerRule, RankReport, RowInit, ShardedTable, TableConfig};
use basis_std::local::LocalComm;
use comm_traits::Communicator;

const DIM: usize = 3;

/// A table on `p` ranks under `owner`, after two steps of ids `0..30`
/// requested by every rank; every rank's report, own figures, checksums.
#[allow(clippy::type_complexity)]
fn run(
    p: usize,
    owner: OwnerRule,
) -> Vec<(
    GroupReport,
    basis_shard::MemoryUse,
    basis_shard::TableStats,
    u64,
    [u32; 2],
)> {
    LocalComm::run(p, |mut c| {
        let config =
            TableConfig::new(DIM, owner.clone(), c.rank()).with_init(RowInit::uniform(1, 0.1));
        let mut t = ShardedTable::new(config, Sgd::new(DIM, 0.5).unwrap()).unwrap();
        for step in 0..2u64 {
            let ids: Vec<u64> = (0..30).map(|i| i * (step + 1)).collect();
            let b = t.lookup(&mut c, &ids).unwrap();
            let grads = vec![0.25f32; b.rows.len()];
            t.apply(&mut c, &b, &grads).unwrap();
        }
        let dense_bytes = 100 + c.rank() as u64;
        let report = t.report(&mut c, dense_bytes).unwrap();
        let sums = [
            t.group_checksum(&mut c, &[1.0, 2.0]).unwrap(),
            t.group_checksum(&mut c, &[1.0, 2.5]).unwrap(),
        ];
        (report, t.memory(), t.stats(), t.checksum(), sums)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn every_rank_gets_every_ranks_figures_and_their_summary() {
    let p = 3;
    let out = run(p, OwnerRule::hashed(p, 5).unwrap());
    let expect: Vec<RankReport> = out
        .iter()
        .enumerate()
        .map(|(rank, (r, mem, stats, _, _))| {
            let me = &r.ranks[rank];
            RankReport {
                rank,
                rows: mem.rows,
                bytes_sent_sparse: stats.bytes_sent,
                bytes_sent_dense: 100 + rank as u64,
                // The process's: read by each rank at its own moment.
                rss_bytes: me.rss_bytes,
                peak_rss_bytes: me.peak_rss_bytes,
                state_bytes: mem.state_bytes as u64,
                index_bytes: mem.index_bytes as u64,
                row_bytes: mem.row_bytes as u64,
                ids_served: stats.ids_served,
                rows_evicted: 0,
                grads_dropped: 0,
            }
        })
        .collect();
    let rows: u64 = expect.iter().map(|r| r.rows).sum();
    assert_eq!(rows, 45, "ids 0..30 and the even ones up to 58");
    let max = expect.iter().map(|r| r.rows).max().unwrap();
    for (r, _, _, _, _) in &out {
        assert_eq!(r.ranks.len(), p);
        for (got, want) in r.ranks.iter().zip(&expect) {
            assert_eq!(
                RankReport {
                    rss_bytes: want.rss_bytes,
                    peak_rss_bytes: want.peak_rss_bytes,
                    ..got.clone()
                },
                *want
            );
        }
        assert_eq!(r.rows, rows);
        assert!((r.row_skew - max as f64 * p as f64 / rows as f64).abs() < 1e-12);
        let index: u64 = expect.iter().map(|r| r.index_bytes).sum();
        assert!((r.index_bytes_per_row - index as f64 / rows as f64).abs() < 1e-12);
        assert_eq!(r.row_precision, "f32");
    }
    if cfg!(target_os = "linux") {
        assert!(out[0].0.ranks[0].rss_bytes > 0);
    }
    // The group checksum: the same on every rank, over the ranks' own
    // checksums in rank order and the dense values.
    let mut h = crc32fast::Hasher::new();
    for (_, _, _, own, _) in &out {
        h.update(&own.to_le_bytes());
    }
    for x in [1.0f32, 2.0] {
        h.update(&x.to_le_bytes());
    }
    let want = h.finalize();
    for (_, _, _, _, sums) in &out {
        assert_eq!(sums[0], want);
        assert_ne!(sums[1], want, "the dense values count");
    }
}

#[test]
fn all_rows_on_one_rank_earn_a_warning_naming_it_and_an_even_spread_none() {
    let out = run(3, OwnerRule::custom(3, 0, |_| 1).unwrap());
    let r = &out[2].0;
    assert_eq!((r.ranks[1].rows, r.rows), (45, 45));
    assert!((r.row_skew - 3.0).abs() < 1e-12 && (r.served_skew - 3.0).abs() < 1e-12);
    let w = r.skew_warning().unwrap();
    assert!(
        w.contains("rank 1 owns 100.0 %") && w.contains("row skew 3.00"),
        "{w}"
    );
    let even = GroupReport::of_ranks(
        (0..4)
            .map(|rank| RankReport {
                rank,
                rows: 10,
                ids_served: 7,
                ..out[0].0.ranks[0].clone()
            })
            .collect(),
        "bf16",
    );
    assert_eq!((even.row_skew, even.served_skew), (1.0, 1.0));
    assert_eq!(even.skew_warning(), None);
    let nothing = GroupReport::of_ranks(Vec::new(), "f32");
    assert_eq!((nothing.row_skew, nothing.rows), (1.0, 0));
}
