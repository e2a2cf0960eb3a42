//! Codec throughput on 64M f32 (256 MiB) beside memcpy and a read-only sum of
//! the same buffer, measured in the same run; then `numpy.packbits` as the peer.
//!
//! `cargo bench -p basisopt-onebit-codec --bench codec -- --warm-up-time 1 --measurement-time 3`
//! Throughput is GB/s of f32 input (4 bytes per element) for every entry.

use core::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use onebit_codec::stochastic::{RandomU32, SplitMix64};
use onebit_codec::{
    Compressor, ErrorFeedback, ScaleKind, pack_signs_into, packed_len, reference, unpack_signs,
};

/// 64M elements = 256 MiB of f32: far beyond every cache.
const N: usize = 64 << 20;

fn data() -> Vec<f32> {
    let mut rng = SplitMix64::new(42);
    (0..N)
        .map(|_| (rng.next_u32() >> 8) as f32 / (1 << 24) as f32 - 0.5)
        .collect()
}

/// A bandwidth-bound read: 16 independent f32 lanes (vectorises).
fn read_sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    for g in x.chunks_exact(16) {
        for (l, &v) in lanes.iter_mut().zip(g) {
            *l += v;
        }
    }
    lanes.iter().sum()
}

fn bench(c: &mut Criterion, x: &[f32]) {
    let mut g = c.benchmark_group("codec_64M");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(4 * N as u64));
    let mut dst = vec![0.0f32; N];
    let mut bits = vec![0u8; packed_len(N)];
    g.bench_function("memcpy", |b| b.iter(|| dst.copy_from_slice(black_box(x))));
    g.bench_function("read_only_sum", |b| b.iter(|| read_sum(black_box(x))));
    g.bench_function("pack_signs", |b| {
        b.iter(|| pack_signs_into(black_box(x), &mut bits))
    });
    g.bench_function("unpack_signs", |b| {
        b.iter(|| unpack_signs(black_box(&bits), 0.5, &mut dst))
    });
    let mut fused = Compressor::new(N);
    g.bench_function("fused_compressor", |b| {
        b.iter(|| fused.compress_into(black_box(x), &mut bits))
    });
    drop(fused);
    let mut e = vec![0.0f32; N];
    let mut scale = [0.0f32];
    g.bench_function("two_pass_reference", |b| {
        b.iter(|| {
            reference::compress_step(
                black_box(x),
                &mut e,
                ErrorFeedback::Full,
                ScaleKind::Rms,
                None,
                &mut bits,
                &mut scale,
            )
        })
    });
    g.finish();
}

/// Time `numpy.packbits(~(x < 0))` on the same data (benches/numpy_packbits.py)
/// and check its bytes equal ours; skipped with a message without numpy.
fn numpy_peer(x: &[f32], pack_seconds: f64) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/numpy_packbits.py");
    let dir = std::env::temp_dir();
    let input = dir.join(format!("onebit-codec-bench-{}.f32", std::process::id()));
    let output = input.with_extension("bits");
    let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    if let Err(e) = std::fs::write(&input, raw) {
        println!("numpy peer skipped: cannot write {}: {e}", input.display());
        return;
    }
    let run = Command::new("python3")
        .arg(&script)
        .arg(&input)
        .arg(&output)
        .output();
    match run {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            print!("{text}");
            let numpy_seconds = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("median_s="))
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(s) = numpy_seconds {
                println!("pack_signs vs numpy: {:.2}x faster", s / pack_seconds);
            }
            let mut ours = vec![0u8; packed_len(x.len())];
            let same = pack_signs_into(x, &mut ours).is_ok()
                && std::fs::read(&output).is_ok_and(|theirs| theirs == ours);
            println!("numpy bytes identical to pack_signs: {same}");
        }
        Ok(out) => println!(
            "numpy peer skipped: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("python3 failed")
        ),
        Err(e) => println!("numpy peer skipped: cannot run python3: {e}"),
    }
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
}

/// Round-robin timing: each round runs every kernel once, so a burst of load
/// from other processes hits all of them alike; prints per-kernel medians and
/// the ratios the targets are stated in. Complements criterion's per-kernel
/// sampling (which runs one kernel's samples back to back).
fn interleaved_summary(x: &[f32], rounds: usize) -> f64 {
    let mut dst = vec![0.0f32; N];
    let mut bits = vec![0u8; packed_len(N)];
    let mut fused = Compressor::new(N);
    let mut e = vec![0.0f32; N];
    let mut scale = [0.0f32];
    let names = [
        "memcpy",
        "read_only_sum",
        "pack_signs",
        "unpack_signs",
        "fused_compressor",
        "two_pass_reference",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        for (k, t) in times.iter_mut().enumerate() {
            let start = Instant::now();
            match k {
                0 => dst.copy_from_slice(black_box(x)),
                1 => {
                    black_box(read_sum(black_box(x)));
                }
                2 => {
                    black_box(pack_signs_into(black_box(x), &mut bits)).ok();
                }
                3 => {
                    black_box(unpack_signs(black_box(&bits), 0.5, &mut dst)).ok();
                }
                4 => {
                    black_box(fused.compress_into(black_box(x), &mut bits)).ok();
                }
                _ => {
                    black_box(reference::compress_step(
                        black_box(x),
                        &mut e,
                        ErrorFeedback::Full,
                        ScaleKind::Rms,
                        None,
                        &mut bits,
                        &mut scale,
                    ))
                    .ok();
                }
            }
            t.push(start.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let med: Vec<f64> = times.iter_mut().map(median).collect();
    let gbs = |s: f64| 4.0 * N as f64 / s / 1e9;
    println!("interleaved medians over {rounds} rounds (GB/s of f32 input):");
    for (name, &m) in names.iter().zip(&med) {
        println!("  {name:<20} {:>8.2} ms  {:>6.2} GB/s", m * 1e3, gbs(m));
    }
    println!(
        "  pack_signs / read_only_sum = {:.0}%   fused / memcpy = {:.0}%   two_pass / memcpy = {:.0}%   fused / two_pass = {:.2}x",
        100.0 * med[1] / med[2],
        100.0 * med[0] / med[4],
        100.0 * med[0] / med[5],
        med[5] / med[4],
    );
    med[2]
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    let x = data();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &x);
    if !test_mode {
        let pack_seconds = interleaved_summary(&x, 9);
        numpy_peer(&x, pack_seconds);
    }
    c.final_summary();
}
