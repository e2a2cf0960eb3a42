//! A batch in local form (see the [module interface](super)): unique row
//! ids, and examples that refer to rows by their local index.

use crate::data::Examples;

/// A batch whose examples refer to rows by local index (`ids[local]` is the
/// global row id).
#[derive(Debug, Clone, Default)]
pub(crate) struct LocalBatch {
    /// Unique global row ids, in first-seen order.
    pub(crate) ids: Vec<u64>,
    /// Example `e` has features `offsets[e]..offsets[e+1]`.
    pub(crate) offsets: Vec<usize>,
    /// Local row index of each feature.
    pub(crate) local: Vec<u32>,
    /// Value of each feature.
    pub(crate) values: Vec<f32>,
    /// Field of each feature.
    pub(crate) fields: Vec<u8>,
    /// Label of each example (0 or 1).
    pub(crate) labels: Vec<f32>,
    /// Dense features, `dense_width` per example (DLRM's bottom tower).
    pub(crate) dense: Vec<f32>,
    pub(crate) dense_width: usize,
}

impl LocalBatch {
    /// Empty the batch (keeps the allocations).
    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.local.clear();
        self.values.clear();
        self.fields.clear();
        self.labels.clear();
        self.dense.clear();
    }

    /// Number of examples.
    pub(crate) fn len(&self) -> usize {
        self.labels.len()
    }

    /// Register a new unique row; returns its local index.
    pub(crate) fn push_row(&mut self, id: u64) -> u32 {
        self.ids.push(id);
        (self.ids.len() - 1) as u32
    }

    /// Add a feature to the example being built.
    pub(crate) fn push_feature(&mut self, local: u32, value: f32, field: u8) {
        self.local.push(local);
        self.values.push(value);
        self.fields.push(field);
    }

    /// Close the example being built, with its dense features (as many as
    /// `dense_width`; none for models without a bottom tower).
    pub(crate) fn end_example_with_dense(&mut self, label: f32, dense: &[f32]) {
        self.dense.extend_from_slice(dense);
        self.end_example(label);
    }

    /// Close the example being built.
    pub(crate) fn end_example(&mut self, label: f32) {
        self.offsets.push(self.local.len());
        self.labels.push(label);
    }

    /// The examples `batch` of `ex`, with rows of a table held in this
    /// process. `slot` maps a row to its local index (`u32::MAX` = none);
    /// it must be all `u32::MAX` with one entry per table row, and is left so.
    pub(crate) fn fill_from(&mut self, ex: &Examples, batch: &[usize], slot: &mut [u32]) {
        self.clear();
        self.dense_width = ex.dense_width;
        for &e in batch {
            let (a, b) = (ex.offsets[e], ex.offsets[e + 1]);
            for j in a..b {
                let r = ex.rows[j] as usize;
                if slot[r] == u32::MAX {
                    slot[r] = self.push_row(u64::from(ex.rows[j]));
                }
                self.push_feature(slot[r], ex.values[j], ex.fields[j]);
            }
            let w = ex.dense_width;
            self.end_example_with_dense(ex.labels[e], &ex.dense[e * w..(e + 1) * w]);
        }
        for &id in &self.ids {
            slot[id as usize] = u32::MAX;
        }
    }
}

/// Copy the table rows of `ids` (row dim `d`) into `out`, back to back
/// (rows split over the pool's threads: a copy, the same at any count).
pub(crate) fn gather_rows(table: &[f32], d: usize, ids: &[u64], out: &mut Vec<f32>) {
    // `resize` keeps the capacity: a reused buffer allocates only for a
    // batch with more rows than any before it.
    out.resize(ids.len() * d, 0.0);
    super::chunks::for_rows(out, d, |i, row| {
        let at = ids[i] as usize * d;
        row.copy_from_slice(&table[at..at + d]);
    });
}
