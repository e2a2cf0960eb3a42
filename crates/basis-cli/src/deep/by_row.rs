//! A batch's features grouped by local row ([`ByRow`]), so each row's
//! gradient has one owner that adds its terms in batch order.
//!
//! A row's gradient is a sum over the features that use it. The serial loop
//! over examples adds each feature's term to its row as it meets it, i.e.
//! every row's terms in batch order. [`ByRow`] lists, per row, its features
//! in that same order (a counting sort, stable by construction), so a pass
//! over rows ([`super::chunks::for_rows`]) computes every row's sum with the
//! same operations in the same order as the serial loop — the same bits,
//! split over any number of threads.

use super::batch::LocalBatch;

/// The features of a [`LocalBatch`] grouped by local row, in batch order
/// within each row. Reused across batches (no allocation once grown).
#[derive(Debug, Clone, Default)]
pub(crate) struct ByRow {
    /// Row `l`'s features are `occ[starts[l]..starts[l + 1]]`.
    starts: Vec<u32>,
    /// `(feature index, example)` of each feature, grouped by row.
    occ: Vec<(u32, u32)>,
}

impl ByRow {
    /// Group `batch`'s features by local row.
    ///
    /// # Panics
    /// When a feature's local row is not below `batch.ids.len()` (the
    /// models check batches first: `deepfm::check_batch`).
    pub(crate) fn build(&mut self, batch: &LocalBatch) {
        let rows = batch.ids.len();
        let starts = &mut self.starts;
        starts.clear();
        starts.resize(rows + 1, 0);
        for &l in &batch.local {
            starts[l as usize + 1] += 1;
        }
        for l in 0..rows {
            starts[l + 1] += starts[l];
        }
        self.occ.clear();
        self.occ.resize(batch.local.len(), (0, 0));
        // `starts[l]` serves as row `l`'s write cursor; features are visited
        // in batch order, so each row's list comes out in batch order.
        for e in 0..batch.len() {
            for j in batch.offsets[e]..batch.offsets[e + 1] {
                let at = &mut starts[batch.local[j] as usize];
                self.occ[*at as usize] = (j as u32, e as u32);
                *at += 1;
            }
        }
        // Each cursor now stands at the next row's start: shift them back.
        for l in (1..=rows).rev() {
            starts[l] = starts[l - 1];
        }
        starts[0] = 0;
    }

    /// `(feature index, example)` of every feature of local row `l`, in
    /// batch order.
    pub(crate) fn of(&self, l: usize) -> &[(u32, u32)] {
        &self.occ[self.starts[l] as usize..self.starts[l + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_feature_under_its_row_in_batch_order() {
        let mut rng = crate::rng::Rng::new(5);
        let mut b = LocalBatch::default();
        b.clear();
        let rows = 37usize;
        for id in 0..rows as u64 {
            b.push_row(id);
        }
        for _ in 0..50 {
            for _ in 0..rng.below(6) {
                b.push_feature(rng.below(rows) as u32, 1.0, 0);
            }
            b.end_example(0.0);
        }
        let mut by = ByRow::default();
        // Twice: a reused index is rebuilt, not appended to.
        by.build(&b);
        by.build(&b);
        for l in 0..rows {
            // The slow definition: scan the batch in order.
            let want: Vec<(u32, u32)> = (0..b.len())
                .flat_map(|e| (b.offsets[e]..b.offsets[e + 1]).map(move |j| (j, e)))
                .filter(|&(j, _)| b.local[j] as usize == l)
                .map(|(j, e)| (j as u32, e as u32))
                .collect();
            assert_eq!(by.of(l), want.as_slice(), "row {l}");
        }
        let total: usize = (0..rows).map(|l| by.of(l).len()).sum();
        assert_eq!(total, b.local.len());
    }
}
