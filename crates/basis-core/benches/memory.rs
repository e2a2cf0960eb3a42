//! Optimizer-state memory per row (the caller's table excluded), d = 64,
//! one-choice hashing unless stated: prints the memory table.
//! Figures come from each optimizer's exact `memory()` report on dense row
//! state (sparse state adds the hash-map index: shown on the last line).
//! Fresh optimizers hold no step buffers; the last line subtracts them.

use balanced_hash::{DChoice, OneChoice};
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex,
    RowwiseAdagrad, ScalarStorage, SparseOptimizer,
};

const DIM: usize = 64;

fn basis_row(
    name: &str,
    n: u64,
    b: u32,
    direction: Direction,
    storage: ScalarStorage,
    scalar_lr: f32,
) {
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(direction)
        .with_scalar_storage(storage)
        .with_scalar_lr(scalar_lr)
        .with_row_index(RowIndex::Dense { rows: n });
    let opt = Basis::new(c, OneChoice::new(b, 1).expect("b > 0")).expect("valid");
    let m = opt.memory();
    println!(
        "| {name} | {n} | {} | {} | {:.3} |",
        n / u64::from(b),
        m.total_bytes,
        m.bytes_per_row(n)
    );
}

fn main() {
    let n = 1_000_000u64;
    println!("| configuration | N | N/B | state bytes | bytes/row |");
    println!("|---|---|---|---|---|");
    let adam = ExactAdam::new(
        AdamConfig::default()
            .with_dim(DIM)
            .with_row_index(RowIndex::Dense { rows: n }),
    )
    .expect("valid");
    println!(
        "| exact Adam | {n} | - | {} | {:.3} |",
        adam.memory().total_bytes,
        adam.memory().bytes_per_row(n)
    );
    let ada = RowwiseAdagrad::new(
        AdagradConfig::default()
            .with_dim(DIM)
            .with_row_index(RowIndex::Dense { rows: n }),
    )
    .expect("valid");
    println!(
        "| row-wise AdaGrad | {n} | - | {} | {:.3} |",
        ada.memory().total_bytes,
        ada.memory().bytes_per_row(n)
    );
    basis_row(
        "Shared, f32 scalars",
        n,
        10_000,
        Direction::Shared,
        ScalarStorage::F32,
        0.01,
    );
    basis_row(
        "Shared, bf16 scalars",
        n,
        10_000,
        Direction::Shared,
        ScalarStorage::Bf16,
        0.01,
    );
    basis_row(
        "Shared, 1-byte scalars",
        n,
        10_000,
        Direction::Shared,
        ScalarStorage::LogU8,
        0.01,
    );
    basis_row(
        "OwnGradient, 1-byte scalars",
        n,
        10_000,
        Direction::OwnGradient,
        ScalarStorage::LogU8,
        0.01,
    );
    basis_row(
        "OwnGradient, frozen scalars",
        n,
        10_000,
        Direction::OwnGradient,
        ScalarStorage::F32,
        0.0,
    );
    basis_row(
        "RowScaled, f32 G_i",
        n,
        10_000,
        Direction::RowScaled,
        ScalarStorage::F32,
        0.0,
    );
    basis_row(
        "RowScaled, 1-byte G_i",
        n,
        1_000,
        Direction::RowScaled,
        ScalarStorage::LogU8,
        0.0,
    );
    basis_row(
        "RowScaled, 1-byte G_i",
        n,
        100,
        Direction::RowScaled,
        ScalarStorage::LogU8,
        0.0,
    );

    // Two-choice: the remembered choice (dense ids) is added by the bucketer.
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(Direction::Shared)
        .with_scalar_storage(ScalarStorage::LogU8)
        .with_row_index(RowIndex::Dense { rows: n });
    let h = DChoice::dense(n, 10_000, 2, 1).expect("valid");
    let opt = Basis::new(c, h).expect("valid");
    let m = opt.memory();
    println!(
        "| Shared, 1-byte scalars, two-choice (bucket map {} B) | {n} | 100 | {} | {:.3} |",
        m.bucket_map,
        m.total_bytes,
        m.bytes_per_row(n)
    );

    // Sparse row state: the hash-map index after 100k distinct rows.
    let rows = 100_000u64;
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(Direction::RowScaled)
        .with_scalar_storage(ScalarStorage::LogU8);
    let mut opt = Basis::new(c, OneChoice::new(100, 1).expect("b > 0")).expect("valid");
    let mut table = vec![0.0f32; rows as usize * DIM];
    let ids: Vec<u64> = (0..rows).collect();
    let grads = vec![0.01f32; ids.len() * DIM];
    opt.step(
        &ids,
        &grads,
        &mut DenseTable::new(&mut table, DIM).expect("dim > 0"),
    )
    .expect("valid");
    let m = opt.memory();
    let state = m.total_bytes - m.scratch;
    println!(
        "| RowScaled, 1-byte G_i, sparse ids (index {} B; + {} B reusable step buffers for a 100k-row batch, not per-row state) | {rows} | 1000 | {state} | {:.3} |",
        m.row_index,
        m.scratch,
        state as f64 / rows as f64
    );
}
