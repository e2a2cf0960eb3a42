//! The Hogwild tables against an obviously-correct serial reference, and
//! their input checks.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers too: a panic is a failing test"
)]

use basis_rayon::{AtomicMomentTable, Error, MomentParams, MomentTable, StripedMomentTable};
use proptest::prelude::*;

/// Plain serial moments: what a single thread must see, bit for bit.
struct Reference {
    dim: usize,
    t: Vec<u64>,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl Reference {
    fn new(buckets: usize, dim: usize) -> Self {
        Self {
            dim,
            t: vec![0; buckets],
            m: vec![0.0; buckets * dim],
            v: vec![0.0; buckets * dim],
        }
    }

    fn accumulate(&mut self, b: usize, g: &[f32]) {
        self.t[b] += 1;
        for (j, &g) in g.iter().enumerate() {
            self.m[b * self.dim + j] += g;
            self.v[b * self.dim + j] += g * g;
        }
    }

    fn adam(&mut self, b: usize, g: &[f32], p: &MomentParams) -> Vec<f32> {
        self.t[b] += 1;
        let t = self.t[b] as i32;
        let (c1, c2) = if p.bias_correction {
            (1.0 - p.beta1.powi(t), 1.0 - p.beta2.powi(t))
        } else {
            (1.0, 1.0)
        };
        g.iter()
            .enumerate()
            .map(|(j, &g)| {
                let i = b * self.dim + j;
                self.m[i] = p.beta1 * self.m[i] + (1.0 - p.beta1) * g;
                self.v[i] = p.beta2 * self.v[i] + (1.0 - p.beta2) * (g * g);
                (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + p.eps)
            })
            .collect()
    }
}

fn tables(buckets: usize, dim: usize) -> Vec<Box<dyn MomentTable>> {
    vec![
        Box::new(AtomicMomentTable::new(buckets, dim).unwrap()),
        Box::new(StripedMomentTable::with_stripes(buckets, dim, 3).unwrap()),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Accumulate(usize, Vec<f32>),
    Adam(usize, Vec<f32>),
}

fn ops(buckets: usize, dim: usize) -> impl Strategy<Value = Vec<Op>> {
    let grad = proptest::collection::vec(-10.0f32..10.0, dim);
    let op = (0..buckets, grad, any::<bool>()).prop_map(|(b, g, adam)| {
        if adam {
            Op::Adam(b, g)
        } else {
            Op::Accumulate(b, g)
        }
    });
    proptest::collection::vec(op, 0..40)
}

proptest! {
    #[test]
    fn single_thread_matches_serial_reference_bitwise(
        ops in ops(5, 4),
        bias_correction in any::<bool>(),
    ) {
        let p = MomentParams::default()
.with_bias_correction(bias_correction);
        for table in tables(5, 4) {
            let mut reference = Reference::new(5, 4);
            for op in &ops {
                match op {
                    Op::Accumulate(b, g) => {
                        let t = table.accumulate(*b, g).unwrap();
                        reference.accumulate(*b, g);
                        prop_assert_eq!(t, reference.t[*b]);
                    }
                    Op::Adam(b, g) => {
                        let mut dir = [0.0; 4];
                        table.adam_update(*b, g, &p, &mut dir).unwrap();
                        let want = reference.adam(*b, g, &p);
                        prop_assert_eq!(dir.map(f32::to_bits).to_vec(), want.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                    }
                }
            }
            for b in 0..5 {
                let (mut m, mut v) = ([0.0f32; 4], [0.0f32; 4]);
                prop_assert_eq!(table.snapshot(b, &mut m, &mut v).unwrap(), reference.t[b]);
                prop_assert_eq!(&m[..], &reference.m[b * 4..b * 4 + 4]);
                prop_assert_eq!(&v[..], &reference.v[b * 4..b * 4 + 4]);
            }
        }
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let p = MomentParams::default();
    for table in tables(2, 3) {
        let mut dir = [0.0; 3];
        assert_eq!(
            table.accumulate(2, &[0.0; 3]),
            Err(Error::BucketOutOfRange {
                bucket: 2,
                buckets: 2
            })
        );
        assert_eq!(
            table.accumulate(0, &[0.0; 2]),
            Err(Error::LengthMismatch {
                expected: 3,
                got: 2
            })
        );
        assert_eq!(
            table.accumulate(0, &[1.0, f32::NAN, 1.0]),
            Err(Error::NonFinite { index: 1 })
        );
        assert_eq!(
            table.adam_update(1, &[1.0, 1.0, f32::INFINITY], &p, &mut dir),
            Err(Error::NonFinite { index: 2 })
        );
        assert_eq!(
            table.adam_update(1, &[1.0; 3], &p, &mut [0.0; 4]),
            Err(Error::LengthMismatch {
                expected: 3,
                got: 4
            })
        );
        let bad = p.with_beta1(1.0);
        assert_eq!(
            table.adam_update(1, &[1.0; 3], &bad, &mut dir),
            Err(Error::InvalidParams)
        );
        let bad = p.with_eps(0.0);
        assert_eq!(
            table.adam_update(1, &[1.0; 3], &bad, &mut dir),
            Err(Error::InvalidParams)
        );
        for b in 0..2 {
            let (mut m, mut v) = ([9.0; 3], [9.0; 3]);
            assert_eq!(table.snapshot(b, &mut m, &mut v), Ok(0));
            assert_eq!((m, v), ([0.0; 3], [0.0; 3]));
        }
        assert_eq!(
            table.snapshot(0, &mut [0.0; 3], &mut [0.0; 1]),
            Err(Error::LengthMismatch {
                expected: 3,
                got: 1
            })
        );
    }
}

#[test]
fn bad_shapes_are_refused() {
    assert_eq!(
        AtomicMomentTable::new(0, 4).err(),
        Some(Error::BadShape { buckets: 0, dim: 4 })
    );
    assert_eq!(
        StripedMomentTable::new(4, 0).err(),
        Some(Error::BadShape { buckets: 4, dim: 0 })
    );
    assert_eq!(
        AtomicMomentTable::new(usize::MAX, 2).err(),
        Some(Error::BadShape {
            buckets: usize::MAX,
            dim: 2
        })
    );
    assert_eq!(
        StripedMomentTable::with_stripes(4, 2, 0).err(),
        Some(Error::InvalidParams)
    );
}

#[test]
fn memory_bytes_counts_cells_and_counts() {
    let a = AtomicMomentTable::new(10, 4).unwrap();
    assert_eq!(a.memory_bytes(), 10 * 4 * 8 + 10 * 8);
    let s = StripedMomentTable::with_stripes(10, 4, 3).unwrap();
    let locks = 3 * size_of::<std::sync::Mutex<(Vec<u64>, Vec<f32>)>>();
    assert_eq!(s.memory_bytes(), locks + 10 * 4 * 2 * 4 + 10 * 8);
}
