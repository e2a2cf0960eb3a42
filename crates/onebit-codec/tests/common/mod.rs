//! Obviously-correct slow references shared by the integration tests.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use onebit_codec::{ErrorFeedback, ScaleKind};

/// Sign rule written out: bit 1 iff x is not less than zero.
pub(crate) fn naive_bit(x: f32) -> bool {
    #[allow(clippy::neg_cmp_op_on_partial_ord, reason = "the rule itself")]
    let b = !(x < 0.0);
    b
}

/// Pack one bit at a time: element i → byte i / 8, bit 7 − i % 8.
pub(crate) fn naive_pack(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len().div_ceil(8)];
    for (i, &v) in x.iter().enumerate() {
        if naive_bit(v) {
            out[i / 8] |= 1 << (7 - i % 8);
        }
    }
    out
}

/// Bit i of a packed buffer.
pub(crate) fn naive_get(bits: &[u8], i: usize) -> bool {
    bits[i / 8] >> (7 - i % 8) & 1 == 1
}

/// The documented 8-lane f64 reduction, written as a plain loop.
pub(crate) fn naive_lane_sum(x: &[f32], term: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0.0f64; 8];
    for (i, &v) in x.iter().enumerate() {
        lanes[i % 8] += term(v);
    }
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
}

/// The documented scale formulas.
pub(crate) fn naive_scale(kind: ScaleKind, x: &[f32]) -> f32 {
    let n = x.len() as f64;
    match kind {
        _ if x.is_empty() && kind == ScaleKind::Unit => 1.0,
        _ if x.is_empty() => 0.0,
        ScaleKind::Rms => (naive_lane_sum(x, |v| f64::from(v) * f64::from(v)) / n).sqrt() as f32,
        ScaleKind::MeanAbs => (naive_lane_sum(x, |v| f64::from(v).abs()) / n) as f32,
        ScaleKind::MaxAbs => x.iter().fold(0.0f32, |m, v| m.max(v.abs())),
        ScaleKind::Unit => 1.0,
    }
}

/// One error-feedback step element by element; returns (signs, scales).
pub(crate) fn naive_step(
    x: &[f32],
    e: &mut [f32],
    feedback: ErrorFeedback,
    kind: ScaleKind,
    chunk: Option<usize>,
) -> (Vec<u8>, Vec<f32>) {
    let n = x.len();
    let chunk = chunk.unwrap_or(n.max(1));
    let p: Vec<f32> = (0..n).map(|i| x[i] + e[i]).collect();
    let scales: Vec<f32> = p.chunks(chunk).map(|c| naive_scale(kind, c)).collect();
    let bits = naive_pack(&p);
    for i in 0..n {
        let alpha = scales[i / chunk];
        let sigma = if naive_bit(p[i]) { 1.0f32 } else { -1.0 };
        let delta = p[i] - alpha * sigma;
        e[i] = match feedback {
            ErrorFeedback::Full => delta,
            ErrorFeedback::Decayed { beta } => beta * e[i] + (1.0 - beta) * delta,
        };
    }
    (bits, scales)
}

/// Bit patterns, so `-0.0 != 0.0` and comparisons are exact.
pub(crate) fn bits_of(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
