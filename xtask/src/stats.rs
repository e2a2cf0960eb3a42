//! Small helpers the benchmark commands share: the median of a sample and
//! the machine's load average (printed with every timed round, since a
//! figure taken on a busy machine must say so).

/// The median (the mean of the two middle values for an even count; NaN
/// for none).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The 1-, 5- and 15-minute load averages as `/proc/loadavg` gives them.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The first number after the first `key` in `text` (enough for the CLI's
/// `--json` records: `"wall_secs": {"mean": 1.2, …}`, `"model_crc32": 7`).
pub(crate) fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let start = rest.find(|c: char| c.is_ascii_digit() || c == '-')?;
    let rest = &rest[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "-+.eE".contains(c)))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_numbers() {
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
        let j = r#"{"x": 1, "wall_secs": {"mean": 4.25e0, "std": 0.0}, "model_crc32": 468546628}"#;
        assert_eq!(number_after(j, "\"wall_secs\""), Some(4.25));
        assert_eq!(number_after(j, "\"model_crc32\""), Some(468_546_628.0));
        assert_eq!(number_after(j, "\"nope\""), None);
    }

    #[test]
    fn median_of_odd_even_and_unsorted() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
        // Against the slow definition: half the values on each side.
        let xs = [2.9, 3.4, 2.2, 3.1, 2.8];
        let m = median(&xs);
        assert_eq!(xs.iter().filter(|&&x| x < m).count(), 2);
        assert_eq!(xs.iter().filter(|&&x| x > m).count(), 2);
    }
}
