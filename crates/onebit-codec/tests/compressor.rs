//! Error-feedback compressor: fused == two-pass == element-by-element, telescoping,
//! non-finite input leaves everything unchanged.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

mod common;

use core::num::NonZeroUsize;

use common::{bits_of, naive_step};
use onebit_codec::{
    CodecError, Compressor, CompressorConfig, ErrorFeedback, ScaleKind, packed_len, reference,
};
use proptest::prelude::*;

const KINDS: [ScaleKind; 4] = [
    ScaleKind::Rms,
    ScaleKind::MeanAbs,
    ScaleKind::MaxAbs,
    ScaleKind::Unit,
];

fn config(feedback: ErrorFeedback, scale: ScaleKind, chunk: Option<usize>) -> CompressorConfig {
    CompressorConfig::default()
        .with_feedback(feedback)
        .with_scale(scale)
        .with_chunk(chunk.and_then(NonZeroUsize::new))
}

/// Run `steps` through the fused compressor, the two-pass reference and the
/// element-by-element reference; all signs, scales and errors must be equal bits.
fn check_three_way(
    steps: &[Vec<f32>],
    feedback: ErrorFeedback,
    kind: ScaleKind,
    chunk: Option<usize>,
) {
    let n = steps[0].len();
    let mut fused = Compressor::with_config(n, config(feedback, kind, chunk)).unwrap();
    let k = fused.chunks();
    let mut e_ref = vec![0.0f32; n];
    let mut e_naive = vec![0.0f32; n];
    for (t, x) in steps.iter().enumerate() {
        let (mut bits, mut scales) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
        fused
            .compress_chunks_into(x, &mut bits, &mut scales)
            .unwrap();
        let (mut rbits, mut rscales) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
        reference::compress_step(
            x,
            &mut e_ref,
            feedback,
            kind,
            chunk,
            &mut rbits,
            &mut rscales,
        )
        .unwrap();
        let (nbits, nscales) = naive_step(x, &mut e_naive, feedback, kind, chunk);
        let ctx = format!("step {t}, n {n}, {feedback:?}, {kind:?}, chunk {chunk:?}");
        assert_eq!(bits, nbits, "fused signs, {ctx}");
        assert_eq!(rbits, nbits, "two-pass signs, {ctx}");
        assert_eq!(bits_of(&scales), bits_of(&nscales), "fused scales, {ctx}");
        assert_eq!(
            bits_of(&rscales),
            bits_of(&nscales),
            "two-pass scales, {ctx}"
        );
        let mut e = vec![0.0f32; n];
        fused.error_into(&mut e).unwrap();
        assert_eq!(bits_of(&e), bits_of(&e_naive), "fused error, {ctx}");
        assert_eq!(bits_of(&e_ref), bits_of(&e_naive), "two-pass error, {ctx}");
    }
    // Materialising the error changes nothing observable.
    let before = fused.error_norm();
    assert_eq!(bits_of(fused.materialize_error()), bits_of(&e_naive));
    assert_eq!(fused.error_norm().to_bits(), before.to_bits());
}

fn wave(n: usize, t: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = ((i * 7919 + t * 104_729) % 2003) as f32 / 1001.0 - 1.0;
            if i % 97 == 0 {
                -0.0
            } else {
                v * (1.0 + (i % 13) as f32)
            }
        })
        .collect()
}

#[test]
fn fused_equals_references_across_block_and_chunk_boundaries() {
    for n in [0, 1, 7, 8, 63, 64, 65, 2047, 2048, 2049, 5000] {
        let steps: Vec<Vec<f32>> = (0..4).map(|t| wave(n, t)).collect();
        for chunk in [
            None,
            Some(1),
            Some(7),
            Some(8),
            Some(100),
            Some(64),
            Some(2047),
            Some(2049),
            Some(10_000),
        ] {
            for kind in KINDS {
                check_three_way(&steps, ErrorFeedback::Full, kind, chunk);
            }
            check_three_way(
                &steps,
                ErrorFeedback::Decayed { beta: 0.9 },
                ScaleKind::Rms,
                chunk,
            );
        }
    }
}

#[test]
fn fused_equals_references_across_cache_blocks() {
    // The fused pass works in blocks of 8192 elements.
    for n in [8191, 8192, 8193, 20_000] {
        let steps: Vec<Vec<f32>> = (0..3).map(|t| wave(n, t)).collect();
        for chunk in [None, Some(3), Some(64), Some(8192), Some(5000)] {
            check_three_way(&steps, ErrorFeedback::Full, ScaleKind::Rms, chunk);
        }
        check_three_way(&steps, ErrorFeedback::Full, ScaleKind::MeanAbs, Some(777));
        check_three_way(&steps, ErrorFeedback::Full, ScaleKind::MeanAbs, Some(128));
        check_three_way(&steps, ErrorFeedback::Full, ScaleKind::MeanAbs, None);
        check_three_way(
            &steps,
            ErrorFeedback::Decayed { beta: 0.25 },
            ScaleKind::MaxAbs,
            Some(1025),
        );
    }
}

/// After a step with values near `f32::MAX`, an input that overflows `x + e`
/// (but not `x`) is reported at the first overflowing index, for every scale
/// kind, and nothing changes.
#[test]
fn overflow_after_huge_step_is_caught_for_every_kind() {
    let big = f32::MAX;
    for kind in KINDS {
        for chunk in [None, Some(2)] {
            let mut c =
                Compressor::with_config(4, config(ErrorFeedback::Full, kind, chunk)).unwrap();
            let mut signs = [0u8; 1];
            let mut scales = vec![0.0f32; c.chunks()];
            c.compress_chunks_into(&[big, -big / 2.0, 1.0, big / 4.0], &mut signs, &mut scales)
                .unwrap();
            let mut e = [0.0f32; 4];
            c.error_into(&mut e).unwrap();
            // Push every element towards overflow in the direction of its error.
            let x2: Vec<f32> = e
                .iter()
                .map(|&v| if v < 0.0 { -big } else { big })
                .collect();
            let expected = x2.iter().zip(&e).position(|(a, b)| !(a + b).is_finite());
            let index = expected.expect("the construction always overflows somewhere");
            let result = c.compress_chunks_into(&x2, &mut signs, &mut scales);
            assert_eq!(
                result,
                Err(CodecError::NonFinite { index }),
                "{kind:?} {chunk:?}"
            );
            let mut after = [0.0f32; 4];
            c.error_into(&mut after).unwrap();
            assert_eq!(bits_of(&after), bits_of(&e), "{kind:?} {chunk:?}");
        }
    }
}

#[test]
fn compress_into_returns_the_rms_of_x_plus_e() {
    let x = [3.0f32, -4.0, 0.0, -0.0];
    let mut c = Compressor::new(4);
    let mut signs = [0u8; 1];
    let alpha = c.compress_into(&x, &mut signs).unwrap();
    assert_eq!(alpha, (25.0f64 / 4.0).sqrt() as f32);
    assert_eq!(signs, [0b1011_0000]);
    // e = p − α·σ(p)
    assert_eq!(c.materialize_error(), &[3.0 - 2.5, -4.0 + 2.5, -2.5, -2.5]);
}

#[test]
fn single_scale_entry_point_rejects_chunked_compressors() {
    let cfg = config(ErrorFeedback::Full, ScaleKind::Rms, Some(4));
    let mut c = Compressor::with_config(10, cfg).unwrap();
    let mut signs = [0u8; 2];
    assert_eq!(
        c.compress_into(&[1.0; 10], &mut signs),
        Err(CodecError::LengthMismatch {
            expected: 3,
            found: 1
        })
    );
}

#[test]
fn invalid_beta_is_an_error() {
    for beta in [-0.1, 1.5, f32::NAN, f32::INFINITY] {
        let cfg = config(ErrorFeedback::Decayed { beta }, ScaleKind::Rms, None);
        assert_eq!(
            Compressor::with_config(3, cfg).err(),
            Some(CodecError::InvalidBeta)
        );
    }
}

#[test]
fn decayed_with_unit_scale_is_the_source_documents_rule() {
    // ĝ = sign(g + ε); Δ = (g + ε) − ĝ; ε ← β·ε + (1 − β)·Δ.
    let beta = 0.9f32;
    let cfg = config(ErrorFeedback::Decayed { beta }, ScaleKind::Unit, None);
    let mut c = Compressor::with_config(3, cfg).unwrap();
    let mut eps = [0.0f32; 3];
    for g in [[0.5f32, -0.25, 2.0], [-1.0, 0.75, 0.125]] {
        let mut signs = [0u8; 1];
        let alpha = c.compress_into(&g, &mut signs).unwrap();
        assert_eq!(alpha, 1.0);
        for i in 0..3 {
            let p = g[i] + eps[i];
            let sign = if p < 0.0 { -1.0 } else { 1.0 };
            eps[i] = beta * eps[i] + (1.0 - beta) * (p - sign);
            assert_eq!(signs[0] >> (7 - i) & 1 == 1, sign > 0.0);
        }
        assert_eq!(c.materialize_error(), &eps);
    }
}

#[test]
fn non_finite_input_changes_nothing() {
    let n = 300;
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut c = Compressor::new(n);
        let mut signs = vec![0u8; packed_len(n)];
        c.compress_into(&wave(n, 1), &mut signs).unwrap();
        let mut e_before = vec![0.0; n];
        c.error_into(&mut e_before).unwrap();
        let mut x = wave(n, 2);
        x[123] = bad;
        x[200] = bad;
        let mut out = vec![0x5Au8; packed_len(n)];
        assert_eq!(
            c.compress_into(&x, &mut out),
            Err(CodecError::NonFinite { index: 123 })
        );
        assert!(out.iter().all(|&b| b == 0x5A), "signs were written");
        let mut e_after = vec![0.0; n];
        c.error_into(&mut e_after).unwrap();
        assert_eq!(bits_of(&e_after), bits_of(&e_before));
    }
}

#[test]
fn overflow_of_x_plus_e_is_reported_before_any_change() {
    // x finite, e finite, but x + e overflows at index 1.
    let big = f32::MAX;
    let mut c = Compressor::new(3);
    c.set_error(&[0.0, big, -1.0]).unwrap();
    let mut signs = [0u8; 1];
    assert_eq!(
        c.compress_into(&[1.0, big, 1.0], &mut signs),
        Err(CodecError::NonFinite { index: 1 })
    );
    assert_eq!(c.materialize_error(), &[0.0, big, -1.0]);
    // Close to the limit but not over it: accepted, the slow check passes.
    assert!(c.compress_into(&[1.0, -big, 1.0], &mut signs).is_ok());
}

#[test]
fn checkpoint_restore_and_reset() {
    let n = 100;
    let mut a = Compressor::new(n);
    let mut signs = vec![0u8; packed_len(n)];
    a.compress_into(&wave(n, 0), &mut signs).unwrap();
    let saved = a.materialize_error().to_vec();
    let mut b = Compressor::new(n);
    b.set_error(&saved).unwrap();
    let (mut sa, mut sb) = (signs.clone(), signs.clone());
    let alpha_a = a.compress_into(&wave(n, 1), &mut sa).unwrap();
    let alpha_b = b.compress_into(&wave(n, 1), &mut sb).unwrap();
    assert_eq!((sa, alpha_a.to_bits()), (sb, alpha_b.to_bits()));
    assert_eq!(
        bits_of(a.materialize_error()),
        bits_of(b.materialize_error())
    );
    assert_eq!(
        b.set_error(&[0.0; 3]),
        Err(CodecError::LengthMismatch {
            expected: 100,
            found: 3
        })
    );
    let mut bad = saved.clone();
    bad[7] = f32::NAN;
    assert_eq!(b.set_error(&bad), Err(CodecError::NonFinite { index: 7 }));
    b.reset_error();
    assert!(b.materialize_error().iter().all(|&v| v == 0.0));
    assert_eq!(b.error_norm(), 0.0);
}

#[test]
fn error_norm_is_the_l2_norm() {
    let n = 777;
    let mut c = Compressor::new(n);
    let mut signs = vec![0u8; packed_len(n)];
    c.compress_into(&wave(n, 3), &mut signs).unwrap();
    let e = c.materialize_error().to_vec();
    let exact: f64 = e
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    assert!((f64::from(c.error_norm()) - exact).abs() <= exact * 1e-6);
}

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![8 => -100.0f32..100.0, 1 => Just(0.0f32), 1 => Just(-0.0f32), 1 => -1e-3f32..1e-3]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fused_equals_references_on_random_sequences(
        n in 0usize..300,
        seed in prop::collection::vec(value(), 1200),
        chunk in prop_oneof![Just(None), (1usize..80).prop_map(Some)],
        kind in prop::sample::select(KINDS.to_vec()),
        decayed in any::<bool>(),
    ) {
        let steps: Vec<Vec<f32>> = (0..4).map(|t| (0..n).map(|i| seed[(i * 4 + t) % seed.len()]).collect()).collect();
        let feedback = if decayed { ErrorFeedback::Decayed { beta: 0.5 } } else { ErrorFeedback::Full };
        check_three_way(&steps, feedback, kind, chunk);
    }

    /// Σ_t x̂_t + e_T = Σ_t x_t, up to the f32 rounding of each step's two
    /// operations: |err_i| ≤ Σ_t 2⁻²⁴·(|p_t,i| + |e_t,i|) (sums kept in f64).
    #[test]
    fn error_feedback_telescopes(
        n in 1usize..200,
        steps in 1usize..20,
        seed in prop::collection::vec(value(), 800),
        chunk in prop_oneof![Just(None), (1usize..50).prop_map(Some)],
        kind in prop::sample::select(KINDS.to_vec()),
    ) {
        let mut c = Compressor::with_config(n, config(ErrorFeedback::Full, kind, chunk)).unwrap();
        let mut sum_x = vec![0.0f64; n];
        let mut sum_hat = vec![0.0f64; n];
        let mut bound = vec![0.0f64; n];
        let mut e_prev = vec![0.0f32; n];
        for t in 0..steps {
            let x: Vec<f32> = (0..n).map(|i| seed[(i * 7 + t * 3) % seed.len()]).collect();
            let payload = c.compress(&x).unwrap();
            let hat = payload.to_f32();
            let e = c.materialize_error().to_vec();
            for i in 0..n {
                sum_x[i] += f64::from(x[i]);
                sum_hat[i] += f64::from(hat[i]);
                let p = f64::from(x[i] + e_prev[i]);
                bound[i] += (p.abs() + f64::from(e[i]).abs()) * 2f64.powi(-24);
            }
            e_prev = e;
        }
        for i in 0..n {
            let lhs = sum_hat[i] + f64::from(e_prev[i]);
            prop_assert!((lhs - sum_x[i]).abs() <= bound[i] * 1.0001 + 1e-30,
                "i {}: {} vs {} (bound {})", i, lhs, sum_x[i], bound[i]);
        }
    }
}

/// `full_step_chunk` over 64-aligned chunks, run in any order, gives the
/// compressor's bytes, scales and error; bad lengths are errors that write
/// nothing.
#[test]
fn full_step_chunk_matches_the_compressor_chunk_by_chunk() {
    for kind in KINDS {
        for (n, chunk) in [(1000usize, 128usize), (4097, 64), (300, 512)] {
            let mut serial =
                Compressor::with_config(n, config(ErrorFeedback::Full, kind, Some(chunk))).unwrap();
            let chunks = n.div_ceil(chunk);
            let mut buf = vec![0.0f32; n];
            let mut alphas = vec![0.0f32; chunks];
            for t in 0..3 {
                let x = wave(n, t);
                let mut want_signs = vec![0u8; packed_len(n)];
                let mut want_scales = vec![0.0f32; chunks];
                serial
                    .compress_chunks_into(&x, &mut want_signs, &mut want_scales)
                    .unwrap();
                let mut signs = vec![0u8; packed_len(n)];
                let mut scales = vec![0.0f32; chunks];
                // Last chunk first: the order must not matter.
                for c in (0..chunks).rev() {
                    let (s, e) = (c * chunk, ((c + 1) * chunk).min(n));
                    scales[c] = onebit_codec::full_step_chunk(
                        kind,
                        alphas[c],
                        &x[s..e],
                        &mut buf[s..e],
                        &mut signs[s / 8..packed_len(e)],
                    )
                    .unwrap();
                }
                alphas.copy_from_slice(&scales);
                assert_eq!(signs, want_signs, "{kind:?} n {n} chunk {chunk} step {t}");
                assert_eq!(bits_of(&scales), bits_of(&want_scales));
                // The carried error `e = p − α·σ(p)` of the new values.
                let e: Vec<f32> = buf
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| {
                        let a = alphas[i / chunk];
                        p - if p < 0.0 { -a } else { a }
                    })
                    .collect();
                assert_eq!(bits_of(&e), bits_of(serial.materialize_error()));
            }
        }
    }
    let (x, mut buf, mut signs) = (vec![1.0f32; 10], vec![0.0f32; 9], vec![0u8; 2]);
    assert_eq!(
        onebit_codec::full_step_chunk(ScaleKind::Rms, 1.0, &x, &mut buf, &mut signs),
        Err(CodecError::LengthMismatch {
            expected: 10,
            found: 9
        })
    );
    let mut buf = vec![0.0f32; 10];
    let mut short = vec![0u8; 1];
    assert_eq!(
        onebit_codec::full_step_chunk(ScaleKind::Rms, 1.0, &x, &mut buf, &mut short),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
    assert!(buf.iter().all(|&v| v == 0.0) && short == [0]);
}

/// Fault test of the one-pass step: a NaN/±∞ injected anywhere — first element, inside a word, a later block or chunk,
/// the tail — is reported at its index after the pass has already written
/// part of the new buffer, and the compressor is left exactly as before:
/// same error buffer, no output written, and the next clean step gives the
/// same bits as on a compressor that never saw the bad input. (Overflowing
/// `x + e` takes the same path: `overflow_after_huge_step_is_caught_for_every_kind`.)
#[test]
fn a_fault_anywhere_in_the_one_pass_leaves_the_compressor_as_it_was() {
    let n = 3 * 8192 + 77;
    let chunks = [None, Some(4096), Some(1000)];
    let feedbacks = [ErrorFeedback::Full, ErrorFeedback::Decayed { beta: 0.5 }];
    for kind in KINDS {
        for chunk in chunks {
            for feedback in feedbacks {
                let cfg = config(feedback, kind, chunk);
                let mut c = Compressor::with_config(n, cfg).unwrap();
                let k = c.chunks();
                let (mut signs, mut scales) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
                c.compress_chunks_into(&wave(n, 1), &mut signs, &mut scales)
                    .unwrap();
                let mut e_before = vec![0.0; n];
                c.error_into(&mut e_before).unwrap();
                for (at, bad) in [
                    (0, f32::NAN),
                    (37, f32::INFINITY),
                    (8192 + 64 * 5 + 3, f32::NEG_INFINITY),
                    (2 * 8192 + 1, f32::NAN),
                    (n - 1, f32::NAN),
                ] {
                    let mut x = wave(n, 2);
                    x[at] = bad;
                    let mut out = vec![0x5Au8; packed_len(n)];
                    let mut out_scales = vec![-7.0f32; k];
                    let what = format!("{kind:?} {chunk:?} {feedback:?} at {at}");
                    assert_eq!(
                        c.compress_chunks_into(&x, &mut out, &mut out_scales),
                        Err(CodecError::NonFinite { index: at }),
                        "{what}"
                    );
                    assert!(out.iter().all(|&b| b == 0x5A), "{what}: signs written");
                    assert!(out_scales.iter().all(|&s| s == -7.0), "{what}: scales");
                    let mut e_after = vec![0.0; n];
                    c.error_into(&mut e_after).unwrap();
                    assert_eq!(bits_of(&e_after), bits_of(&e_before), "{what}");
                }
                // The failed steps left no trace: the next step matches a
                // compressor that only ever saw the clean inputs.
                let mut fresh = Compressor::with_config(n, cfg).unwrap();
                fresh
                    .compress_chunks_into(&wave(n, 1), &mut signs, &mut scales)
                    .unwrap();
                let (mut s1, mut a1) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
                let (mut s2, mut a2) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
                c.compress_chunks_into(&wave(n, 3), &mut s1, &mut a1)
                    .unwrap();
                fresh
                    .compress_chunks_into(&wave(n, 3), &mut s2, &mut a2)
                    .unwrap();
                assert_eq!(s1, s2, "{kind:?} {chunk:?} {feedback:?}");
                assert_eq!(bits_of(&a1), bits_of(&a2));
                assert_eq!(
                    bits_of(c.materialize_error()),
                    bits_of(fresh.materialize_error())
                );
            }
        }
    }
}

/// `compress_blend_into(wa, a, wb, b)` is `compress_into(wa·a + wb·b)` bit for
/// bit (signs, scale, error buffer over several steps), for every scale kind
/// and feedback, at lengths around the word path's 4096-element blocks; a
/// NaN in either input is reported at its index and changes nothing.
#[test]
fn blend_input_matches_forming_x_first() {
    let feedbacks = [ErrorFeedback::Full, ErrorFeedback::Decayed { beta: 0.25 }];
    for n in [0, 1, 63, 64, 4095, 4096, 4097, 3 * 4096 + 130] {
        for kind in KINDS {
            for feedback in feedbacks {
                let cfg = config(feedback, kind, None);
                let (mut c1, mut c2) = (
                    Compressor::with_config(n, cfg).unwrap(),
                    Compressor::with_config(n, cfg).unwrap(),
                );
                let (wa, wb) = (0.9f32, 1.0f32 - 0.9);
                let mut s1 = vec![0u8; packed_len(n)];
                let mut s2 = vec![0u8; packed_len(n)];
                for t in 0..3 {
                    let (a, b) = (wave(n, t), wave(n, t + 7));
                    let x: Vec<f32> = a.iter().zip(&b).map(|(&a, &b)| wa * a + wb * b).collect();
                    let r1 = c1.compress_into(&x, &mut s1).unwrap();
                    let r2 = c2.compress_blend_into(wa, &a, wb, &b, &mut s2).unwrap();
                    let what = format!("n {n} {kind:?} {feedback:?} step {t}");
                    assert_eq!(r1.to_bits(), r2.to_bits(), "{what}");
                    assert_eq!(s1, s2, "{what}");
                    assert_eq!(
                        bits_of(c1.materialize_error()),
                        bits_of(c2.materialize_error()),
                        "{what}"
                    );
                }
                if n > 100 {
                    let (a, mut b) = (wave(n, 1), wave(n, 2));
                    b[n - 5] = f32::NAN;
                    let before = c2.materialize_error().to_vec();
                    let mut out = vec![0x33u8; packed_len(n)];
                    assert_eq!(
                        c2.compress_blend_into(wa, &a, wb, &b, &mut out),
                        Err(CodecError::NonFinite { index: n - 5 })
                    );
                    assert!(out.iter().all(|&v| v == 0x33));
                    assert_eq!(bits_of(c2.materialize_error()), bits_of(&before));
                }
            }
        }
    }
}

/// Above 4 Mi elements the word path writes the new buffer with
/// non-temporal stores (x86_64): same bits as the two-pass reference over
/// three steps, plain and blend input, one scale and 64 K chunks.
#[test]
fn large_tensors_on_the_streaming_path_match_the_reference() {
    let n = (1 << 22) + 77;
    for chunk in [None, Some(1 << 16)] {
        let cfg = config(ErrorFeedback::Full, ScaleKind::Rms, chunk);
        let mut c = Compressor::with_config(n, cfg).unwrap();
        let k = c.chunks();
        let mut e = vec![0.0f32; n];
        let (mut s1, mut a1) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
        let (mut s2, mut a2) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
        for t in 0..3 {
            let x = wave(n, t);
            c.compress_chunks_into(&x, &mut s1, &mut a1).unwrap();
            onebit_codec::reference::compress_step(
                &x,
                &mut e,
                ErrorFeedback::Full,
                ScaleKind::Rms,
                chunk,
                &mut s2,
                &mut a2,
            )
            .unwrap();
            assert_eq!(s1, s2, "{chunk:?} step {t}");
            assert_eq!(bits_of(&a1), bits_of(&a2), "{chunk:?} step {t}");
        }
        assert_eq!(bits_of(c.materialize_error()), bits_of(&e), "{chunk:?}");
    }
    // The blend input on the same path.
    let (mut c1, mut c2) = (Compressor::new(n), Compressor::new(n));
    let (a, b) = (wave(n, 4), wave(n, 5));
    let x: Vec<f32> = a.iter().zip(&b).map(|(&a, &b)| 0.9 * a + 0.1 * b).collect();
    let (mut s1, mut s2) = (vec![0u8; packed_len(n)], vec![0u8; packed_len(n)]);
    let r1 = c1.compress_into(&x, &mut s1).unwrap();
    let r2 = c2.compress_blend_into(0.9, &a, 0.1, &b, &mut s2).unwrap();
    assert_eq!((r1.to_bits(), &s1), (r2.to_bits(), &s2));
    assert_eq!(
        bits_of(c1.materialize_error()),
        bits_of(c2.materialize_error())
    );
}
