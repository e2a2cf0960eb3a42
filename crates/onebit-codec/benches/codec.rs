//! Codec throughput on 64M f32 (256 MiB) beside memcpy and a read-only sum of
//! the same buffer, measured in the same run; then `numpy.packbits` as the peer.
//!
//! `cargo bench -p onebit-codec --bench codec -- --warm-up-time 1 --measurement-time 3`
//! Throughput is GB/s of f32 input (4 bytes per element) for every entry.

use core::hint::black_box;
use std::path::Path;
use std::process::Command;

use criterion::{Criterion, Throughput};
use onebit_codec::stochastic::SplitMix64;
use onebit_codec::{
    Compressor, ErrorFeedback, ScaleKind, pack_signs_into, packed_len, reference, unpack_signs,
};
use rand_core::RngCore;

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
fn numpy_peer(x: &[f32]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/numpy_packbits.py");
    let dir = std::env::temp_dir();
    let input = dir.join(format!("onebit-codec-bench-{}.f32", std::process::id()));
    let output = input.with_extension("bits");
    let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    if let Err(e) = std::fs::write(&input, raw) {
        println!("numpy peer skipped: cannot write {}: {e}", input.display());
        return;
    }
    let run = Command::new("python3").arg(&script).arg(&input).arg(&output).output();
    match run {
        Ok(out) if out.status.success() => {
            print!("{}", String::from_utf8_lossy(&out.stdout));
            let mut ours = vec![0u8; packed_len(x.len())];
            let same = pack_signs_into(x, &mut ours).is_ok()
                && std::fs::read(&output).is_ok_and(|theirs| theirs == ours);
            println!("numpy bytes identical to pack_signs: {same}");
        }
        Ok(out) => println!(
            "numpy peer skipped: {}",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("python3 failed")
        ),
        Err(e) => println!("numpy peer skipped: cannot run python3: {e}"),
    }
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    let x = data();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &x);
    if !test_mode {
        numpy_peer(&x);
    }
    c.final_summary();
}
