//! What the version-2 checksum costs: compress + encode of a 64 MiB f32
//! tensor (16 Mi elements) against the CRC-32C of its wire bytes alone,
//! interleaved round by round, medians of the rounds.
//!
//! `cargo bench -p basisopt-onebit-codec --bench wire_crc` (release; prints one line
//! per quantity and the ratio; record `cat /proc/loadavg` beside it).

use core::hint::black_box;
use std::time::Instant;

use onebit_codec::{Compressor, crc32c};

/// 16 Mi f32 = 64 MiB of input.
const N: usize = 16 << 20;
/// Rounds; each times every quantity once, in turn.
const ROUNDS: usize = 9;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let x: Vec<f32> = (0..N)
        .map(|i| {
            ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as f32 / (1u64 << 24) as f32
                - 0.5
        })
        .collect();
    let mut c = Compressor::new(N);
    let (mut full, mut encode, mut crc) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let payload = c.compress(black_box(&x)).expect("finite input");
        let wire = payload.encode();
        full.push(t.elapsed().as_secs_f64());
        bytes = wire.len();
        let t = Instant::now();
        black_box(payload.encode());
        encode.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(crc32c(black_box(&wire)));
        crc.push(t.elapsed().as_secs_f64());
    }
    let (full, encode, crc) = (median(full), median(encode), median(crc));
    println!("input 64 MiB f32, wire {bytes} bytes, {ROUNDS} interleaved rounds, medians:");
    println!("  compress + encode (v2, with CRC) {:8.3} ms", full * 1e3);
    println!("  encode alone (v2, with CRC)      {:8.3} ms", encode * 1e3);
    println!("  CRC-32C of the wire bytes        {:8.3} ms", crc * 1e3);
    println!(
        "  CRC / (compress + encode without CRC) = {:.2} %",
        100.0 * crc / (full - crc)
    );
    println!(
        "  CRC / (encode alone without CRC)      = {:.2} %",
        100.0 * crc / (encode - crc).max(f64::MIN_POSITIVE)
    );
}
