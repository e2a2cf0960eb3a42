//! Parallel dense Adam(W): the same bits as the serial step on every kernel
//! this CPU runs (scalar, SSE2, AVX, AVX-512), on 1 and 2 threads, for
//! lengths around the block size and with every kind of vector tail.

use basis_rayon::{par_adam_step, par_adam_update, thread_pool};
use onebit_adam::{AdamW, Kernel};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn parallel_dense_adam_is_bit_identical_to_serial() {
    let block = 1 << 18;
    for h in [
        AdamW::default()
            .with_weight_decay(0.01)
            .with_bias(Some((0.1, 0.002))),
        AdamW::default(),
    ] {
        for n in [
            0,
            1,
            7,
            15,
            17,
            1000,
            block + 13,
            block + 16,
            3 * block,
            2 * block + 9,
        ] {
            let (x0, m0, g) = (data(n, 1), data(n, 2), data(n, 3));
            let v0: Vec<f32> = data(n, 4).iter().map(|v| v.abs()).collect();
            let mut par = Vec::new();
            for threads in [1, 2] {
                let pool = thread_pool(threads).unwrap();
                let (mut x, mut m, mut v) = (x0.clone(), m0.clone(), v0.clone());
                pool.install(|| par_adam_step(&h, &mut x, &mut m, &mut v, &g, 2.0))
                    .unwrap();
                let mut xu = x0.clone();
                pool.install(|| par_adam_update(&h, &mut xu, &m0, &v0))
                    .unwrap();
                par.push((threads, x, m, v, xu));
            }
            for k in Kernel::all_available() {
                let (mut xs, mut ms, mut vs) = (x0.clone(), m0.clone(), v0.clone());
                h.step_scaled(k, &mut xs, &mut ms, &mut vs, &g, 2.0, None)
                    .unwrap();
                let mut xu = x0.clone();
                h.update(k, &mut xu, &m0, &v0).unwrap();
                for (threads, x, m, v, xpu) in &par {
                    let at = format!("n = {n}, {threads} threads vs serial {k:?}");
                    assert_eq!(bits(x), bits(&xs), "x, {at}");
                    assert_eq!(bits(m), bits(&ms), "m, {at}");
                    assert_eq!(bits(v), bits(&vs), "v, {at}");
                    assert_eq!(bits(xpu), bits(&xu), "update, {at}");
                }
            }
        }
    }
}

#[test]
fn wrong_lengths_are_errors() {
    let h = AdamW::default();
    let (mut x, mut m, mut v) = (vec![0.0f32; 4], vec![0.0f32; 4], vec![0.0f32; 3]);
    assert_eq!(
        par_adam_step(&h, &mut x, &mut m, &mut v, &[0.0; 4], 1.0),
        Err(basis_rayon::Error::LengthMismatch {
            expected: 4,
            got: 3
        })
    );
    assert!(par_adam_update(&h, &mut x, &m, &v).is_err());
}
