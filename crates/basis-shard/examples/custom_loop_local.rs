//! A custom training loop over a sharded table on `LocalComm` (ranks as
//! threads of this process): P = 1, 2 and 3 ranks train the same logistic
//! model on the same data; the loss falls, and two runs at the same P give
//! the same model bit for bit. `cargo run -p basisopt-shard --example
//! custom_loop_local`; `cargo test` runs it
//! (`test = true`).

#[path = "common/training.rs"]
mod training;

use basis_std::local::LocalComm;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The three group sizes, twice each.
fn run() -> Result<(), String> {
    let steps = 150;
    for p in 1..=3 {
        let run = || {
            let out = LocalComm::run(p, |mut comm| training::train(&mut comm, steps));
            out.into_iter()
                .map(|r| r.map_err(|e| format!("{e:?}"))?.map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, String>>()
        };
        let (a, b) = match (run(), run()) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Err(format!("P = {p}: {e}")),
        };
        let o = a[0];
        println!(
            "P = {p}: loss {:.4} -> {:.4}, model_crc32 {:08x}",
            o.first_loss, o.last_loss, o.model_crc32
        );
        if a.iter().chain(&b).any(|x| *x != o) {
            return Err(format!(
                "P = {p}: ranks or repeated runs disagree: {a:?} {b:?}"
            ));
        }
        if o.last_loss >= 0.8 * o.first_loss {
            return Err(format!("P = {p}: the loss did not fall"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// CI runs the example (`test = true` in Cargo.toml).
    #[test]
    fn the_custom_loop_trains_and_repeats_bit_for_bit() {
        assert_eq!(super::run(), Ok(()));
    }
}
