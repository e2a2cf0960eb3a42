//! The baselines' exported state blobs after fixed, integer-driven
//! workloads, pinned by a 64-bit FNV-1a digest: a refactor of their shared plumbing must
//! leave the bytes (layout and every value) unchanged. Values pinned with
//! the per-optimizer implementations before they were folded into one
//! driver (`src/rows.rs`).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use basis_core::{
    Adam8bit, AdamConfig, DenseTable, Ftrl, FtrlConfig, PartialRowwiseAdam, RowIndex, RowStepAdam,
    SparseOptimizer,
};

const DIM: usize = 5;
const ROWS: u64 = 40;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Digest of the blob and the trained table after 20 steps (one batch with
/// a non-finite gradient, skipped by the default policy).
fn digest(opt: &mut dyn SparseOptimizer) -> u64 {
    let mut rng = 7u64;
    let mut table: Vec<f32> = (0..ROWS as usize * DIM)
        .map(|i| ((i % 13) as f32 - 6.0) / 16.0)
        .collect();
    for step in 0..20 {
        let ids: Vec<u64> = (0..9).map(|_| splitmix(&mut rng) % ROWS).collect();
        let mut grads: Vec<f32> = (0..ids.len() * DIM)
            .map(|_| ((splitmix(&mut rng) >> 53) as f32 - 1024.0) / 1024.0)
            .collect();
        if step == 5 {
            grads[3] = f32::NAN;
        }
        opt.step(&ids, &grads, &mut DenseTable::new(&mut table, DIM).unwrap())
            .unwrap();
    }
    let mut bytes = opt.export_state();
    table.iter().for_each(|x| bytes.extend(x.to_le_bytes()));
    fnv1a(&bytes)
}

/// FNV-1a (64-bit). Not a CRC: the blob ends in its own CRC-32, and a CRC
/// over a message followed by its CRC is a constant, which would hide the
/// blob from the digest.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn baseline_blobs_are_unchanged() {
    let mut got = Vec::new();
    for index in [RowIndex::Dense { rows: ROWS }, RowIndex::Sparse] {
        let adam = AdamConfig::default()
            .with_dim(DIM)
            .with_lr(0.01)
            .with_weight_decay(0.1)
            .with_row_index(index);
        let ftrl = FtrlConfig::default()
            .with_dim(DIM)
            .with_l1(0.01)
            .with_l2(0.1)
            .with_row_index(index);
        let mut opts: Vec<Box<dyn SparseOptimizer>> = vec![
            Box::new(PartialRowwiseAdam::new(adam).unwrap()),
            Box::new(RowStepAdam::new(adam).unwrap()),
            Box::new(Ftrl::new(ftrl).unwrap()),
            Box::new(Adam8bit::new(adam, 2).unwrap()),
        ];
        for opt in &mut opts {
            got.push(digest(opt.as_mut()));
        }
    }
    let hex: Vec<String> = got.iter().map(|x| format!("{x:#018x}")).collect();
    assert_eq!(hex, PINNED, "a baseline's state blob or result changed");
}

/// Partial row-wise Adam, row-step Adam, FTRL, 8-bit Adam; dense, then sparse.
const PINNED: [&str; 8] = [
    "0x26691581d7909f28",
    "0xbadf3acc594a2d92",
    "0x97e807edd38c9034",
    "0x42e02746603aa38b",
    "0x53505fb688d90a23",
    "0x4b8309b778e9c410",
    "0xe327d2a145ebcbbd",
    "0x3abd68f42b4fa05f",
];
