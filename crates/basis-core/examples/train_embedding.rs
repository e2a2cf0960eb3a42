//! A BASIS training loop over an embedding table, end to end and copy-ready:
//! 50 000 rows of dimension 16 learn to predict a per-row target through a
//! fixed linear read-out (`ŷ_i = ⟨e_i, w⟩`, squared loss), with Zipf-like
//! batches as in a recommender. Prints the loss and the optimizer-state
//! memory next to what per-row Adam would hold.
//!
//! `cargo run --release -p basisopt-core --example train_embedding`

use basis_core::{
    Basis, BasisConfig, DenseTable, OneChoice, RowIndex, ScalarStorage, SparseOptimizer,
};

const ROWS: u64 = 50_000;
const DIM: usize = 16;
const BATCH: usize = 512;
const STEPS: usize = 2_000;
const BUCKETS: u32 = 2_000;

/// splitmix64: a deterministic generator for the synthetic data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A row id, heavy-headed: row `⌊ROWS·u³⌋` (hot rows are small ids).
    fn row(&mut self) -> u64 {
        let u = self.unit();
        ((ROWS as f32 * u * u * u) as u64).min(ROWS - 1)
    }
}

fn main() -> Result<(), Box<dyn core::error::Error>> {
    let mut rng = Rng(17);
    // The model: the embedding table (owned by the caller) and a fixed read-out.
    let mut table: Vec<f32> = (0..ROWS as usize * DIM)
        .map(|_| (rng.unit() - 0.5) * 0.1)
        .collect();
    let readout: Vec<f32> = (0..DIM)
        .map(|j| if j % 2 == 0 { 1.0 } else { -0.5 })
        .collect();
    let target: Vec<f32> = (0..ROWS).map(|_| rng.unit() * 2.0 - 1.0).collect();

    // BASIS: moments for 2 000 hash buckets instead of 50 000 rows, one byte
    // of learned state per row (the default RowScaled mode, log-coded scalar).
    let config = BasisConfig::row_scaled(DIM)
        .lr(0.05)
        .scalar_storage(ScalarStorage::LogU8)
        .row_index(RowIndex::Dense { rows: ROWS })
        .build()?;
    let mut opt = Basis::new(config, OneChoice::new(BUCKETS, 7)?)?;

    let mut ids = vec![0u64; BATCH];
    let mut grads = vec![0.0f32; BATCH * DIM];
    for step in 1..=STEPS {
        ids.iter_mut().for_each(|id| *id = rng.row());
        // Forward and backward of the squared loss, row by row.
        let mut loss = 0.0f64;
        for (k, &id) in ids.iter().enumerate() {
            let row = &table[id as usize * DIM..(id as usize + 1) * DIM];
            let pred: f32 = row.iter().zip(&readout).map(|(e, w)| e * w).sum();
            let err = pred - target[id as usize];
            loss += f64::from(err * err) / BATCH as f64;
            for (g, w) in grads[k * DIM..(k + 1) * DIM].iter_mut().zip(&readout) {
                *g = 2.0 * err * w / BATCH as f32;
            }
        }
        // The sparse update: only the batch's rows (duplicates are summed).
        opt.step(&ids, &grads, &mut DenseTable::new(&mut table, DIM)?)?;
        if step == 1 || step % 500 == 0 {
            println!("step {step:>5}: batch loss {loss:.4}");
        }
    }

    let mem = opt.memory();
    let adam_bytes = ROWS as usize * DIM * 8;
    println!(
        "optimizer state: {} bytes (per-row Adam: {adam_bytes} bytes, {:.1}x more)",
        mem.total_bytes,
        adam_bytes as f64 / mem.total_bytes as f64
    );
    // A checkpoint of the optimizer: versioned, checksummed bytes.
    let saved = opt.export_state();
    opt.import_state(&saved)?;
    println!("state blob: {} bytes", saved.len());
    Ok(())
}
