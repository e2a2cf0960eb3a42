//! The header every rank exchanges before a collective's payload, and the
//! check that turns a disagreement into the same kind of error on every rank.
//!
//! MPI matches collectives by call order only: if one rank passes a different
//! count, Open MPI may truncate, abort the job, or wait forever. So before the
//! payload every rank all-gathers a [`Proposal`] (four `u64`: operation code,
//! size unit, receive length, send length) and runs [`validate`] on the full
//! table. The rules mirror `basis-std`'s `LocalComm` exactly, so a program
//! sees the same [`CommError`] whichever backend it runs on.

use comm_traits::{Collective, CommError};

/// What one rank is about to do. All fields are `u64` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proposal {
    /// Operation code (see [`op_code`]).
    pub(crate) op: u64,
    /// `chunk` for all-to-all, the buffer length otherwise (elements for
    /// all-reduce, bytes for the byte collectives).
    pub(crate) unit: u64,
    /// Length of this rank's output buffer.
    pub(crate) recv_len: u64,
    /// Length of this rank's input buffer.
    pub(crate) send_len: u64,
}

/// Number of `u64` words in an encoded [`Proposal`].
pub(crate) const WORDS: usize = 4;

impl Proposal {
    /// The proposal for `op` with the given sizes.
    pub(crate) fn new(op: Collective, unit: usize, recv_len: usize, send_len: usize) -> Self {
        Self {
            op: op_code(op),
            unit: unit as u64,
            recv_len: recv_len as u64,
            send_len: send_len as u64,
        }
    }

    /// The wire form.
    pub(crate) fn encode(&self) -> [u64; WORDS] {
        [self.op, self.unit, self.recv_len, self.send_len]
    }

    /// Read the proposals of all ranks from the gathered words.
    pub(crate) fn decode_all(words: &[u64]) -> impl Iterator<Item = Proposal> + '_ {
        words.chunks_exact(WORDS).map(|w| Proposal {
            op: w[0],
            unit: w[1],
            recv_len: w[2],
            send_len: w[3],
        })
    }

    /// Whether this proposal's own buffers fit its arguments on `p` ranks.
    fn buffers_fit(&self, p: u64) -> bool {
        match self.op {
            OP_ALL_TO_ALL => {
                let want = self.unit.checked_mul(p);
                want == Some(self.recv_len) && want == Some(self.send_len)
            }
            OP_ALL_GATHER => self.unit.checked_mul(p) == Some(self.recv_len),
            OP_ALL_TO_ALL_COUNTS => self.send_len == p && self.recv_len == p,
            // All-to-all-v is checked pair by pair on the gathered counts
            // (`comm_traits::check_all_to_all_v`) once the op agrees.
            // All-reduce works in place (one buffer); barrier has none.
            _ => true,
        }
    }
}

const OP_ALL_REDUCE: u64 = 1;
const OP_ALL_TO_ALL: u64 = 2;
const OP_ALL_GATHER: u64 = 3;
const OP_BARRIER: u64 = 4;
const OP_ALL_TO_ALL_V: u64 = 5;
const OP_ALL_TO_ALL_COUNTS: u64 = 6;

/// The code of a collective on the wire (the same numbers `LocalComm` reports
/// in [`CommError::HeaderMismatch`]).
pub(crate) fn op_code(op: Collective) -> u64 {
    match op {
        Collective::AllReduceSum => OP_ALL_REDUCE,
        Collective::AllToAll => OP_ALL_TO_ALL,
        Collective::AllGather => OP_ALL_GATHER,
        Collective::Barrier => OP_BARRIER,
        Collective::AllToAllV => OP_ALL_TO_ALL_V,
        Collective::AllToAllCounts => OP_ALL_TO_ALL_COUNTS,
    }
}

/// Check the gathered proposals (rank order) from the point of view of rank
/// `me`: its own buffers first (so the offending rank reports
/// [`CommError::BadArgument`]), then every rank's operation, size unit and
/// buffers (the others report a mismatch). Every rank runs this on the same
/// table, so either all ranks go on to the payload or none does.
pub(crate) fn validate(me: usize, all: &[Proposal]) -> Result<(), CommError> {
    let p = all.len() as u64;
    let mine = all.get(me).ok_or(CommError::BadArgument(
        "rank index outside the gathered headers",
    ))?;
    if !mine.buffers_fit(p) {
        return Err(CommError::BadArgument(match mine.op {
            OP_ALL_TO_ALL => "all_to_all buffers must be size()*chunk bytes",
            OP_ALL_TO_ALL_COUNTS => comm_traits::COUNTS_LEN,
            _ => "all_gather recv must be size()*send.len() bytes",
        }));
    }
    for other in all {
        if other.op != mine.op {
            return Err(CommError::HeaderMismatch {
                field: "collective",
                local: mine.op,
                remote: other.op,
            });
        }
        if other.unit != mine.unit {
            return Err(CommError::LengthMismatch {
                local: mine.unit,
                remote: other.unit,
            });
        }
        if !other.buffers_fit(p) {
            return Err(CommError::LengthMismatch {
                local: mine.send_len,
                remote: other.send_len,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gather(unit: usize, send: usize, recv: usize) -> Proposal {
        Proposal::new(Collective::AllGather, unit, recv, send)
    }

    #[test]
    fn encode_decode_round_trip() {
        let a = Proposal::new(Collective::AllToAll, 5, 20, 20);
        let b = Proposal::new(Collective::Barrier, 0, 0, 0);
        let words: Vec<u64> = [a.encode(), b.encode()].concat();
        let back: Vec<Proposal> = Proposal::decode_all(&words).collect();
        assert_eq!(back, vec![a, b]);
    }

    #[test]
    fn agreement_passes_on_every_rank() {
        let all = vec![gather(4, 4, 12); 3];
        for me in 0..3 {
            assert_eq!(validate(me, &all), Ok(()));
        }
    }

    #[test]
    fn length_disagreement_fails_on_every_rank() {
        let all = [gather(4, 4, 12), gather(5, 5, 15), gather(4, 4, 12)];
        assert_eq!(
            validate(0, &all),
            Err(CommError::LengthMismatch {
                local: 4,
                remote: 5
            })
        );
        assert_eq!(
            validate(1, &all),
            Err(CommError::LengthMismatch {
                local: 5,
                remote: 4
            })
        );
        assert!(validate(2, &all).is_err());
    }

    #[test]
    fn bad_buffer_is_bad_argument_here_and_mismatch_elsewhere() {
        let all = [gather(4, 4, 8), gather(4, 4, 7)];
        assert_eq!(
            validate(1, &all),
            Err(CommError::BadArgument(
                "all_gather recv must be size()*send.len() bytes"
            ))
        );
        assert!(matches!(
            validate(0, &all),
            Err(CommError::LengthMismatch { .. })
        ));
        let a2a = [
            Proposal::new(Collective::AllToAll, 3, 6, 5),
            Proposal::new(Collective::AllToAll, 3, 6, 6),
        ];
        assert_eq!(
            validate(0, &a2a),
            Err(CommError::BadArgument(
                "all_to_all buffers must be size()*chunk bytes"
            ))
        );
        assert_eq!(
            validate(1, &a2a),
            Err(CommError::LengthMismatch {
                local: 6,
                remote: 5
            })
        );
    }

    #[test]
    fn different_collectives_are_a_header_mismatch() {
        let all = [
            Proposal::new(Collective::Barrier, 0, 0, 0),
            Proposal::new(Collective::AllReduceSum, 0, 0, 0),
        ];
        assert_eq!(
            validate(0, &all),
            Err(CommError::HeaderMismatch {
                field: "collective",
                local: 4,
                remote: 1
            })
        );
    }

    #[test]
    fn overflowing_sizes_do_not_panic() {
        let all = [
            Proposal::new(Collective::AllGather, usize::MAX, 0, usize::MAX),
            Proposal::new(Collective::AllGather, usize::MAX, 0, usize::MAX),
        ];
        assert!(validate(0, &all).is_err());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn any_op() -> impl Strategy<Value = Collective> {
        prop_oneof![
            Just(Collective::AllReduceSum),
            Just(Collective::AllToAll),
            Just(Collective::AllGather),
            Just(Collective::Barrier),
            Just(Collective::AllToAllCounts),
            Just(Collective::AllToAllV),
        ]
    }

    /// Tables where ranks mostly agree, with occasional deviations.
    fn table() -> impl Strategy<Value = Vec<Proposal>> {
        (1usize..6, any_op(), 0usize..5).prop_flat_map(|(p, op, unit)| {
            let base = match op {
                Collective::AllToAll => Proposal::new(op, unit, p * unit, p * unit),
                Collective::AllGather => Proposal::new(op, unit, p * unit, unit),
                Collective::AllReduceSum => Proposal::new(op, unit, unit, unit),
                Collective::Barrier => Proposal::new(op, 0, 0, 0),
                Collective::AllToAllCounts => Proposal::new(op, 1, p, p),
                Collective::AllToAllV => Proposal::new(op, 0, unit, unit),
            };
            prop::collection::vec(
                prop_oneof![
                    6 => Just(base),
                    1 => (any_op(), 0usize..5, 0usize..25, 0usize..25)
                        .prop_map(|(o, u, r, s)| Proposal::new(o, u, r, s)),
                ],
                p,
            )
        })
    }

    proptest! {
        /// The property the whole protocol rests on: every rank reaches the
        /// same verdict (all go on to the payload, or none does).
        #[test]
        fn every_rank_reaches_the_same_verdict(all in table()) {
            let verdicts: Vec<bool> = (0..all.len()).map(|me| validate(me, &all).is_ok()).collect();
            prop_assert!(verdicts.iter().all(|&v| v == verdicts[0]));
        }

        /// Accepted exactly when all proposals are equal and well-formed.
        #[test]
        fn accepts_exactly_consistent_tables(all in table()) {
            let p = all.len() as u64;
            let consistent = all.iter().all(|x| x.op == all[0].op && x.unit == all[0].unit)
                && all.iter().all(|x| x.buffers_fit(p));
            prop_assert_eq!(validate(0, &all).is_ok(), consistent);
        }
    }
}
