//! Graded codecs (2-bit, bf16) against the slow reference, their error
//! bounds, and error feedback's telescoping sum.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

use onebit_codec::graded::{decode, encode_residual, from_bf16, to_bf16};
use onebit_codec::{CodecError, Grade, reference};
use proptest::prelude::*;

fn grades() -> impl Strategy<Value = Grade> {
    prop_oneof![Just(Grade::TwoBit), Just(Grade::Bf16)]
}

/// Finite floats over many magnitudes, with zeros, subnormals and extremes.
fn values() -> impl Strategy<Value = f32> {
    prop_oneof![
        -1e3f32..1e3,
        any::<f32>().prop_filter("finite", |x| x.is_finite()),
        Just(0.0f32),
        Just(-0.0f32),
        Just(f32::MAX),
        Just(-f32::MAX),
        Just(1e-40f32),
        // Exact bf16 ties (low half 0x8000): where rounding modes differ.
        any::<u32>()
            .prop_map(|b| f32::from_bits((b & 0xffff_0000) | 0x8000))
            .prop_filter("finite", |x| x.is_finite()),
    ]
}

fn sq(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum()
}

proptest! {
    /// Frame and residual equal the reference's bit for bit; decoding the
    /// frame gives `Q` with `p − Q` = the residual, bit for bit.
    #[test]
    fn encode_matches_the_reference(grade in grades(), p in prop::collection::vec(values(), 0..70)) {
        let mut fast = p.clone();
        let mut frame = vec![0u8; grade.frame_len(p.len())];
        let got = encode_residual(grade, &mut fast, &mut frame);
        match reference::graded_encode(grade, &p) {
            None => {
                let refused = matches!(got, Err(CodecError::NonFinite { .. }));
                prop_assert!(refused, "fast path accepted what the reference refuses");
            }
            Some((rf, rr)) => {
                prop_assert!(got.is_ok());
                prop_assert_eq!(&frame, &rf);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&fast), bits(&rr));
                let mut q = vec![7.0f32; p.len()];
                decode(grade, &frame, &mut q, false).unwrap();
                for i in 0..p.len() {
                    prop_assert_eq!((p[i] - q[i]).to_bits(), fast[i].to_bits());
                }
            }
        }
    }

    /// 2-bit: the least-squares scale never lets the residual outgrow the
    /// input, `‖p − Q(p)‖₂ ≤ ‖p‖₂` (strictly below for `p ≠ 0`).
    #[test]
    fn two_bit_residual_is_a_contraction(p in prop::collection::vec(-1e3f32..1e3, 1..64)) {
        let mut r = p.clone();
        let mut frame = vec![0u8; Grade::TwoBit.frame_len(p.len())];
        encode_residual(Grade::TwoBit, &mut r, &mut frame).unwrap();
        let (np, nr) = (sq(&p), sq(&r));
        if np > 0.0 {
            prop_assert!(nr < np, "‖r‖² {} ≥ ‖p‖² {}", nr, np);
        } else {
            prop_assert_eq!(nr, 0.0);
        }
    }

    /// bf16: each residual is at most half a bfloat16 step, `|r| ≤ 2⁻⁸·|p|`
    /// (subnormals: `2⁻¹³⁴`).
    #[test]
    fn bf16_residual_is_half_a_step(p in prop::collection::vec(-1e30f32..1e30, 1..64)) {
        let mut r = p.clone();
        let mut frame = vec![0u8; Grade::Bf16.frame_len(p.len())];
        encode_residual(Grade::Bf16, &mut r, &mut frame).unwrap();
        for (&x, &e) in p.iter().zip(&r) {
            prop_assert!(f64::from(e).abs() <= (f64::from(x).abs() * 2f64.powi(-8)).max(2f64.powi(-134)),
                "x {} residual {}", x, e);
        }
    }

    /// Error feedback (`p_t = x_t + e_{t−1}`, `e_t = p_t − Q(p_t)`) telescopes:
    /// `Σ_t Q_t = Σ_t x_t − e_T`, so the running mean of what is sent is the
    /// running mean of the inputs up to `e_T/T` — and `e_T` stays bounded
    /// (`‖e_t‖ ≤ ‖p_t‖` and the inputs are bounded), so that bias vanishes.
    #[test]
    fn error_feedback_makes_the_running_sum_unbiased(
        grade in grades(),
        seed in any::<u64>(),
        n in 1usize..40,
    ) {
        let steps = 200usize;
        let mut state = seed | 1;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut e = vec![0.0f32; n];
        let (mut sum_x, mut sum_q) = (vec![0.0f64; n], vec![0.0f64; n]);
        let mut frame = vec![0u8; grade.frame_len(n)];
        let mut largest_e = 0.0f64;
        for _ in 0..steps {
            let x: Vec<f32> = (0..n).map(|_| next()).collect();
            let p: Vec<f32> = x.iter().zip(&e).map(|(x, e)| x + e).collect();
            e.clone_from(&p);
            encode_residual(grade, &mut e, &mut frame).unwrap();
            prop_assert!(sq(&e) <= sq(&p) * (1.0 + 1e-6));
            let mut q = vec![0.0f32; n];
            decode(grade, &frame, &mut q, false).unwrap();
            for i in 0..n {
                sum_x[i] += f64::from(x[i]);
                sum_q[i] += f64::from(q[i]);
            }
            largest_e = largest_e.max(sq(&e).sqrt());
        }
        for i in 0..n {
            // Telescoping, up to the f32 rounding of 2·steps additions.
            let gap = (sum_q[i] + f64::from(e[i]) - sum_x[i]).abs();
            prop_assert!(gap < 1e-4 * steps as f64, "coord {}: gap {}", i, gap);
        }
        // Bounded error (inputs in [−1, 1]): the bias of the running mean
        // is at most this over T.
        prop_assert!(largest_e <= 3.0 * (n as f64).sqrt(), "‖e‖ reached {}", largest_e);
    }

    /// `decode` never panics on arbitrary bytes and changes nothing on error.
    #[test]
    fn decode_refuses_garbage_without_change(grade in grades(), bytes in prop::collection::vec(any::<u8>(), 0..40), n in 0usize..20) {
        let mut out = vec![1.5f32; n];
        if decode(grade, &bytes, &mut out, true).is_err() {
            prop_assert!(out.iter().all(|&x| x == 1.5));
        }
    }
}

#[test]
fn bf16_rounds_to_nearest_even_and_clamps() {
    // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: ties to the even (1.0).
    assert_eq!(from_bf16(to_bf16(1.0 + 2f32.powi(-8))), 1.0);
    // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶: up.
    assert_eq!(
        from_bf16(to_bf16(1.0 + 3.0 * 2f32.powi(-8))),
        1.0 + 2f32.powi(-6)
    );
    assert_eq!(to_bf16(f32::MAX), 0x7f7f);
    assert_eq!(to_bf16(-f32::MAX), 0xff7f);
    assert_eq!(to_bf16(-0.0), 0x8000);
}

#[test]
fn two_bit_layout_is_msb_first_with_a_trailing_scale() {
    // 5 elements: 2 code bytes + the scale.
    let mut p = [3.0f32, -1.0, 1.0, -3.0, 0.0];
    let mut frame = [0u8; 6];
    let s = encode_residual(Grade::TwoBit, &mut p, &mut frame).unwrap();
    // ‖p‖ = √20, s₀ = √4/2 = 1, threshold 2: codes big+, small−, small+, big−, small+.
    assert_eq!(frame[0], 0b01_10_00_11);
    assert_eq!(frame[1], 0b00_00_00_00);
    // s = ⟨p, c⟩/⟨c, c⟩ = (9 + 1 + 1 + 9 + 0)/(9 + 1 + 1 + 9 + 1) = 20/21.
    assert_eq!(s, (20.0f64 / 21.0) as f32);
    assert_eq!(frame[2..], s.to_le_bytes());
    let mut bad = frame;
    bad[1] = 0b00_01_00_00; // a padding bit
    let mut out = [0.0f32; 5];
    assert_eq!(
        decode(Grade::TwoBit, &bad, &mut out, false),
        Err(CodecError::NonZeroPadding)
    );
    let mut neg = frame;
    neg[2..].copy_from_slice(&(-1.0f32).to_le_bytes());
    assert_eq!(
        decode(Grade::TwoBit, &neg, &mut out, false),
        Err(CodecError::InvalidScale { chunk: 0 })
    );
    assert_eq!(
        decode(Grade::TwoBit, &frame[..5], &mut out, false),
        Err(CodecError::BufferSize {
            expected: 6,
            found: 5
        })
    );
}

proptest! {
    /// The fuzz target's checks on random bytes (the target runs them on
    /// whatever libFuzzer finds).
    #[test]
    fn the_graded_fuzz_entry_holds_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        onebit_codec::fuzzing::graded_decode(&bytes);
    }
}
