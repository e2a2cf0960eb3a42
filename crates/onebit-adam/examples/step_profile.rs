//! A fixed number of 1-bit Adam steps on one rank, for instruction counts
//! (`valgrind --tool=callgrind`), where the busy machine makes wall time
//! useless: run it with `K` and `K + 10` steps and divide the difference of
//! the totals by 10 (setup, the first warm-up and the first 1-bit step
//! cancel).
//!
//! Modes: `momentum`, `pre` — compressed steps (`Variant::Momentum`;
//! `PreconditionedMomentum` with bias correction); `warmup` — full-precision
//! warm-up steps (a fixed freeze step no run reaches); `auto` — warm-up
//! steps under `FreezePolicy::Auto` with a window of 1 and a threshold
//! never met, so every step takes the freeze's measure of `v̂` (the most
//! it can cost; the default window measures every 25th step); `accum` —
//! warm-up steps as `accumulate(g)` twice, then `step` (two micro-batches).
//!
//! `cargo run --release -p basisopt-onebit-adam --example step_profile -- momentum|pre|warmup|auto|accum N K`

use comm_traits::SingleRank;
use onebit_adam::{AutoFreeze, Config, FreezePolicy, OneBitAdam, OneBitError, Variant};

fn main() -> Result<(), OneBitError> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: step_profile momentum|pre|warmup|auto|accum N K";
    let (variant, n, k) = match args.as_slice() {
        [_, v, n, k] => (v.as_str(), n.parse::<usize>(), k.parse::<u64>()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let (Ok(n), Ok(k)) = (n, k) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let never = u64::MAX / 2;
    let config = match variant {
        "momentum" => Config::default().with_freeze_step(1),
        "pre" => Config::default()
            .with_variant(Variant::PreconditionedMomentum)
            .with_bias_correction(true)
            .with_freeze_step(1),
        "warmup" | "accum" => Config::default().with_freeze_step(never),
        "auto" => Config::default().with_freeze(FreezePolicy::Auto(
            AutoFreeze::default()
                .with_window(1)
                .with_threshold(1e-300)
                .with_min_step(never)
                .with_max_step(never),
        )),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let mut opt = OneBitAdam::new(n, config)?;
    let mut comm = SingleRank::default();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-2
    };
    let g: Vec<f32> = (0..n).map(|_| next()).collect();
    let mut x: Vec<f32> = (0..n).map(|_| next()).collect();
    // Two steps more than `K`: (compressed modes) the warm-up step and the
    // first 1-bit step, which builds the frozen values; (warm-up modes) the
    // first step, which clears the zero mask, and the first measure.
    for _ in 0..2 + k {
        if variant == "accum" {
            opt.accumulate(&g)?;
            opt.accumulate(&g)?;
            opt.step(&mut comm, &mut x)?;
        } else {
            opt.step_with_grad(&mut comm, &mut x, &g)?;
        }
    }
    println!("{}", x.iter().map(|&v| f64::from(v)).sum::<f64>());
    Ok(())
}
