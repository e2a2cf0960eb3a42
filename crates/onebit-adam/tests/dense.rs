//! Dense Adam(W): every kernel path (scalar, SSE2, AVX, AVX-512 as the CPU
//! has them) against a plain two-pass scalar reference (the optimizer's
//! arithmetic before it was fused), bit for bit: random and edge values,
//! every tail length, several bias-corrected steps, and no write past the
//! end of a tensor (AVX-512's masked tail).

use onebit_adam::testing::bits;
use onebit_adam::{AdamW, Kernel, OneBitError};
use proptest::prelude::*;

/// The reference: the moments pass, then the update pass, one element at a
/// time, exactly as 1-bit Adam computed them before the dense kernel.
fn reference(
    h: &AdamW,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    div: f32,
    zero: &mut [bool],
) {
    for (((g, m), v), z) in g.iter().zip(m.iter_mut()).zip(v.iter_mut()).zip(zero) {
        let g = *g / div;
        *m = h.beta1 * *m + (1.0 - h.beta1) * g;
        *v = h.beta2 * *v + (1.0 - h.beta2) * g * g;
        *z &= g == 0.0;
    }
    update_reference(h, x, m, v);
}

fn update_reference(h: &AdamW, x: &mut [f32], m: &[f32], v: &[f32]) {
    for ((x, &m), &v) in x.iter_mut().zip(m).zip(v) {
        let (mh, vh) = match h.bias {
            Some((a, b)) => (m / a, v / b),
            None => (m, v),
        };
        let u = mh / (vh.sqrt() + h.eps) + h.weight_decay * *x;
        *x -= h.lr * u;
    }
}

/// Values that exercise rounding: ordinary, tiny (subnormal), zero, large.
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -2.0f32..2.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => -1.0e-38f32..1.0e-38,
        1 => -1.0e30f32..1.0e30,
    ]
}

fn hyper() -> impl Strategy<Value = AdamW> {
    (
        1e-5f32..1.0,
        0.0f32..0.999,
        0.0f32..0.9999,
        prop_oneof![Just(1e-8f32), 1e-12f32..1e-2],
        prop_oneof![Just(0.0f32), 0.0f32..0.1],
        proptest::option::of((0.01f32..1.0, 0.001f32..1.0)),
    )
        .prop_map(|(lr, beta1, beta2, eps, weight_decay, bias)| {
            AdamW::default()
                .with_lr(lr)
                .with_beta1(beta1)
                .with_beta2(beta2)
                .with_eps(eps)
                .with_weight_decay(weight_decay)
                .with_bias(bias)
        })
}

/// NaN-free edge values: signed zeros, the smallest subnormal and normal,
/// values whose square or sum overflows, `f32::MAX`, and infinities' near
/// misses; outputs may still overflow to ±∞ (or NaN from ∞/∞), which every
/// path must produce alike.
fn edge() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(0.0f32),
        Just(-0.0f32),
        Just(f32::from_bits(1)),
        Just(-f32::from_bits(1)),
        Just(f32::MIN_POSITIVE),
        Just(-f32::MIN_POSITIVE),
        Just(1.0f32),
        Just(-1.0f32),
        Just(1.9e19f32),
        Just(2.0e19f32),
        Just(f32::MAX),
        Just(f32::MIN),
        -2.0f32..2.0,
    ]
}

/// Bias corrections of step `t` (1-based), as a training loop computes them.
fn bias_at(h: &AdamW, t: i32) -> (f32, f32) {
    (1.0 - h.beta1.powi(t), 1.0 - h.beta2.powi(t))
}

/// Deterministic values in [−1, 1) (an LCG), for the exhaustive tests.
fn lcg(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every available kernel (scalar, SSE2, AVX, AVX-512) gives the reference's bits
    /// for `x`, `m`, `v` and the zero mask, at any length (vector tails).
    #[test]
    fn every_kernel_matches_the_reference(
        h in hyper(),
        data in proptest::collection::vec((value(), value(), 0.0f32..4.0, value(), any::<bool>()), 0..150),
        div in prop_oneof![Just(1.0f32), Just(2.0), Just(3.0), 1.0f32..16.0],
    ) {
        let x0: Vec<f32> = data.iter().map(|d| d.0).collect();
        let m0: Vec<f32> = data.iter().map(|d| d.1).collect();
        let v0: Vec<f32> = data.iter().map(|d| d.2).collect();
        let g: Vec<f32> = data.iter().map(|d| if d.4 { 0.0 } else { d.3 }).collect();
        let (mut xr, mut mr, mut vr, mut zr) = (x0.clone(), m0.clone(), v0.clone(), vec![true; g.len()]);
        reference(&h, &mut xr, &mut mr, &mut vr, &g, div, &mut zr);
        for k in Kernel::all_available() {
            let (mut x, mut m, mut v, mut z) = (x0.clone(), m0.clone(), v0.clone(), vec![true; g.len()]);
            h.step_scaled(k, &mut x, &mut m, &mut v, &g, div, Some(&mut z)).unwrap();
            prop_assert_eq!(bits(&x), bits(&xr), "x on {:?}", k);
            prop_assert_eq!(bits(&m), bits(&mr), "m on {:?}", k);
            prop_assert_eq!(bits(&v), bits(&vr), "v on {:?}", k);
            prop_assert_eq!(&z, &zr, "zero mask on {:?}", k);
            // Without the mask: the same numbers.
            let (mut x2, mut m2, mut v2) = (x0.clone(), m0.clone(), v0.clone());
            h.step_scaled(k, &mut x2, &mut m2, &mut v2, &g, div, None).unwrap();
            prop_assert_eq!(bits(&x2), bits(&xr), "x without mask on {:?}", k);
        }
    }

    /// The frozen-`v` update alone matches the reference's update pass.
    #[test]
    fn update_matches_the_reference(
        h in hyper(),
        data in proptest::collection::vec((value(), value(), 0.0f32..4.0), 0..150),
    ) {
        let x0: Vec<f32> = data.iter().map(|d| d.0).collect();
        let m: Vec<f32> = data.iter().map(|d| d.1).collect();
        let v: Vec<f32> = data.iter().map(|d| d.2).collect();
        let mut xr = x0.clone();
        update_reference(&h, &mut xr, &m, &v);
        for k in Kernel::all_available() {
            let mut x = x0.clone();
            h.update(k, &mut x, &m, &v).unwrap();
            prop_assert_eq!(bits(&x), bits(&xr), "update on {:?}", k);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Edge values in every tensor (the second moment non-negative, as
    /// Adam keeps it), with and without bias correction: every kernel gives
    /// the reference's bits, whatever overflows.
    #[test]
    fn every_kernel_matches_the_reference_on_edge_values(
        h in hyper(),
        data in proptest::collection::vec((edge(), edge(), edge(), edge()), 0..70),
        div in prop_oneof![Just(1.0f32), Just(3.0), 1.0f32..16.0],
    ) {
        let x0: Vec<f32> = data.iter().map(|d| d.0).collect();
        let m0: Vec<f32> = data.iter().map(|d| d.1).collect();
        let v0: Vec<f32> = data.iter().map(|d| d.2.abs()).collect();
        let g: Vec<f32> = data.iter().map(|d| d.3).collect();
        let (mut xr, mut mr, mut vr, mut zr) = (x0.clone(), m0.clone(), v0.clone(), vec![true; g.len()]);
        reference(&h, &mut xr, &mut mr, &mut vr, &g, div, &mut zr);
        let mut xu = x0.clone();
        update_reference(&h, &mut xu, &m0, &v0);
        for k in Kernel::all_available() {
            let (mut x, mut m, mut v, mut z) = (x0.clone(), m0.clone(), v0.clone(), vec![true; g.len()]);
            h.step_scaled(k, &mut x, &mut m, &mut v, &g, div, Some(&mut z)).unwrap();
            prop_assert_eq!(bits(&x), bits(&xr), "x on {:?}", k);
            prop_assert_eq!(bits(&m), bits(&mr), "m on {:?}", k);
            prop_assert_eq!(bits(&v), bits(&vr), "v on {:?}", k);
            prop_assert_eq!(&z, &zr, "zero mask on {:?}", k);
            let mut x = x0.clone();
            h.update(k, &mut x, &m0, &v0).unwrap();
            prop_assert_eq!(bits(&x), bits(&xu), "update on {:?}", k);
        }
    }

    /// Several consecutive steps with the bias correction of each step
    /// (`t = t0 .. t0 + steps`) and a fresh gradient per step: every kernel
    /// stays on the reference's bits throughout.
    #[test]
    fn every_kernel_matches_the_reference_over_steps(
        h in hyper(),
        n in 0usize..100,
        steps in 1usize..6,
        t0 in 1i32..2000,
        seed: u32,
    ) {
        let x0 = lcg(n, seed);
        let m0 = vec![0.0f32; n];
        let v0 = vec![0.0f32; n];
        let grads: Vec<Vec<f32>> = (0..steps).map(|s| lcg(n, seed ^ (s as u32 + 1).wrapping_mul(0x9e37_79b9))).collect();
        let (mut xr, mut mr, mut vr) = (x0.clone(), m0.clone(), v0.clone());
        for (s, g) in grads.iter().enumerate() {
            let hs = h.with_bias(Some(bias_at(&h, t0 + s as i32)));
            reference(&hs, &mut xr, &mut mr, &mut vr, g, 1.0, &mut vec![true; n]);
        }
        for k in Kernel::all_available() {
            let (mut x, mut m, mut v) = (x0.clone(), m0.clone(), v0.clone());
            for (s, g) in grads.iter().enumerate() {
                let hs = h.with_bias(Some(bias_at(&h, t0 + s as i32)));
                hs.step_scaled(k, &mut x, &mut m, &mut v, g, 1.0, None).unwrap();
            }
            prop_assert_eq!(bits(&x), bits(&xr), "x on {:?}", k);
            prop_assert_eq!(bits(&m), bits(&mr), "m on {:?}", k);
            prop_assert_eq!(bits(&v), bits(&vr), "v on {:?}", k);
        }
    }
}

/// Every length 0–70 (every tail of every width, whole vectors plus
/// tails), each tensor a prefix of a longer buffer: each kernel gives the
/// reference's bits on the prefix and leaves the guard elements after it
/// untouched (a masked store must not write past the end).
#[test]
fn every_tail_length_matches_and_nothing_past_the_end_changes() {
    const GUARD: usize = 17;
    let sentinel = f32::from_bits(0x7fc0_1234); // a NaN no kernel produces
    let h = AdamW::default()
        .with_lr(0.01)
        .with_weight_decay(0.01)
        .with_bias(Some((0.19, 0.002)));
    for n in 0..=70 {
        let x0 = lcg(n, 1);
        let m0 = lcg(n, 2);
        let v0: Vec<f32> = lcg(n, 3).iter().map(|v| v.abs()).collect();
        let g = lcg(n, 4);
        let (mut xr, mut mr, mut vr, mut zr) = (x0.clone(), m0.clone(), v0.clone(), vec![true; n]);
        reference(&h, &mut xr, &mut mr, &mut vr, &g, 2.0, &mut zr);
        let mut xu = x0.clone();
        update_reference(&h, &mut xu, &m0, &v0);
        let guarded = |v: &[f32]| {
            let mut b = v.to_vec();
            b.resize(n + GUARD, sentinel);
            b
        };
        for k in Kernel::all_available() {
            let (mut x, mut m, mut v) = (guarded(&x0), guarded(&m0), guarded(&v0));
            let mut z = vec![true; n + GUARD];
            h.step_scaled(
                k,
                &mut x[..n],
                &mut m[..n],
                &mut v[..n],
                &g,
                2.0,
                Some(&mut z[..n]),
            )
            .unwrap();
            assert_eq!(bits(&x[..n]), bits(&xr), "x, n = {n}, {k:?}");
            assert_eq!(bits(&m[..n]), bits(&mr), "m, n = {n}, {k:?}");
            assert_eq!(bits(&v[..n]), bits(&vr), "v, n = {n}, {k:?}");
            assert_eq!(&z[..n], &zr[..], "zero mask, n = {n}, {k:?}");
            for t in [&x, &m, &v] {
                assert!(
                    t[n..].iter().all(|e| e.to_bits() == sentinel.to_bits()),
                    "written past the end, n = {n}, {k:?}"
                );
            }
            assert!(
                z[n..].iter().all(|&e| e),
                "mask past the end, n = {n}, {k:?}"
            );
            let mut x = guarded(&x0);
            h.update(k, &mut x[..n], &m0, &v0).unwrap();
            assert_eq!(bits(&x[..n]), bits(&xu), "update, n = {n}, {k:?}");
            assert!(
                x[n..].iter().all(|e| e.to_bits() == sentinel.to_bits()),
                "update wrote past the end, n = {n}, {k:?}"
            );
        }
    }
}

#[test]
fn detected_kernel_is_available_and_the_vector_paths_exist_on_x86_64() {
    let k = Kernel::detect();
    assert!(k.is_available());
    // The detected kernel is the widest this CPU runs.
    assert_eq!(Some(k), Kernel::all_available().last());
    if cfg!(target_arch = "x86_64") {
        assert!(Kernel::Sse2.is_available());
        assert_ne!(k, Kernel::Scalar);
    }
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(
            Kernel::Avx.is_available(),
            std::is_x86_feature_detected!("avx")
        );
        assert_eq!(
            Kernel::Avx512.is_available(),
            std::is_x86_feature_detected!("avx512f")
        );
    }
}

#[test]
fn wrong_lengths_are_errors_and_change_nothing() {
    let h = AdamW::default();
    let (mut x, mut m, mut v) = (vec![1.0f32; 8], vec![0.5f32; 8], vec![0.25f32; 7]);
    let g = vec![0.1f32; 8];
    assert_eq!(
        h.step(&mut x, &mut m, &mut v, &g),
        Err(OneBitError::Length {
            expected: 8,
            found: 7
        })
    );
    assert_eq!(x, vec![1.0; 8]);
    assert_eq!(m, vec![0.5; 8]);
    let mut z = vec![true; 3];
    let mut v8 = vec![0.25f32; 8];
    assert!(
        h.step_scaled(
            Kernel::detect(),
            &mut x,
            &mut m,
            &mut v8,
            &g,
            1.0,
            Some(&mut z)
        )
        .is_err()
    );
    assert_eq!(x, vec![1.0; 8]);
    assert!(h.update(Kernel::detect(), &mut x, &m[..4], &v8).is_err());
}

/// One step from zero state with `g = 1`, no bias correction: `m = 1 − β₁`,
/// `v = 1 − β₂` (as rounded in `f32`), `x = 1 − lr·m/(√v + ε)`, on every path.
#[test]
fn a_known_step() {
    let h = AdamW::default();
    for k in Kernel::all_available() {
        let (mut x, mut m, mut v) = (vec![1.0f32; 19], vec![0.0f32; 19], vec![0.0f32; 19]);
        h.step_scaled(k, &mut x, &mut m, &mut v, &[1.0; 19], 1.0, None)
            .unwrap();
        let m1 = 1.0f32 - 0.9;
        let v1 = 1.0f32 - 0.999;
        let want = 1.0 - 1e-3 * (m1 / (v1.sqrt() + 1e-8));
        assert!(x.iter().all(|&xi| xi == want), "{k:?}: {x:?} vs {want}");
    }
}
