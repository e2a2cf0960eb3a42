//! How the data-parallel pieces of a step's planning run: in order on the
//! calling thread ([`Sequential`]), or on a thread pool that an adapter crate
//! supplies (`basis-rayon` implements [`Executor`] over rayon).
//!
//! Planning ([`Basis::plan_with`](crate::Basis::plan_with)) hands an executor
//! only work whose result cannot depend on the schedule: sorts whose ties
//! do not matter (equal elements are interchangeable, or re-sorted by a
//! finer key afterwards), and
//! items that each own a disjoint piece of the output and compute it with
//! the serial arithmetic. So the plan's bits are the same for every
//! executor and thread count; only the wall time changes.

use alloc::vec::Vec;
use core::cmp::Ordering;

/// Runs the data-parallel pieces of planning.
///
/// Implementations may run work on any thread in any order; they must sort
/// correctly and call `f` exactly once per item.
pub trait Executor {
    /// Sorts `items` by `cmp`. Callers never depend on the order of elements
    /// that compare equal (they are interchangeable, or re-sorted by a finer
    /// key afterwards), so any correct sort, stable or not, serial or
    /// parallel, gives the same result.
    fn sort_by<T, F>(&self, items: &mut [T], cmp: F)
    where
        T: Send,
        F: Fn(&T, &T) -> Ordering + Sync + Send;

    /// Calls `f` once on every item, in any order, on any thread.
    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send;
}

/// Everything in order on the calling thread (what [`SparseOptimizer::step`]
/// uses).
///
/// [`SparseOptimizer::step`]: crate::SparseOptimizer::step
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sequential;

impl Executor for Sequential {
    fn sort_by<T, F>(&self, items: &mut [T], cmp: F)
    where
        T: Send,
        F: Fn(&T, &T) -> Ordering + Sync + Send,
    {
        items.sort_unstable_by(cmp);
    }

    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        items.into_iter().for_each(f);
    }
}

/// Rows (or runs of duplicates) one work item covers: large enough that a
/// parallel executor's hand-off cost (microseconds) stays small next to the
/// item (64 rows of `d` floats), small enough to balance two or more threads
/// on a few thousand rows.
pub(crate) const ROWS_PER_ITEM: usize = 64;

/// Splits `slice` into consecutive pieces of `rows_per_item · width` values
/// (the last one shorter). `width` 0 gives one empty piece per item, so a
/// column that is absent zips with the others.
pub(crate) fn row_chunks<T>(slice: &mut [T], rows: usize, width: usize) -> Vec<&mut [T]> {
    let items = rows.div_ceil(ROWS_PER_ITEM);
    let mut out = Vec::with_capacity(items);
    let mut rest = slice;
    for item in 0..items {
        let n = (ROWS_PER_ITEM.min(rows - item * ROWS_PER_ITEM) * width).min(rest.len());
        let (piece, tail) = core::mem::take(&mut rest).split_at_mut(n);
        out.push(piece);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_chunks_cover_the_slice_in_order() {
        let mut v: Vec<u32> = (0..(130 * 3)).collect();
        let chunks = row_chunks(&mut v, 130, 3);
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [64 * 3, 64 * 3, 2 * 3]
        );
        assert_eq!(chunks[2][0], 128 * 3);
        let mut empty: Vec<u16> = Vec::new();
        let chunks = row_chunks(&mut empty, 130, 0);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.is_empty()));
    }

    #[test]
    fn sequential_runs_every_item_once() {
        let mut seen = alloc::vec![0u8; 10];
        let items: Vec<&mut u8> = seen.iter_mut().collect();
        Sequential.for_each(items, |x| *x += 1);
        assert!(seen.iter().all(|&x| x == 1));
        let mut v = alloc::vec![3, 1, 2];
        Sequential.sort_by(&mut v, |a, b| a.cmp(b));
        assert_eq!(v, [1, 2, 3]);
    }
}
