//! Running `cargo test` commands and counting their libtest results, for
//! `cargo xtask ci`'s closing `ci: N passed, N failed` line (the `test` step
//! and `publish-check` both run tests).

use crate::util;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Tests counted by [`run`] in this process.
static TESTS_PASSED: AtomicU64 = AtomicU64::new(0);
static TESTS_FAILED: AtomicU64 = AtomicU64::new(0);

/// `(passed, failed)` summed over every [`run`] so far.
pub(crate) fn totals() -> (u64, u64) {
    (
        TESTS_PASSED.load(Ordering::Relaxed),
        TESTS_FAILED.load(Ordering::Relaxed),
    )
}

/// Runs a `cargo test` command, echoing its output, and adds its summed
/// libtest results to the CI's closing count; fails when cargo does.
pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    cmd.stdout(Stdio::piped());
    eprintln!("$ {}", util::describe(cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start cargo test: {e}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some((p, f)) = parse_test_result(&line) {
                passed += p;
                failed += f;
            }
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    println!("tests: {passed} passed, {failed} failed");
    TESTS_PASSED.fetch_add(passed, Ordering::Relaxed);
    TESTS_FAILED.fetch_add(failed, Ordering::Relaxed);
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo test failed: {status}"))
    }
}

/// `(passed, failed)` of a libtest `test result: ok. 3 passed; 0 failed; …` line.
fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let count = |word: &str| {
        rest.split(';').find_map(|part| {
            part.trim()
                .strip_suffix(word)?
                .trim()
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
    };
    Some((count(" passed")?, count(" failed")?))
}

#[cfg(test)]
mod tests {
    use super::parse_test_result;

    #[test]
    fn reads_libtest_summaries() {
        let ok = "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.30s";
        assert_eq!(parse_test_result(ok), Some((12, 0)));
        let bad = "test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(parse_test_result(bad), Some((2, 3)));
        assert_eq!(parse_test_result("running 3 tests"), None);
    }
}
