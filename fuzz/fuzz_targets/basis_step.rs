//! `basis_core::Basis::step` fed arbitrary ids and gradient bits (byte 0 picks one of 48 configs): never panics, and no NaN/Inf ever reaches a bucket.
#![no_main]
use basis_core::{
    Basis, BasisConfig, DenseTable, Direction, RowIndex, ScalarStorage, SparseOptimizer,
    TablePrecision,
};
fn config(sel: u8) -> BasisConfig {
    let direction = [
        Direction::Shared,
        Direction::Signed,
        Direction::OwnGradient,
        Direction::RowScaled,
    ][usize::from(sel % 4)];
    let scalar_storage = [
        ScalarStorage::F32,
        ScalarStorage::Bf16,
        ScalarStorage::LogU8,
    ][usize::from(sel / 4 % 3)];
    let table_precision = if sel / 12 % 2 == 0 {
        TablePrecision::F32
    } else {
        TablePrecision::Bf16
    };
    let row_index = if sel / 24 % 2 == 0 {
        RowIndex::Sparse
    } else {
        RowIndex::Dense { rows: 6 }
    };
    BasisConfig {
        dim: 2,
        direction,
        scalar_storage,
        table_precision,
        row_index,
        ..BasisConfig::default()
    }
}
// The input is split into batches at every 0xFF byte; a batch is read as 9-byte rows:
// an id byte (taken mod 8, so ids 6 and 7 miss the 6-row table) and two f32 gradient values.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut opt = Basis::new(config(sel), balanced_hash::OneChoice::new(3, 1).unwrap()).unwrap();
    let mut weights = [0.5f32; 12];
    for batch in rest.split(|&b| b == 0xFF) {
        let rows: Vec<&[u8]> = batch.chunks_exact(9).collect();
        let ids: Vec<u64> = rows.iter().map(|r| u64::from(r[0] % 8)).collect();
        let grads: Vec<f32> = rows
            .iter()
            .flat_map(|r| {
                [
                    f32::from_le_bytes(r[1..5].try_into().unwrap()),
                    f32::from_le_bytes(r[5..9].try_into().unwrap()),
                ]
            })
            .collect();
        let _ = opt.step(&ids, &grads, &mut DenseTable::new(&mut weights, 2).unwrap());
        for b in 0..3 {
            let view = opt.bucket_view(b).unwrap();
            assert!(
                view.m
                    .iter()
                    .flatten()
                    .chain(&view.v)
                    .all(|x| x.is_finite()),
                "bucket {b}: {view:?}"
            );
        }
    }
});
