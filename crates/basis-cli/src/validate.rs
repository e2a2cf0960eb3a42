//! Checks of user input made before any work starts: clap value parsers for
//! the numeric options (so a bad number is a parse error naming the option),
//! the output-path probe, the allocation-size message, and the divergence
//! check of the training loops.
//!
//! Numbers are parsed with Rust's `FromStr`, which accepts `nan` and `inf`;
//! every parser here rejects them, so no run starts with a NaN
//! hyper-parameter (which trained to NaN loss and exited 0 before).

use std::path::Path;

/// A value parser of `T` that also requires `ok(value)`; `what` finishes the
/// sentence "must be …" in the error clap prints (clap names the option).
fn checked<T>(text: &str, ok: impl Fn(T) -> bool, what: &str) -> Result<T, String>
where
    T: core::str::FromStr + Copy,
{
    let v: T = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if ok(v) {
        Ok(v)
    } else {
        Err(format!("must be {what}, got `{text}`"))
    }
}

/// A finite `f32 > 0` (learning rates).
pub(crate) fn positive_f32(text: &str) -> Result<f32, String> {
    checked(text, |x: f32| x.is_finite() && x > 0.0, "finite and > 0")
}

/// A finite `f32 ≥ 0` (penalties).
pub(crate) fn non_negative_f32(text: &str) -> Result<f32, String> {
    checked(text, |x: f32| x.is_finite() && x >= 0.0, "finite and >= 0")
}

/// Largest `--init-std`: an FM logit sums `k · fields²/2` products of two
/// embedding values, so stds much above 1 start with saturated logits (and
/// 1e30 overflowed every logit to ±∞, training to NaN).
pub(crate) const MAX_INIT_STD: f32 = 1.0;

/// The initial embedding std: finite, in `[0, MAX_INIT_STD]`.
pub(crate) fn init_std(text: &str) -> Result<f32, String> {
    checked(
        text,
        |x: f32| (0.0..=MAX_INIT_STD).contains(&x),
        "finite and in [0, 1]",
    )
}

/// A split fraction: finite, in `[0, 1)`.
pub(crate) fn fraction(text: &str) -> Result<f64, String> {
    checked(text, |x: f64| (0.0..1.0).contains(&x), "in [0, 1)")
}

/// A count `≥ 1` (`u32`: epochs, seeds).
pub(crate) fn count_u32(text: &str) -> Result<u32, String> {
    checked(text, |x: u32| x >= 1, "at least 1")
}

/// A count `≥ 1` (`usize`: batch, dim, workers).
pub(crate) fn count_usize(text: &str) -> Result<usize, String> {
    checked(text, |x: usize| x >= 1, "at least 1")
}

/// Fails unless a file can be created (or replaced) at `path`, without
/// leaving anything behind: `option` names the flag in the message. Run for
/// every output before training, so a run never trains for an hour and then
/// loses its results to a typo in a path.
///
/// The probe creates and deletes a uniquely named empty file next to `path`
/// (the only reliable test: permissions, read-only mounts and root's
/// privileges all decide), and opens an existing `path` for writing without
/// truncating it.
pub(crate) fn writable_file(option: &str, path: &Path) -> Result<(), String> {
    let fail = |why: String| format!("{option} {}: cannot write there: {why}", path.display());
    if path.is_dir() {
        return Err(fail("it is a directory".into()));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    probe_dir(dir.unwrap_or(Path::new(".")), path).map_err(fail)?;
    if path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}

/// Fails unless `dir` exists or can be created, and a file can be created in
/// it (the checkpoint directory; it is created here, as the first save
/// would).
pub(crate) fn writable_dir(option: &str, dir: &Path) -> Result<(), String> {
    let fail = |why: String| format!("{option} {}: cannot write there: {why}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    probe_dir(dir, &dir.join("probe")).map_err(fail)
}

/// Create and remove an empty file in `dir`, named after `near` and this
/// process so it cannot collide with real files or other runs.
fn probe_dir(dir: &Path, near: &Path) -> Result<(), String> {
    let stem = near
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let probe = dir.join(format!(".{stem}.basis-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| e.to_string())?;
    std::fs::remove_file(&probe).map_err(|e| e.to_string())
}

/// `len` zeroed `f32`s, or a one-line error naming `option` (its value is
/// `value`) and the bytes the vector would need: `what` says what it is for
/// (the model table, with `rows × per_row` values).
pub(crate) fn try_zeroed(
    option: &str,
    value: usize,
    what: &str,
    rows: usize,
    per_row: usize,
) -> Result<Vec<f32>, String> {
    // u128 holds any usize × usize but the largest two; those overflow to
    // `None` and are reported as such.
    let values = u128::from(rows as u64).checked_mul(per_row as u128);
    let fail = || {
        let bytes = values.and_then(|v| v.checked_mul(4));
        let bytes = bytes.map_or_else(|| "more than 2^128".to_string(), |b| b.to_string());
        format!(
            "{option} {value}: {what} needs {bytes} bytes ({rows} rows × {per_row} values × 4 bytes), more than can be allocated"
        )
    };
    let values = values.ok_or_else(fail)?;
    let n = usize::try_from(values).map_err(|_| fail())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| fail())?;
    v.resize(n, 0.0);
    Ok(v)
}

/// Err when the running loss turned NaN or ±∞: training can only continue
/// from garbage, so the run stops and says where (1-based epoch and step
/// within it) and with which optimizer.
pub(crate) fn finite_loss(
    loss: f64,
    epoch: u32,
    step: usize,
    optimizer: &str,
) -> Result<(), String> {
    if loss.is_finite() {
        Ok(())
    } else {
        Err(format!(
            "training diverged: the loss became {loss} at epoch {epoch}, step {step} (optimizer `{optimizer}`); lower the learning rate or --init-std"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_reject_non_finite_and_out_of_range_numbers() {
        for bad in ["nan", "NaN", "inf", "-inf", "0", "-1", "x", ""] {
            assert!(positive_f32(bad).is_err(), "{bad}");
        }
        assert_eq!(positive_f32("0.5"), Ok(0.5));
        for bad in ["nan", "-5", "inf"] {
            assert!(non_negative_f32(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative_f32("0"), Ok(0.0));
        for bad in ["nan", "-1", "1e30", "1.5"] {
            assert!(init_std(bad).is_err(), "{bad}");
        }
        assert_eq!(init_std("0"), Ok(0.0));
        assert_eq!(count_u32("0").unwrap_err(), "must be at least 1, got `0`");
        assert_eq!(count_usize("3"), Ok(3));
        assert!(fraction("1").is_err() && fraction("nan").is_err());
    }

    #[test]
    fn sizes_past_the_address_space_are_an_error_not_an_abort() {
        let e = try_zeroed(
            "--dim",
            usize::MAX,
            "the model table",
            usize::MAX,
            usize::MAX,
        )
        .unwrap_err();
        assert!(e.starts_with("--dim ") && e.contains(" bytes "), "{e}");
        assert_eq!(try_zeroed("--dim", 1, "t", 3, 2).unwrap(), vec![0.0; 6]);
    }
}
