//! A timing server for the dense kernels, driven line by line over stdin so
//! a harness can interleave it round by round with a PyTorch/numpy peer
//! (the workspace's `cargo xtask bench --peers` does).
//!
//! Protocol: each input line names one kernel; the server runs it once on
//! its resident 64 Mi-element tensors and answers one line with the
//! milliseconds it took (`quit` or end of input stops). Kernels:
//!
//! - `memcpy`: `copy_from_slice` of 256 MiB (the bandwidth baseline);
//! - `sum`: read-only sum of 256 MiB (16 `f32` lanes, one read stream);
//! - `sum4`: the same sum over four far-apart quarters in turn (four read
//!   streams, as `pack_signs_into` reads: one stream leaves part of a
//!   core's memory bandwidth unused);
//! - `adam1` / `adam2`: one dense Adam(W) step (`AdamW::step`, bias
//!   correction on, as `torch.optim.Adam`) on 1 thread / `par_adam_step` on
//!   a 2-thread pool; `adam1_ds`: 1 thread without bias correction (1-bit
//!   Adam's default, as DeepSpeed);
//! - `onebit_local`: 1-bit Adam's compressed-stage local step as the
//!   optimizer runs it when every coordinate is live: the momentum
//!   `β₁·m + (1−β₁)·g` formed inside the worker compressor's pass
//!   (`Compressor::compress_blend_into`: signs and scale into the send
//!   buffer); no communication;
//! - `compress`: the fused error-feedback compressor alone (Full, RMS);
//! - `pack`: `pack_signs_into`;
//! - `onebit_step`: what a user calls, `OneBitAdam::step_with_grad`, in the
//!   full-precision warm-up on one rank (`SingleRank`), the default config
//!   (no bias correction, the automatic freeze's measure every 25th step)
//!   with a freeze that never comes, so every call is a warm-up step: the
//!   header, the finiteness check of `g` and the fused step;
//! - `onebit_step_nochk`: the same with `FiniteCheck::Off` (no read-only
//!   check pass over `g`: what a caller who checks gradients itself runs),
//!   on its own optimizer and parameters;
//! - `bw7`: a bandwidth probe of the fused step's traffic: reads `g x m v`,
//!   writes `x m v` (`y ← y + 0·g`, values unchanged), 28 B per element.
//!
//! `adam1`, `adam1_ds` and `adam2` take an optional `:KERNEL` suffix
//! (`scalar`, `sse2`, `avx`, `avx512`) that runs them on that
//! `onebit_adam::Kernel` instead of the detected one, for interleaved A/B
//! runs of the kernels (`adam1:avx`, `adam1:avx512`, ...).
//!
//! `N` elements (default 64 Mi) can be set with the `PEERS_N` variable.

use std::io::{BufRead, Write};
use std::time::Instant;

use basis_rayon::{par_adam_step, thread_pool};
use onebit_adam::comm_traits::SingleRank;
use onebit_adam::{AdamW, AutoFreeze, Config, FiniteCheck, FreezePolicy, Kernel, OneBitAdam};
use onebit_codec::{Compressor, pack_signs_into, packed_len};
use rayon::prelude::*;

/// `basis_rayon::par_adam_step`'s block (elements per task).
const BLOCK: usize = 1 << 18;

/// `par_adam_step` on a chosen kernel (the library one always runs
/// `Kernel::detect()`): the same blocks, the same pool.
fn par_step_on(k: Kernel, h: &AdamW, x: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
    x.par_chunks_mut(BLOCK)
        .zip(m.par_chunks_mut(BLOCK))
        .zip(v.par_chunks_mut(BLOCK))
        .zip(g.par_chunks(BLOCK))
        .for_each(|(((x, m), v), g)| {
            // Same-length blocks by construction: the call cannot fail.
            let _ = h.step_scaled(k, x, m, v, g, 1.0, None);
        });
}

fn kernel_named(name: &str) -> Result<Kernel, String> {
    let k = match name {
        "scalar" => Kernel::Scalar,
        "sse2" => Kernel::Sse2,
        "avx" => Kernel::Avx,
        "avx512" => Kernel::Avx512,
        other => return Err(format!("unknown kernel `{other}`")),
    };
    if k.is_available() {
        Ok(k)
    } else {
        Err(format!("this CPU cannot run `{name}`"))
    }
}

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            // SplitMix64 → uniform in [−0.5, 0.5).
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Read-only sum in 16 independent lanes (vectorizes; not latency-bound).
fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    for c in x.chunks_exact(16) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum()
}

/// [`sum`] over the four quarters of `x` one 64-element word of each at a
/// time (the read pattern of the AVX2 `pack_signs_into`).
fn sum4(x: &[f32]) -> f32 {
    let q = x.len() / 256 * 64;
    let mut lanes = [0.0f32; 16];
    for w in (0..q).step_by(64) {
        for s in 0..4 {
            for c in x[s * q + w..s * q + w + 64].chunks_exact(16) {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += v;
                }
            }
        }
    }
    lanes.iter().sum::<f32>() + sum(&x[4 * q..])
}

/// `y ← y + 0·g` for `y` in `x m v`: the fused Adam step's memory traffic
/// (four streams read, three written) with almost no arithmetic; `0·g` is
/// not folded (it is NaN for an infinite `g`), so every load and store stays.
fn bw7(x: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
    for (((x, m), v), &g) in x.iter_mut().zip(m).zip(v).zip(g) {
        let z = 0.0 * g;
        *x += z;
        *m += z;
        *v += z;
    }
}

fn main() -> Result<(), Box<dyn core::error::Error>> {
    let n: usize = std::env::var("PEERS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20);
    let src = data(n, 1);
    let mut dst = vec![0.0f32; n];
    let g = data(n, 2);
    let mut x = data(n, 3);
    let mut m = vec![0.0f32; n];
    let mut v = vec![0.0f32; n];
    let mut signs = vec![0u8; packed_len(n)];
    let mut comp = Compressor::new(n);
    let pool = thread_pool(2)?;
    // The default config but a freeze that never comes: every call is a
    // warm-up step (measure every 25th, as `auto`'s default window).
    let never = u64::MAX / 2;
    let auto = AutoFreeze::default()
        .with_min_step(never)
        .with_max_step(never);
    let config = Config::default().with_freeze(FreezePolicy::Auto(auto));
    let mut onebit = OneBitAdam::new(n, config)?;
    let mut ox = data(n, 4);
    let mut unchecked = OneBitAdam::new(n, config.with_finite_check(FiniteCheck::Off))?;
    let mut ux = data(n, 4);
    let mut comm = SingleRank::default();
    let mut t = 0u64;
    let (b1, b2) = (0.9f64, 0.999f64);
    let mut sink = 0.0f32;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let (kernel, forced) = match line.trim().split_once(':') {
            Some((kernel, k)) => (kernel, Some(kernel_named(k)?)),
            None => (line.trim(), None),
        };
        if kernel == "quit" {
            break;
        }
        if forced.is_some() && !matches!(kernel, "adam1" | "adam1_ds" | "adam2") {
            return Err(format!("`{kernel}` takes no `:KERNEL` suffix").into());
        }
        t += 1;
        // torch.optim.Adam's defaults, bias correction on (its only mode).
        let ti = i32::try_from(t.min(1000))?;
        let h = AdamW::default()
            .with_lr(1e-3)
            .with_beta1(0.9)
            .with_beta2(0.999)
            .with_eps(1e-8)
            .with_weight_decay(0.0)
            .with_bias(Some((
                (1.0 - b1.powi(ti)) as f32,
                (1.0 - b2.powi(ti)) as f32,
            )));
        let start = Instant::now();
        match kernel {
            "memcpy" => dst.copy_from_slice(&src),
            "sum" => sink += sum(&src),
            "sum4" => sink += sum4(&src),
            "adam1" | "adam1_ds" => {
                // `adam1_ds`: 1-bit Adam's default (DeepSpeed), no bias correction.
                let h = if kernel == "adam1" {
                    h
                } else {
                    h.with_bias(None)
                };
                match forced {
                    Some(k) => h.step_scaled(k, &mut x, &mut m, &mut v, &g, 1.0, None)?,
                    None => h.step(&mut x, &mut m, &mut v, &g)?,
                }
            }
            "adam2" => match forced {
                Some(k) => pool.install(|| par_step_on(k, &h, &mut x, &mut m, &mut v, &g)),
                None => pool.install(|| par_adam_step(&h, &mut x, &mut m, &mut v, &g, 1.0))?,
            },
            "onebit_local" => {
                sink += comp.compress_blend_into(h.beta1, &m, 1.0 - h.beta1, &g, &mut signs)?;
            }
            "compress" => sink += comp.compress_into(&src, &mut signs)?,
            "pack" => pack_signs_into(&src, &mut signs)?,
            "onebit_step" => {
                onebit.step_with_grad(&mut comm, &mut ox, &g)?;
            }
            "onebit_step_nochk" => {
                unchecked.step_with_grad(&mut comm, &mut ux, &g)?;
            }
            "bw7" => bw7(&mut x, &mut m, &mut v, &g),
            other => return Err(format!("unknown kernel `{other}`").into()),
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        writeln!(out, "{ms:.3}")?;
        out.flush()?;
    }
    // Keep the results observable so no kernel is optimized away.
    eprintln!(
        "checksum {}",
        sink + dst[n / 2] + x[n / 3] + f32::from(signs[n / 16]) + ox[n / 5] + ux[n / 7]
    );
    Ok(())
}
