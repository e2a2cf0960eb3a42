//! The memory of the two ways to hold optimizer state for sparse `u64` ids
//! (the "Sparse ids in your own table" recipe of the crate README): the
//! optimizer's own id index (`RowIndex::Sparse`) against dense state over the
//! caller's slots (`RowIndex::Dense` + `step_keyed`). Every row is touched
//! once; prints bytes per row of each part of `memory()`.
//!
//! `cargo run --release -p basisopt-core --example row_index_memory`

use core::error::Error;
use std::collections::HashMap;

use basis_core::{
    Basis, BasisConfig, DenseTable, MemoryReport, OneChoice, RowAccess, RowIndex, SparseOptimizer,
};

const DIM: usize = 8;
const BATCH: usize = 4096;

/// Rows kept in a map by id: the table `RowIndex::Sparse` steps over.
struct MapTable {
    rows: HashMap<u64, Vec<f32>>,
}

impl RowAccess for MapTable {
    fn dim(&self) -> usize {
        DIM
    }
    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        self.rows.get_mut(&id).map(Vec::as_mut_slice)
    }
}

fn per_row(m: &MemoryReport, n: u64) -> String {
    let b = |x: usize| x as f64 / n as f64;
    format!(
        "index {:6.2}  per-row state {:5.2}  buckets {:5.2}  total {:6.2} B/row",
        b(m.row_index),
        b(m.scalars + m.row_counters),
        b(m.shared_tables + m.step_counts),
        b(m.total_bytes)
    )
}

fn main() -> Result<(), Box<dyn Error>> {
    for n in [20_000u64, 100_000, 1_000_000] {
        // Scattered u64 ids, 100 rows per bucket.
        let ids: Vec<u64> = (0..n)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let buckets = u32::try_from(n / 100)?;
        let grads = vec![0.01f32; BATCH * DIM];

        let config = BasisConfig::row_scaled(DIM)
            .row_index(RowIndex::Sparse)
            .build()?;
        let mut sparse = Basis::new(config, OneChoice::new(buckets, 7)?)?;
        let mut table = MapTable {
            rows: ids.iter().map(|&id| (id, vec![0.1; DIM])).collect(),
        };
        for batch in ids.chunks(BATCH) {
            sparse.step(batch, &grads[..batch.len() * DIM], &mut table)?;
        }

        let config = BasisConfig::row_scaled(DIM)
            .row_index(RowIndex::Dense { rows: n })
            .build()?;
        let mut dense = Basis::new(config, OneChoice::new(buckets, 7)?)?;
        let mut weights = vec![0.1f32; usize::try_from(n)? * DIM];
        let slots: Vec<u64> = (0..n).collect();
        for (batch, at) in ids.chunks(BATCH).zip(slots.chunks(BATCH)) {
            let mut table = DenseTable::new(&mut weights, DIM)?;
            dense.step_keyed(batch, at, &grads[..batch.len() * DIM], &mut table)?;
        }

        println!(
            "{n:>9} rows  Sparse:        {}",
            per_row(&sparse.memory(), n)
        );
        println!(
            "{n:>9} rows  Dense + keyed: {}",
            per_row(&dense.memory(), n)
        );
    }
    Ok(())
}
