//! Two workers send 1-bit compressed gradients to a server over a byte
//! channel (`Compressed::encode` / `decode`), with error feedback, for 50
//! steps; the server's running sum of the decoded means tracks the sum of
//! the true means, off by exactly the workers' remaining error buffers.
//!
//! Run with `cargo run -p basisopt-onebit-codec --example error_feedback`
//! (`cargo test --examples` runs it as a test too).

use onebit_codec::{CodecError, Compressor, decode, packed_len};

const N: usize = 1000;
const WORKERS: usize = 2;
const STEPS: usize = 50;

/// A deterministic "gradient" of worker `w` at step `t` (no RNG crate needed).
fn gradient(w: usize, t: usize) -> Vec<f32> {
    (0..N)
        .map(|j| {
            let phase = (j * 7 + w * 13 + t * 3) as f32;
            (phase * 0.37).sin() * (1.0 + (j % 5) as f32)
        })
        .collect()
}

fn run() -> Result<(), CodecError> {
    let mut workers: Vec<Compressor> = (0..WORKERS).map(|_| Compressor::new(N)).collect();
    let mut decoded_sum = vec![0.0f64; N];
    let mut true_sum = vec![0.0f64; N];
    let mut wire_bytes = 0usize;
    for t in 0..STEPS {
        let mut mean = vec![0.0f32; N];
        for (w, compressor) in workers.iter_mut().enumerate() {
            let g = gradient(w, t);
            for (s, &x) in true_sum.iter_mut().zip(&g) {
                *s += f64::from(x) / WORKERS as f64;
            }
            // Worker side: p = g + e, send α·σ(p), keep e = p − α·σ(p).
            let wire = compressor.compress(&g)?.encode();
            wire_bytes += wire.len();
            // Server side: check and decode the bytes, accumulate the mean.
            let mut x_hat = vec![0.0f32; N];
            decode(&wire)?.decode_add(&mut x_hat)?;
            for (m, x) in mean.iter_mut().zip(x_hat) {
                *m += x / WORKERS as f32;
            }
        }
        for (s, m) in decoded_sum.iter_mut().zip(mean) {
            *s += f64::from(m);
        }
    }
    // Σ decoded + mean of the error buffers = Σ true (error feedback telescopes).
    let mut worst = 0.0f64;
    for j in 0..N {
        let err: f64 = workers
            .iter_mut()
            .map(|c| f64::from(c.materialize_error()[j]))
            .sum::<f64>()
            / WORKERS as f64;
        worst = worst.max((decoded_sum[j] + err - true_sum[j]).abs());
    }
    assert!(worst < 1e-3, "telescoping sum off by {worst}");
    let raw = STEPS * WORKERS * N * 4;
    assert!(wire_bytes * 25 < raw, "1-bit messages must be ~32x smaller");
    println!(
        "{STEPS} steps x {WORKERS} workers: {wire_bytes} wire bytes vs {raw} as f32 \
         ({} sign bytes per message); sum of decoded means within {worst:.2e} of the true sum",
        packed_len(N)
    );
    Ok(())
}

fn main() -> Result<(), CodecError> {
    run()
}

#[test]
fn example_runs() {
    run().unwrap();
}
