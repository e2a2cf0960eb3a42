//! `basis_core::Basis::import_state` on arbitrary bytes (byte 0 picks one of 48 configs): an error leaves the optimizer unchanged; an accepted blob re-exports to the same bytes.
#![no_main]
use basis_core::{Basis, BasisConfig, Direction, RowIndex, ScalarStorage, SparseOptimizer, TablePrecision};
fn config(sel: u8) -> BasisConfig {
    let direction = [Direction::Shared, Direction::Signed, Direction::OwnGradient, Direction::RowScaled][usize::from(sel % 4)];
    let scalar_storage = [ScalarStorage::F32, ScalarStorage::Bf16, ScalarStorage::LogU8][usize::from(sel / 4 % 3)];
    let table_precision = if sel / 12 % 2 == 0 { TablePrecision::F32 } else { TablePrecision::Bf16 };
    let row_index = if sel / 24 % 2 == 0 { RowIndex::Sparse } else { RowIndex::Dense { rows: 6 } };
    BasisConfig { dim: 2, direction, scalar_storage, table_precision, row_index, ..BasisConfig::default() }
}
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, blob)) = data.split_first() else { return };
    let mut opt = Basis::new(config(sel), balanced_hash::OneChoice::new(3, 1).unwrap()).unwrap();
    let before = opt.export_state();
    let after = if opt.import_state(blob).is_ok() { blob.to_vec() } else { before };
    assert_eq!(opt.export_state(), after);
});
