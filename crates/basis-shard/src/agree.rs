//! Collective verdicts: every rank's local answer all-gathered, so every
//! rank reaches the same decision and none waits in a collective for a
//! rank that gave up. A training runtime calls them around the per-rank
//! checkpoint files ([`ShardedTable::checkpoint`], or
//! [`TableSnapshot::insert_into`] for a file with its own sections too):
//! [`agree_values`] before a run (every rank built the same table),
//! [`agree_outcome`] after each rank saved or restored its file (one
//! rank's missing, corrupt or foreign file fails every rank with the same
//! message, and files of different steps — a run stopped while its ranks
//! were saving — are refused).
//!
//! [`ShardedTable::checkpoint`]: crate::ShardedTable::checkpoint
//! [`TableSnapshot::insert_into`]: crate::TableSnapshot::insert_into

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use comm_traits::{CommError, Communicator};
use core::fmt;

/// Bytes of a rank's failure message [`agree_outcome`] carries (a longer
/// one is cut at a char boundary before it).
pub const MESSAGE_BYTES: usize = 500;

/// Why the ranks do not agree; every rank gets the same value (but for
/// [`AgreeError::Comm`], which is each rank's own).
#[derive(Debug)]
#[non_exhaustive]
pub enum AgreeError {
    /// The all-gather failed on this rank (a rank died or timed out).
    Comm {
        /// This rank.
        rank: usize,
        /// The communicator's error.
        source: CommError,
    },
    /// Rank `rank` (the lowest such) has another value of `name` than rank 0.
    Differs {
        /// The value's name.
        name: &'static str,
        /// The rank that differs.
        rank: usize,
        /// Rank 0's value.
        first: u64,
        /// Rank `rank`'s value.
        theirs: u64,
    },
    /// Rank `rank` (the lowest that failed) failed with `message`.
    Failed {
        /// The failing rank.
        rank: usize,
        /// Its message (at most [`MESSAGE_BYTES`] bytes).
        message: String,
    },
    /// Every rank succeeded, but rank `rank` (the lowest such) at another
    /// `counter` (step, epoch …) than rank 0.
    Counters {
        /// What the counter counts (`"epoch"`, `"step"`).
        counter: &'static str,
        /// The rank that differs.
        rank: usize,
        /// Rank 0's counter.
        first: u64,
        /// Rank `rank`'s counter.
        theirs: u64,
    },
}

impl fmt::Display for AgreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Comm { rank, source } => write!(f, "failed: rank {rank}: {source}"),
            Self::Differs {
                name,
                rank,
                first,
                theirs,
            } => write!(
                f,
                "ranks disagree on {name}: rank 0 has {first}, rank {rank} has {theirs}"
            ),
            Self::Failed { rank, message } => write!(f, "failed on rank {rank}: {message}"),
            Self::Counters {
                counter,
                rank,
                first,
                theirs,
            } => write!(
                f,
                "failed: the ranks' checkpoints are of different {counter}s (rank 0 has \
                 {counter} {first}, rank {rank} has {counter} {theirs}): a run stopped while \
                 saving; start afresh"
            ),
        }
    }
}

impl core::error::Error for AgreeError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Comm { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Every rank's little-endian words, all-gathered: `words[r]` is rank `r`'s.
fn gather_words(comm: &mut dyn Communicator, mine: &[u64]) -> Result<Vec<Vec<u64>>, AgreeError> {
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut all = vec![0u8; bytes.len() * comm.size()];
    comm.all_gather(&bytes, &mut all)
        .map_err(|source| AgreeError::Comm {
            rank: comm.rank(),
            source,
        })?;
    Ok(all
        .chunks_exact(bytes.len().max(1))
        .map(|c| {
            c.chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
                .collect()
        })
        .collect())
}

/// Collective: `Ok` on every rank iff every rank passed the same `values`
/// (by name, in the same order), else the first value (in `values`' order)
/// some rank disagrees on, with the lowest such rank.
///
/// # Errors
/// [`AgreeError::Differs`] (the same on every rank), [`AgreeError::Comm`].
pub fn agree_values(
    comm: &mut dyn Communicator,
    values: &[(&'static str, u64)],
) -> Result<(), AgreeError> {
    let mine: Vec<u64> = values.iter().map(|v| v.1).collect();
    let all = gather_words(comm, &mine)?;
    for (k, &(name, _)) in values.iter().enumerate() {
        let at = |r: usize| all[r].get(k).copied().unwrap_or(0);
        if let Some(rank) = (1..all.len()).find(|&r| at(r) != at(0)) {
            return Err(AgreeError::Differs {
                name,
                rank,
                first: at(0),
                theirs: at(rank),
            });
        }
    }
    Ok(())
}

/// Collective: every rank's `local` outcome (the `counter` it saved or
/// restored at, or why it failed), all-gathered. Every rank gets the same
/// verdict: the lowest failing rank's message, else an error when the
/// counters differ, else the common counter.
///
/// # Errors
/// [`AgreeError::Failed`], [`AgreeError::Counters`] (the same on every
/// rank), [`AgreeError::Comm`].
pub fn agree_outcome(
    comm: &mut dyn Communicator,
    counter: &'static str,
    local: Result<u64, &str>,
) -> Result<u64, AgreeError> {
    // One record per rank: ok flag, counter, message length, message
    // (padded to whole words).
    let mut record = vec![0u64; 3 + MESSAGE_BYTES.div_ceil(8)];
    match local {
        Ok(c) => (record[0], record[1]) = (1, c),
        Err(e) => {
            // Cut at a char boundary so every rank decodes the same text.
            let mut end = e.len().min(MESSAGE_BYTES);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            record[2] = end as u64;
            for (k, chunk) in e.as_bytes()[..end].chunks(8).enumerate() {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                record[3 + k] = u64::from_le_bytes(w);
            }
        }
    }
    let all = gather_words(comm, &record)?;
    if let Some((rank, rec)) = all.iter().enumerate().find(|(_, r)| r[0] != 1) {
        let text: Vec<u8> = rec[3..].iter().flat_map(|w| w.to_le_bytes()).collect();
        let n = usize::try_from(rec[2]).map_or(MESSAGE_BYTES, |n| n.min(MESSAGE_BYTES));
        return Err(AgreeError::Failed {
            rank,
            message: String::from_utf8_lossy(&text[..n]).into_owned(),
        });
    }
    let first = all[0][1];
    if let Some(rank) = (1..all.len()).find(|&r| all[r][1] != first) {
        return Err(AgreeError::Counters {
            counter,
            rank,
            first,
            theirs: all[rank][1],
        });
    }
    Ok(first)
}
