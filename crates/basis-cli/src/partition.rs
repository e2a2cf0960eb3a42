//! One BASIS bucket table split over the ranks of a row-sharded run, so the
//! sharded run holds exactly the single process's bucket state, partitioned.
//!
//! The single process hashes row `id` into bucket `g(id)` of its one-choice
//! bucketer `g` over `B = buckets_for(rows)` buckets. A sharded run on `P`
//! ranks routes `id` to rank `g(id) mod P` ([`owner`]), so all rows of a
//! bucket live on one rank, and rank `r` numbers its buckets `g(id) div P`
//! ([`Partitioned`]): its local bucket `j` is global bucket `j·P + r`, and it
//! holds `⌈(B − r)/P⌉` of them. Every bucket then sees the same rows, and the
//! same summed gradients, as in the single process. (Signs and rounding
//! bits are keyed by the global id, so they agree too; only `basis-core`'s
//! bf16 bucket tables, which the CLI never builds, round by bucket number.)
//!
//! Only one-choice hashing splits like this. A d-choice bucketer puts a new
//! key in the least loaded of its `d` candidate buckets *as loaded so far*:
//! the candidates may lie on different ranks, and the choice depends on
//! every key seen before, in the order the single process saw them — a
//! global, ordered decision per new key that per-rank state cannot
//! reproduce. So d-choice BASIS, like every optimizer without buckets
//! (exact Adam, row-wise AdaGrad, SGD), keeps `route::hashed_owner` and
//! per-rank state.

use balanced_hash::{Bucketer, BucketerIdentity, OneChoice};

/// The owner rank of `id` on `p` ranks when the global bucketer `g` is
/// partitioned: the rank holding `id`'s bucket.
pub(crate) fn owner(g: &OneChoice, p: usize, id: u64) -> usize {
    g.bucket(id) as usize % p.max(1)
}

/// Rank `rank`'s part of the global one-choice bucketer of a `p`-rank run:
/// global bucket `b` is this rank's local bucket `b / p` when `b % p` is
/// the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Partitioned {
    /// The single process's bucketer.
    global: OneChoice,
    /// Ranks.
    p: u32,
    /// This rank.
    rank: u32,
    /// Local buckets, `max(1, ⌈(B − rank)/p⌉)`.
    buckets: u32,
}

impl Partitioned {
    /// Rank `rank` of `p`'s part of `global`.
    ///
    /// A rank past the last bucket (`B ≤ rank`, a table smaller than the
    /// group) owns no row but still gets one (empty) bucket: a bucketer has
    /// at least one.
    pub(crate) fn new(global: OneChoice, p: usize, rank: usize) -> Result<Self, String> {
        let p32 = u32::try_from(p)
            .ok()
            .filter(|&p| p >= 1)
            .ok_or_else(|| format!("bucket partition over {p} ranks"))?;
        let rank32 = u32::try_from(rank)
            .ok()
            .filter(|&r| r < p32)
            .ok_or_else(|| format!("bucket partition: rank {rank} of {p}"))?;
        let buckets = global.buckets().saturating_sub(rank32).div_ceil(p32).max(1);
        Ok(Self {
            global,
            p: p32,
            rank: rank32,
            buckets,
        })
    }
}

impl Bucketer for Partitioned {
    fn buckets(&self) -> u32 {
        self.buckets
    }

    /// `g(key) / p`. An id this rank does not own (only a custom owner
    /// function, such as the skew test's "everything to rank 0", sends one)
    /// may fall past the last local bucket; it is folded into the last one
    /// so that the step still runs (the state then differs from the single
    /// process's, as any other placement would).
    fn bucket(&self, key: u64) -> u32 {
        (self.global.bucket(key) / self.p).min(self.buckets - 1)
    }

    // `assign` stays the default (`bucket`): one-choice hashing remembers
    // nothing, and `memory_bytes` the default 0 (no table, only the seeded
    // mix), as for `OneChoice` itself.

    /// A custom identity whose seed folds in the global seed, `B`, `p` and
    /// the rank: state exported by one rank of one partition is refused by
    /// any other rank, group size or single process (whose identity is
    /// `KIND_ONE_CHOICE`), even where the local bucket counts agree.
    fn identity(&self) -> BucketerIdentity {
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&self.global.seed().to_le_bytes());
        bytes[8..12].copy_from_slice(&self.global.buckets().to_le_bytes());
        bytes[12..16].copy_from_slice(&self.p.to_le_bytes());
        bytes[16..].copy_from_slice(&self.rank.to_le_bytes());
        BucketerIdentity {
            kind: BucketerIdentity::KIND_CUSTOM,
            choices: 1,
            seed: balanced_hash::murmur3::x64_128(&bytes, 0x9A27)[0],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the obvious reference: every global bucket lands on exactly
    /// one (rank, local bucket), local buckets are dense `0..buckets()` per
    /// rank, and the ranks' bucket counts sum to `B` (plus one empty bucket
    /// per rank past the last bucket).
    #[test]
    fn ranks_partition_the_global_buckets() {
        for b in [1u32, 2, 3, 7, 64, 1001] {
            let g = OneChoice::new(b, 5).unwrap();
            for p in 1..=5usize {
                let parts: Vec<Partitioned> =
                    (0..p).map(|r| Partitioned::new(g, p, r).unwrap()).collect();
                let mut seen = vec![None; b as usize];
                for id in 0..20_000u64 {
                    let gb = g.bucket(id);
                    let r = owner(&g, p, id);
                    let local = parts[r].bucket(id);
                    assert!(local < parts[r].buckets(), "b={b} p={p}");
                    assert_eq!(local * p as u32 + r as u32, gb, "b={b} p={p}");
                    // A global bucket maps to one (rank, local) pair only.
                    let at = &mut seen[gb as usize];
                    assert!(at.is_none_or(|x| x == (r, local)));
                    *at = Some((r, local));
                }
                let held: u32 = (0..p)
                    .map(|r| (b as usize).saturating_sub(r).div_ceil(p) as u32)
                    .sum();
                assert_eq!(held, b);
                for (r, part) in parts.iter().enumerate() {
                    let want = (0..b).filter(|x| *x as usize % p == r).count() as u32;
                    assert_eq!(part.buckets(), want.max(1), "b={b} p={p} r={r}");
                }
            }
        }
    }

    #[test]
    fn identities_differ_by_rank_group_and_from_the_single_process() {
        let g = OneChoice::new(100, 5).unwrap();
        let ids: Vec<BucketerIdentity> = [(2, 0), (2, 1), (3, 0), (4, 0)]
            .iter()
            .map(|&(p, r)| Partitioned::new(g, p, r).unwrap().identity())
            .collect();
        for (i, a) in ids.iter().enumerate() {
            assert_ne!(*a, g.identity());
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert!(Partitioned::new(g, 0, 0).is_err());
        assert!(Partitioned::new(g, 2, 2).is_err());
    }

    #[test]
    fn foreign_ids_fold_into_a_valid_bucket() {
        let g = OneChoice::new(5, 1).unwrap();
        let last = Partitioned::new(g, 2, 1).unwrap();
        assert_eq!(last.buckets(), 2);
        assert!((0..1000).all(|id| last.bucket(id) < 2));
    }
}
