//! The 1-bit crates' cross-target digest, a module of the crate `cargo xtask
//! nostd` generates (see `xtask/src/nostd.rs`, proof 5): built for wasm32
//! (no C library, `num-traits` without `std`) and for the host with
//! `num-traits/std` on, run on both, and required equal. Not pinned: it
//! checks that the targets agree, not that the results never change.
//!
//! Fixed, integer-driven inputs: onebit-codec compressions with error
//! feedback (wire bytes), then onebit-adam steps (warm-up, then compressed
//! after `freeze_step`) on one rank: parameters and exported state.

use alloc::vec::Vec;

/// SplitMix64 step: integer only, identical everywhere.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a (32-bit) continued from `h` (not a CRC: the blobs end in their
/// own checksums, which a CRC would cancel).
fn fnv(mut h: u32, data: &[u8]) -> u32 {
    for &b in data {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Values in `[-1, 1)` in steps of 2^-10: exact in f32.
fn values(rng: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| ((splitmix(rng) >> 53) as f32 - 1024.0) / 1024.0)
        .collect()
}

/// The digest (0 when a call fails, which no target should).
pub(crate) fn digest() -> u32 {
    use onebit_adam::comm_traits::SingleRank;
    use onebit_adam::{Config, OneBitAdam};
    use onebit_codec::Compressor;
    let mut rng = 2024u64;
    let mut h = 0x811c_9dc5u32;
    let mut codec = Compressor::new(1000);
    for _ in 0..4 {
        let x = values(&mut rng, 1000);
        let Ok(out) = codec.compress(&x) else {
            return 0;
        };
        h = fnv(h, &out.encode());
    }
    const LEN: usize = 300;
    let config = Config::default().with_lr(1e-2).with_freeze_step(4);
    let Ok(mut opt) = OneBitAdam::new(LEN, config) else {
        return 0;
    };
    let mut comm = SingleRank::default();
    let mut params = values(&mut rng, LEN);
    for _ in 0..12 {
        let grad = values(&mut rng, LEN);
        if opt.step_with_grad(&mut comm, &mut params, &grad).is_err() {
            return 0;
        }
    }
    let bits: Vec<u8> = params.iter().flat_map(|p| p.to_bits().to_le_bytes()).collect();
    h = fnv(h, &bits);
    fnv(h, &opt.export_state())
}
