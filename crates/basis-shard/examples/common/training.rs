//! The custom training loop both examples run: a logistic model whose logit
//! is the mean of its examples' embedding values, rows in a sharded table
//! with exact Adam, synthetic click data every rank can regenerate.

use basis_core::{AdamConfig, ExactAdam, RowIndex};
use basis_shard::{OwnerRule, RowInit, ShardError, ShardedTable, TableConfig};
use comm_traits::Communicator;

/// Values per row.
pub(crate) const DIM: usize = 8;
/// Features (ids) per example.
const FIELDS: usize = 3;
/// Examples per global batch.
const BATCH: usize = 64;

/// What a run ends with, identical on every rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outcome {
    /// Mean log-loss of the first step's batch.
    pub(crate) first_loss: f32,
    /// Mean log-loss of the last step's batch.
    pub(crate) last_loss: f32,
    /// CRC-32 over every rank's table checksum, in rank order.
    pub model_crc32: u32,
}

/// SplitMix64 of `x`.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Example `e`: its ids (skewed: small ids are frequent, any of 2^64) and
/// its label (clicked iff the sum of the ids' hidden affinities is > 0).
fn example(e: u64) -> ([u64; FIELDS], f32) {
    let mut ids = [0u64; FIELDS];
    let mut affinity = 0i64;
    for (f, id) in ids.iter_mut().enumerate() {
        let r = mix(e * FIELDS as u64 + f as u64);
        let rank = (r % 1000) * (r % 1000) / 1000; // skewed toward 0
        *id = mix(rank ^ ((f as u64) << 56)); // spread over the id space
        affinity += if mix(*id).is_multiple_of(3) { -2 } else { 1 };
    }
    (ids, if affinity > 0 { 1.0 } else { 0.0 })
}

/// `steps` training steps over `comm`: each rank takes positions
/// `rank, rank + P, …` of each global batch.
pub(crate) fn train(comm: &mut dyn Communicator, steps: u64) -> Result<Outcome, ShardError> {
    let (rank, p) = (comm.rank(), comm.size());
    let owner = OwnerRule::hashed(p, 11)?;
    let adam = ExactAdam::new(
        AdamConfig::default()
            .with_dim(DIM)
            .with_lr(0.05)
            .with_row_index(RowIndex::Dense { rows: 0 }),
    )
    .map_err(|_| ShardError::BadConfig("Adam configuration"))?;
    let config = TableConfig::new(DIM, owner, rank).with_init(RowInit::uniform(3, 0.01));
    let mut table = ShardedTable::new(config, adam)?;
    let (mut first_loss, mut last_loss) = (0.0, 0.0);
    for step in 0..steps {
        let mine: Vec<u64> = (step * BATCH as u64..(step + 1) * BATCH as u64)
            .skip(rank)
            .step_by(p)
            .collect();
        let examples: Vec<([u64; FIELDS], f32)> = mine.iter().map(|&e| example(e)).collect();
        let ids: Vec<u64> = examples.iter().flat_map(|x| x.0).collect();
        let batch = table.lookup(comm, &ids)?;
        let mut grads = vec![0.0f32; batch.rows.len()];
        let mut loss = [0.0f32];
        for (feats, y) in &examples {
            let pos: Vec<usize> = feats
                .iter()
                .map(|&id| batch.position(id).unwrap_or(0))
                .collect();
            let z: f32 = pos.iter().flat_map(|&k| batch.row(k)).sum::<f32>() / DIM as f32;
            let q = 1.0 / (1.0 + (-z).exp());
            loss[0] -= if *y > 0.5 {
                q.max(1e-7).ln()
            } else {
                (1.0 - q).max(1e-7).ln()
            };
            // d(mean loss)/d(value): (q − y) / (DIM · BATCH), whichever
            // rank computes it, so the ranks' gradients sum to the batch's.
            let g = (q - y) / (DIM * BATCH) as f32;
            for &k in &pos {
                for v in &mut grads[k * DIM..(k + 1) * DIM] {
                    *v += g;
                }
            }
        }
        table.apply(comm, &batch, &grads)?;
        comm.all_reduce_sum(&mut loss)?;
        let mean = loss[0] / BATCH as f32;
        if step == 0 {
            first_loss = mean;
        }
        last_loss = mean;
    }
    let mut all = vec![0u8; 8 * p];
    comm.all_gather(&table.checksum().to_le_bytes(), &mut all)?;
    Ok(Outcome {
        first_loss,
        last_loss,
        model_crc32: crc32(&all),
    })
}

/// CRC-32 (IEEE) of `bytes`, bitwise: the examples need no other crate.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}
