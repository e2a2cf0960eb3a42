//! The collective verdicts against the verdict worked out directly from
//! every rank's input: every rank gets the same answer, naming the lowest
//! rank that failed or differs.
#![allow(clippy::unwrap_used, missing_docs)]

use basis_shard::{AgreeError, MESSAGE_BYTES, agree_outcome, agree_values};
use basis_std::local::LocalComm;
use comm_traits::Communicator;

/// Every rank's result of `f` over `p` `LocalComm` ranks.
fn on_ranks<T: Send>(p: usize, f: impl Fn(&mut LocalComm) -> T + Sync) -> Vec<T> {
    LocalComm::run(p, |mut c| f(&mut c))
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn values_agree_or_name_the_first_value_and_rank_that_differ() {
    for p in 1..=4 {
        let same = on_ranks(p, |c| agree_values(c, &[("a", 1), ("b", 2)]));
        assert!(same.iter().all(Result::is_ok), "p = {p}");
        // Rank r > 0 changes `b` when r ≥ 2 and `c` when r is odd: the
        // first name in order with a difference is `b` if p > 2, else `c`.
        let out = on_ranks(p, |c| {
            let r = c.rank() as u64;
            let b = if r >= 2 { 20 + r } else { 2 };
            let cc = if r % 2 == 1 { 30 + r } else { 3 };
            agree_values(c, &[("a", 1), ("b", b), ("c", cc)])
        });
        let expect = match p {
            1 => None,
            2 => Some(("c", 1, 3, 31)),
            _ => Some(("b", 2, 2, 22)),
        };
        for o in out {
            match (o, expect) {
                (Ok(()), None) => {}
                (
                    Err(AgreeError::Differs {
                        name,
                        rank,
                        first,
                        theirs,
                    }),
                    Some(e),
                ) => assert_eq!((name, rank, first, theirs), e, "p = {p}"),
                (o, e) => panic!("p = {p}: {o:?}, expected {e:?}"),
            }
        }
    }
}

#[test]
fn outcomes_give_the_lowest_failure_else_differing_counters_else_the_counter() {
    let long = "é".repeat(MESSAGE_BYTES); // 2 bytes a char: cut at a boundary
    for p in 1..=4 {
        let ok = on_ranks(p, |c| agree_outcome(c, "epoch", Ok(7)));
        assert!(ok.iter().all(|o| matches!(o, Ok(7))), "p = {p}");
        // Ranks ≥ 1 fail (rank 1 with a long message): rank 1 is named.
        let out = on_ranks(p, |c| {
            let r = c.rank();
            let msg = if r == 1 {
                long.clone()
            } else {
                format!("rank {r} broke")
            };
            agree_outcome(c, "epoch", if r == 0 { Ok(3) } else { Err(&msg) })
        });
        for o in out {
            match o {
                Ok(3) if p == 1 => {}
                Err(AgreeError::Failed { rank: 1, message }) if p > 1 => {
                    assert!(message.len() <= MESSAGE_BYTES && long.starts_with(&message));
                    assert_eq!(message.len(), MESSAGE_BYTES, "whole chars up to the limit");
                }
                o => panic!("p = {p}: {o:?}"),
            }
        }
        // Every rank succeeds, rank 2 and 3 at another epoch: rank 2 named.
        let out = on_ranks(p, |c| {
            let e = if c.rank() >= 2 { 9 } else { 8 };
            agree_outcome(c, "epoch", Ok(e))
        });
        for o in out {
            match o {
                Ok(8) if p <= 2 => {}
                Err(
                    e @ AgreeError::Counters {
                        rank: 2,
                        first: 8,
                        theirs: 9,
                        ..
                    },
                ) if p > 2 => {
                    let text = e.to_string();
                    assert!(
                        text.contains("rank 0 has epoch 8, rank 2 has epoch 9"),
                        "{text}"
                    );
                }
                o => panic!("p = {p}: {o:?}"),
            }
        }
    }
}
