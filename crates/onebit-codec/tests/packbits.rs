//! Sign packing: byte-compatible with numpy.packbits, word path vs bit-by-bit.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

mod common;

use common::{naive_get, naive_pack};
use onebit_codec::{
    CodecError, pack_signs, pack_signs_into, packed_len, unpack_add, unpack_signs, unpack_sum,
};
use proptest::prelude::*;

/// Vectors produced by real numpy (tests/data/gen_packbits.py).
const NUMPY: &str = include_str!("data/packbits.txt");

fn parse_numpy() -> Vec<(Vec<f32>, Vec<u8>)> {
    NUMPY
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let mut f = line.split('\t');
            let n: usize = f.next().unwrap().parse().unwrap();
            let xs = f.next().unwrap();
            let x: Vec<f32> = xs
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
                .collect();
            let hex = f.next().unwrap();
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            assert_eq!(x.len(), n);
            (x, bytes)
        })
        .collect()
}

#[test]
fn matches_numpy_packbits_for_every_length_0_to_130() {
    let vectors = parse_numpy();
    assert_eq!(vectors.len(), 131);
    for (x, expected) in vectors {
        assert_eq!(
            pack_signs(&x).as_raw_slice(),
            &expected[..],
            "n = {}",
            x.len()
        );
        let mut out = vec![0xAAu8; packed_len(x.len())];
        pack_signs_into(&x, &mut out).unwrap();
        assert_eq!(out, expected, "n = {}", x.len());
        assert_eq!(
            naive_pack(&x),
            expected,
            "the slow reference disagrees with numpy"
        );
    }
}

#[test]
fn hand_checked_vectors() {
    // numpy.packbits(~(np.array([...]) < 0)), checked by hand.
    assert_eq!(
        pack_signs(&[1.0, -1.0, 0.0, -0.0]).as_raw_slice(),
        &[0b1011_0000]
    );
    assert_eq!(pack_signs(&[-1.0; 9]).as_raw_slice(), &[0x00, 0x00]);
    assert_eq!(pack_signs(&[0.0; 9]).as_raw_slice(), &[0xFF, 0x80]);
    assert_eq!(
        pack_signs(&[f32::NAN, -f32::INFINITY]).as_raw_slice(),
        &[0b1000_0000]
    );
    assert!(pack_signs(&[]).is_empty());
}

#[test]
fn buffer_size_is_checked_not_panicked() {
    let x = [1.0f32; 9];
    let mut small = [0u8; 1];
    assert_eq!(
        pack_signs_into(&x, &mut small),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
    let mut out = [0.0f32; 9];
    assert_eq!(
        unpack_signs(&[0xFF; 3], 1.0, &mut out),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 3
        })
    );
    assert_eq!(
        unpack_add(&[0xFF], 1.0, &mut out),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
}

#[test]
fn large_unpack_uses_the_table_path_correctly() {
    // ≥ 16 Ki elements take the byte-table path; odd length for the tail byte.
    let n = 40_003;
    let x: Vec<f32> = (0..n)
        .map(|i| if (i * 7919) % 13 < 6 { -1.0 } else { 0.5 })
        .collect();
    let bits = pack_signs(&x);
    let mut out = vec![0.0f32; n];
    unpack_signs(bits.as_raw_slice(), 0.25, &mut out).unwrap();
    let mut acc = vec![1.0f32; n];
    unpack_add(bits.as_raw_slice(), 0.25, &mut acc).unwrap();
    for i in 0..n {
        let expect = if naive_get(bits.as_raw_slice(), i) {
            0.25
        } else {
            -0.25
        };
        assert_eq!(out[i], expect, "element {i}");
        assert_eq!(acc[i], 1.0 + expect, "element {i}");
        assert_eq!(out[i] > 0.0, x[i] > 0.0);
    }
}

fn signed_values() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1e3f32..1e3f32,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => any::<f32>(),
    ]
}

proptest! {
    #[test]
    fn word_packing_equals_bit_by_bit(x in prop::collection::vec(signed_values(), 0..400)) {
        let bv = pack_signs(&x);
        prop_assert_eq!(bv.len(), x.len());
        prop_assert_eq!(bv.as_raw_slice(), &naive_pack(&x)[..]);
        for (i, b) in bv.iter().enumerate() {
            prop_assert_eq!(*b, naive_get(bv.as_raw_slice(), i));
        }
    }

    #[test]
    fn unpack_inverts_pack(x in prop::collection::vec(signed_values(), 0..300), scale in 0.0f32..10.0) {
        let bits = pack_signs(&x);
        let mut out = vec![f32::NAN; x.len()];
        unpack_signs(bits.as_raw_slice(), scale, &mut out).unwrap();
        let mut acc: Vec<f32> = (0..x.len()).map(|i| i as f32).collect();
        unpack_add(bits.as_raw_slice(), scale, &mut acc).unwrap();
        for i in 0..x.len() {
            let expect = if naive_get(bits.as_raw_slice(), i) { scale } else { -scale };
            prop_assert_eq!(out[i].to_bits(), expect.to_bits());
            prop_assert_eq!(acc[i].to_bits(), (i as f32 + expect).to_bits());
        }
    }
}

fn scale_values() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -10.0f32..10.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => Just(3e38f32), // sums overflow to ∞
        1 => any::<f32>(),
    ]
}

proptest! {
    /// `unpack_sum` is zeroing then `unpack_add` rank by rank, bit for bit
    /// (and each decoded sign is the slow bit reader's), for 0–5 ranks and
    /// lengths around the 8-element bytes and the kernel's 1 Ki blocks.
    #[test]
    fn unpack_sum_equals_rank_order_unpack_add(
        n in prop_oneof![0usize..80, 1000usize..1100],
        ranks in prop::collection::vec((any::<u64>(), scale_values()), 0..6),
    ) {
        let bytes = packed_len(n);
        let bits: Vec<Vec<u8>> = ranks
            .iter()
            .map(|&(seed, _)| {
                let mut s = seed;
                let mut b: Vec<u8> = (0..bytes)
                    .map(|_| {
                        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (s >> 56) as u8
                    })
                    .collect();
                // Padding bits are 0, as `pack_signs` writes them.
                if n % 8 != 0
                    && let Some(last) = b.last_mut() {
                        *last &= 0xFFu8 << (8 - n % 8);
                    }
                b
            })
            .collect();
        let scales: Vec<f32> = ranks.iter().map(|&(_, s)| s).collect();
        let mut slow = vec![0.0f32; n];
        for (b, &s) in bits.iter().zip(&scales) {
            unpack_add(b, s, &mut slow).unwrap();
        }
        let mut naive = vec![0.0f32; n];
        for (b, &s) in bits.iter().zip(&scales) {
            for (i, o) in naive.iter_mut().enumerate() {
                *o += if naive_get(b, i) { s } else { -s };
            }
        }
        let refs: Vec<&[u8]> = bits.iter().map(Vec::as_slice).collect();
        let mut fast = vec![f32::NAN; n];
        unpack_sum(&refs, &scales, &mut fast).unwrap();
        let bits_of = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits_of(&fast), bits_of(&slow));
        prop_assert_eq!(bits_of(&fast), bits_of(&naive));
    }
}

#[test]
fn unpack_sum_checks_its_lengths() {
    let mut out = [7.0f32; 9];
    let (two, one) = ([0u8; 2], [0u8; 1]);
    assert_eq!(
        unpack_sum(&[&two, &one], &[1.0, 1.0], &mut out),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(
        unpack_sum(&[&two], &[1.0, 2.0], &mut out),
        Err(CodecError::LengthMismatch {
            expected: 1,
            found: 2
        })
    );
    assert!(out.iter().all(|&v| v == 7.0));
}
