//! `SparseOptimizer::import_state` of `basis_core` on arbitrary bytes (byte 0 picks one of 48 BASIS configs,
//! or exact Adam / row-wise AdaGrad / SGD): an error leaves the optimizer unchanged; an accepted blob re-exports to the same bytes.
#![no_main]
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, Direction, ExactAdam, RowIndex, RowwiseAdagrad,
    ScalarStorage, Sgd, SparseOptimizer, TablePrecision,
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
fn optimizer(sel: u8) -> Box<dyn SparseOptimizer> {
    let row_index = if sel % 2 == 0 {
        RowIndex::Sparse
    } else {
        RowIndex::Dense { rows: 6 }
    };
    match sel {
        0..48 => {
            Box::new(Basis::new(config(sel), balanced_hash::OneChoice::new(3, 1).unwrap()).unwrap())
        }
        48..50 => Box::new(
            ExactAdam::new(AdamConfig {
                dim: 2,
                row_index,
                ..AdamConfig::default()
            })
            .unwrap(),
        ),
        50..52 => Box::new(
            RowwiseAdagrad::new(AdagradConfig {
                dim: 2,
                row_index,
                ..AdagradConfig::default()
            })
            .unwrap(),
        ),
        _ => Box::new(Sgd::new(2, 0.1).unwrap()),
    }
}
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, blob)) = data.split_first() else {
        return;
    };
    let mut opt = optimizer(sel);
    let before = opt.export_state();
    let after = if opt.import_state(blob).is_ok() {
        blob.to_vec()
    } else {
        before
    };
    assert_eq!(opt.export_state(), after);
});
