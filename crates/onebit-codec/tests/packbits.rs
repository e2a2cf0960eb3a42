//! Sign packing: byte-compatible with numpy.packbits, word path vs bit-by-bit.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

mod common;

use common::{naive_get, naive_pack};
use onebit_codec::{CodecError, pack_signs, pack_signs_into, packed_len, unpack_add, unpack_signs};
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
