//! A fixed number of 1-bit Adam steps on one rank, for instruction counts
//! (`valgrind --tool=callgrind`), where the busy machine makes wall time
//! useless: run it with `K` and `K + 10` compressed steps and divide the
//! difference of the totals by 10 (setup and warm-up cancel).
//!
//! `cargo run --release -p basisopt-onebit-adam --example step_profile -- momentum|pre N K`

use comm_traits::SingleRank;
use onebit_adam::{Config, OneBitAdam, OneBitError, Variant};

fn main() -> Result<(), OneBitError> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: step_profile momentum|pre N K";
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
    let config = match variant {
        "momentum" => Config::default(),
        "pre" => Config::default()
            .with_variant(Variant::PreconditionedMomentum)
            .with_bias_correction(true),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let mut opt = OneBitAdam::new(n, config.with_freeze_step(1))?;
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
    // The warm-up step and the first 1-bit step (builds the frozen values).
    for _ in 0..2 + k {
        opt.step_with_grad(&mut comm, &mut x, &g)?;
    }
    println!("{}", x.iter().map(|&v| f64::from(v)).sum::<f64>());
    Ok(())
}
