//! Which rank owns a row: [`OwnerRule`], the one type for the owner rule of
//! a sharded table and, for one-choice BASIS, the partition of the single
//! process's bucket table over the ranks ([`PartitionedBuckets`]).
//!
//! Three rules:
//!
//! - [`OwnerRule::hashed`]: a seeded one-choice hash of the id over the `P`
//!   ranks — even placement for optimizers with per-row state only (exact
//!   Adam, row-wise AdaGrad, SGD) or with buckets that cannot be split
//!   (d-choice BASIS: each rank keeps its own buckets).
//! - [`OwnerRule::buckets`]: for one-choice BASIS. The single process hashes
//!   row `id` into bucket `g(id)` of its bucketer `g` over `B` buckets; the
//!   sharded table routes `id` to rank `g(id) mod P`, so all rows of a
//!   bucket live on one rank, and rank `r` numbers its buckets `g(id) div P`
//!   ([`OwnerRule::partition`]): its local bucket `j` is global bucket
//!   `j·P + r`, and it holds `⌈(B − r)/P⌉` of them. Every bucket then sees
//!   the same rows and the same summed gradients as in the single process.
//! - [`OwnerRule::custom`]: any function (tests use "everything to rank 0").
//!
//! Only one-choice hashing splits like this. A d-choice bucketer puts a new
//! key in the least loaded of its `d` candidate buckets *as loaded so far*:
//! the candidates may lie on different ranks and the choice depends on every
//! key seen before, in the single process's order — a global, ordered
//! decision per new key that per-rank state cannot reproduce.

use alloc::sync::Arc;
use balanced_hash::{Bucketer, BucketerIdentity, OneChoice};
use core::fmt;

use crate::ShardError;

/// The owner rank of every id of a table sharded over `ranks()` ranks.
///
/// Cheap to clone (a custom rule shares its function).
#[derive(Clone)]
pub struct OwnerRule {
    ranks: usize,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Hashed(OneChoice),
    Buckets(OneChoice),
    Custom {
        identity: u64,
        owner: Arc<dyn Fn(u64) -> usize + Send + Sync>,
    },
}

impl fmt::Debug for OwnerRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Hashed(_) => "hashed",
            Kind::Buckets(_) => "buckets",
            Kind::Custom { .. } => "custom",
        };
        f.debug_struct("OwnerRule")
            .field("ranks", &self.ranks)
            .field("kind", &kind)
            .field("identity", &self.identity())
            .finish()
    }
}

fn check_ranks(ranks: usize) -> Result<u32, ShardError> {
    u32::try_from(ranks)
        .ok()
        .filter(|&p| p >= 1)
        .ok_or(ShardError::BadConfig(
            "an owner rule needs 1 ..= u32::MAX ranks",
        ))
}

impl OwnerRule {
    /// Ids spread over `ranks` ranks by a one-choice hash seeded from
    /// `seed` (independent of any optimizer's bucket hash).
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `ranks == 0` or more than `u32::MAX`.
    pub fn hashed(ranks: usize, seed: u64) -> Result<Self, ShardError> {
        let p = check_ranks(ranks)?;
        let h = OneChoice::new(p, 0x0A7E_5EED ^ seed)
            .map_err(|_| ShardError::BadConfig("owner hash"))?;
        Ok(Self {
            ranks,
            kind: Kind::Hashed(h),
        })
    }

    /// One-choice BASIS's bucket partition: `id` goes to rank
    /// `global.bucket(id) mod ranks`, and rank `r`'s optimizer is built over
    /// [`partition(r)`](Self::partition) of `global` (the single process's
    /// bucketer), so the ranks together hold exactly its bucket state.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `ranks == 0` or more than `u32::MAX`.
    pub fn buckets(global: OneChoice, ranks: usize) -> Result<Self, ShardError> {
        check_ranks(ranks)?;
        Ok(Self {
            ranks,
            kind: Kind::Buckets(global),
        })
    }

    /// Any owner function; `identity` names it in checkpoints (a checkpoint
    /// written under another identity is refused). An owner outside
    /// `0..ranks` is folded in (`owner % ranks`).
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `ranks == 0` or more than `u32::MAX`.
    pub fn custom(
        ranks: usize,
        identity: u64,
        owner: impl Fn(u64) -> usize + Send + Sync + 'static,
    ) -> Result<Self, ShardError> {
        check_ranks(ranks)?;
        Ok(Self {
            ranks,
            kind: Kind::Custom {
                identity,
                owner: Arc::new(owner),
            },
        })
    }

    /// Ranks of the group.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The rank owning `id`, in `0..ranks()`.
    pub fn owner(&self, id: u64) -> usize {
        match &self.kind {
            Kind::Hashed(h) => h.bucket(id) as usize,
            Kind::Buckets(g) => g.bucket(id) as usize % self.ranks,
            Kind::Custom { owner, .. } => owner(id) % self.ranks,
        }
    }

    /// Rank `rank`'s part of the single process's buckets (the bucketer its
    /// BASIS optimizer is built over), or `None` for a rule that does not
    /// partition buckets.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `rank >= ranks()`.
    pub fn partition(&self, rank: usize) -> Result<Option<PartitionedBuckets>, ShardError> {
        match &self.kind {
            Kind::Buckets(g) => PartitionedBuckets::new(*g, self.ranks, rank).map(Some),
            _ if rank < self.ranks => Ok(None),
            _ => Err(ShardError::BadConfig("rank outside the owner rule's group")),
        }
    }

    /// A fingerprint of the rule (kind, seed, buckets, ranks; a custom
    /// rule's identity): checkpoints record it, and a restore under another
    /// rule is refused.
    pub fn identity(&self) -> u64 {
        let mut bytes = [0u8; 24];
        let (kind, a, b) = match &self.kind {
            Kind::Hashed(h) => (1u32, h.seed(), u64::from(h.buckets())),
            Kind::Buckets(g) => (2, g.seed(), u64::from(g.buckets())),
            Kind::Custom { identity, .. } => (3, *identity, 0),
        };
        bytes[..4].copy_from_slice(&kind.to_le_bytes());
        bytes[4..8].copy_from_slice(&(self.ranks as u32).to_le_bytes());
        bytes[8..16].copy_from_slice(&a.to_le_bytes());
        bytes[16..].copy_from_slice(&b.to_le_bytes());
        balanced_hash::murmur3::x64_128(&bytes, 0x0E7E)[0]
    }
}

/// Rank `rank`'s part of the global one-choice bucketer of a `p`-rank
/// table: global bucket `b` is this rank's local bucket `b / p` when
/// `b % p` is the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionedBuckets {
    /// The single process's bucketer.
    global: OneChoice,
    /// Ranks.
    p: u32,
    /// This rank.
    rank: u32,
    /// Local buckets, `max(1, ⌈(B − rank)/p⌉)`.
    buckets: u32,
}

impl PartitionedBuckets {
    /// Rank `rank` of `p`'s part of `global`.
    ///
    /// A rank past the last bucket (`B ≤ rank`, a table smaller than the
    /// group) owns no row but still gets one (empty) bucket: a bucketer has
    /// at least one.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `p == 0` or `rank >= p`.
    pub fn new(global: OneChoice, p: usize, rank: usize) -> Result<Self, ShardError> {
        let p32 = check_ranks(p)?;
        let rank32 = u32::try_from(rank)
            .ok()
            .filter(|&r| r < p32)
            .ok_or(ShardError::BadConfig("rank outside the owner rule's group"))?;
        let buckets = global.buckets().saturating_sub(rank32).div_ceil(p32).max(1);
        Ok(Self {
            global,
            p: p32,
            rank: rank32,
            buckets,
        })
    }

    /// The single process's bucketer this is a part of.
    pub fn global(&self) -> OneChoice {
        self.global
    }
}

impl Bucketer for PartitionedBuckets {
    fn buckets(&self) -> u32 {
        self.buckets
    }

    /// `g(key) / p`. An id this rank does not own (only a custom owner
    /// function sends one) may fall past the last local bucket; it is folded
    /// into the last one so that the step still runs (the state then differs
    /// from the single process's, as any other placement would).
    fn bucket(&self, key: u64) -> u32 {
        (self.global.bucket(key) / self.p).min(self.buckets - 1)
    }

    // `assign` stays the default (`bucket`): one-choice hashing remembers
    // nothing, and `memory_bytes` the default 0, as for `OneChoice` itself.

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
    use alloc::vec;
    use alloc::vec::Vec;

    /// Against the obvious reference: every global bucket lands on exactly
    /// one (rank, local bucket), local buckets are dense `0..buckets()` per
    /// rank, and the ranks' bucket counts sum to `B` (plus one empty bucket
    /// per rank past the last bucket).
    #[test]
    fn ranks_partition_the_global_buckets() {
        for b in [1u32, 2, 3, 7, 64, 1001] {
            let g = OneChoice::new(b, 5).unwrap();
            for p in 1..=5usize {
                let rule = OwnerRule::buckets(g, p).unwrap();
                let parts: Vec<PartitionedBuckets> = (0..p)
                    .map(|r| rule.partition(r).unwrap().unwrap())
                    .collect();
                let mut seen = vec![None; b as usize];
                for id in 0..20_000u64 {
                    let gb = g.bucket(id);
                    let r = rule.owner(id);
                    let local = parts[r].bucket(id);
                    assert!(local < parts[r].buckets(), "b={b} p={p}");
                    assert_eq!(local * p as u32 + r as u32, gb, "b={b} p={p}");
                    let at = &mut seen[gb as usize];
                    assert!(at.is_none_or(|x| x == (r, local)));
                    *at = Some((r, local));
                }
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
            .map(|&(p, r)| PartitionedBuckets::new(g, p, r).unwrap().identity())
            .collect();
        for (i, a) in ids.iter().enumerate() {
            assert_ne!(*a, g.identity());
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert!(PartitionedBuckets::new(g, 0, 0).is_err());
        assert!(PartitionedBuckets::new(g, 2, 2).is_err());
    }

    #[test]
    fn foreign_ids_fold_into_a_valid_bucket() {
        let g = OneChoice::new(5, 1).unwrap();
        let last = PartitionedBuckets::new(g, 2, 1).unwrap();
        assert_eq!(last.buckets(), 2);
        assert!((0..1000).all(|id| last.bucket(id) < 2));
    }

    #[test]
    fn rules_own_ids_in_range_and_identities_tell_rules_apart() {
        let g = OneChoice::new(50, 3).unwrap();
        let rules = [
            OwnerRule::hashed(3, 1).unwrap(),
            OwnerRule::hashed(3, 2).unwrap(),
            OwnerRule::hashed(4, 1).unwrap(),
            OwnerRule::buckets(g, 3).unwrap(),
            OwnerRule::custom(3, 7, |_| 5).unwrap(),
        ];
        for (i, r) in rules.iter().enumerate() {
            assert!((0..500).all(|id| r.owner(id) < r.ranks()));
            for s in &rules[i + 1..] {
                assert_ne!(r.identity(), s.identity());
            }
        }
        // The hashed rule spreads ids: every rank owns some of 500.
        for p in 0..3 {
            assert!((0..500).any(|id| rules[0].owner(id) == p));
        }
        assert!(OwnerRule::hashed(0, 1).is_err());
        assert!(rules[0].partition(0).unwrap().is_none());
        assert!(rules[0].partition(3).is_err());
    }
}
