//! Wire format: round trips, exact sizes, and a typed error for every malformed header.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

use core::num::NonZeroUsize;

use onebit_codec::stochastic::SplitMix64;
use onebit_codec::{
    CodecError, Compressed, Compressor, CompressorConfig, ErrorFeedback, HEADER_LEN, ScaleKind,
    decode, encoded_len, fuzzing, stochastic,
};
use proptest::prelude::*;

fn payload(n: usize, kind: ScaleKind, chunk: Option<usize>) -> Compressed {
    let cfg = CompressorConfig {
        feedback: ErrorFeedback::Full,
        scale: kind,
        chunk: chunk.and_then(NonZeroUsize::new),
    };
    let mut c = Compressor::with_config(n, cfg).unwrap();
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.25)
        .collect();
    c.compress(&x).unwrap()
}

#[test]
fn round_trip_for_every_scale_kind_and_exact_size() {
    for kind in [
        ScaleKind::Rms,
        ScaleKind::MeanAbs,
        ScaleKind::MaxAbs,
        ScaleKind::Unit,
    ] {
        for n in [0usize, 1, 8, 13, 64, 1000] {
            for chunk in [None, Some(1), Some(5), Some(64)] {
                let c = payload(n, kind, chunk);
                let wire = c.encode();
                let k = n.div_ceil(chunk.unwrap_or(n.max(1)));
                assert_eq!(
                    wire.len(),
                    n.div_ceil(8) + HEADER_LEN + 4 * k,
                    "n {n} chunk {chunk:?}"
                );
                assert_eq!(Some(wire.len()), encoded_len(n, c.chunk_len()));
                let back = decode(&wire).unwrap();
                assert_eq!(back, c);
                assert_eq!(back.scale_kind(), kind);
                let mut out = vec![0.0f32; n];
                back.decode_into(&mut out).unwrap();
                assert_eq!(out, c.to_f32());
                let mut into = vec![0u8; wire.len()];
                c.encode_into(&mut into).unwrap();
                assert_eq!(into, wire);
            }
        }
    }
    let mut rng = SplitMix64::new(3);
    let s = stochastic::compress(&[1.0, -2.0, 0.5], NonZeroUsize::new(2), &mut rng).unwrap();
    assert_eq!(decode(&s.encode()).unwrap(), s);
}

#[test]
fn decode_values_are_plus_minus_the_chunk_scale() {
    let c = Compressed::new(
        10,
        3,
        ScaleKind::Rms,
        vec![1.0, 2.0, 3.0, 4.0],
        vec![0b1010_1010, 0b1100_0000],
    )
    .unwrap();
    assert_eq!(
        c.to_f32(),
        [1.0, -1.0, 1.0, -2.0, 2.0, -2.0, 3.0, -3.0, 3.0, 4.0]
    );
    let mut acc = vec![1.0f32; 10];
    c.decode_add(&mut acc).unwrap();
    assert_eq!(acc, [2.0, 0.0, 2.0, -1.0, 3.0, -1.0, 4.0, -2.0, 4.0, 5.0]);
    assert_eq!(
        c.decode_into(&mut [0.0; 3]),
        Err(CodecError::LengthMismatch {
            expected: 10,
            found: 3
        })
    );
}

#[test]
fn truncation_and_extension_give_size_errors() {
    let wire = payload(100, ScaleKind::Rms, Some(30)).encode();
    let total = wire.len();
    for cut in 0..total {
        let err = decode(&wire[..cut]).unwrap_err();
        let needed = if cut < HEADER_LEN { HEADER_LEN } else { total };
        assert_eq!(
            err,
            CodecError::Truncated { needed, found: cut },
            "cut {cut}"
        );
    }
    let mut longer = wire.clone();
    longer.push(0);
    assert_eq!(
        decode(&longer),
        Err(CodecError::TrailingBytes {
            expected: total,
            found: total + 1
        })
    );
}

#[test]
fn every_header_bit_flip_is_caught_or_harmless() {
    let original = payload(100, ScaleKind::Rms, Some(30));
    let wire = original.encode();
    for byte in 0..HEADER_LEN {
        for bit in 0..8 {
            let mut w = wire.clone();
            w[byte] ^= 1 << bit;
            let got = decode(&w);
            match byte {
                0..=3 => assert_eq!(got, Err(CodecError::BadMagic)),
                4 => assert_eq!(got, Err(CodecError::UnsupportedVersion(1 ^ (1 << bit)))),
                5 => match 1u8 << bit {
                    // 0 → 1 (mean-abs) or 2 (max-abs): still a valid payload, other kind.
                    1 | 2 => assert_eq!(
                        got.unwrap().scale_kind(),
                        if bit == 0 {
                            ScaleKind::MeanAbs
                        } else {
                            ScaleKind::MaxAbs
                        }
                    ),
                    v => assert_eq!(got, Err(CodecError::UnknownScaleKind(v))),
                },
                6 | 7 => assert_eq!(got, Err(CodecError::ReservedNotZero)),
                // Element count: a different size, too large for any size, or
                // (100 → 101: same byte and scale counts, zero padding bit) a
                // valid payload of another length.
                8..=15 => match got {
                    Ok(c) => assert_eq!(c.len(), 100 ^ (1 << ((byte - 8) * 8 + bit))),
                    Err(e) => assert!(
                        matches!(
                            e,
                            CodecError::Truncated { .. }
                                | CodecError::TrailingBytes { .. }
                                | CodecError::TooLarge
                        ),
                        "byte {byte} bit {bit}: {e:?}"
                    ),
                },
                // Chunk size: fewer or more scales (k = ceil(100 / c) changes).
                _ => {
                    let chunk = 30u64 ^ (1u64 << ((byte - 16) * 8 + bit));
                    let k = 100u64.div_ceil(chunk);
                    if k == 4 {
                        assert_eq!(got.unwrap().chunk_len() as u64, chunk);
                    } else {
                        assert!(
                            matches!(
                                got,
                                Err(CodecError::Truncated { .. } | CodecError::TrailingBytes { .. })
                            ),
                            "{got:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_scales_zero_chunk_and_padding_are_rejected() {
    let c = payload(20, ScaleKind::Rms, Some(8));
    let wire = c.encode();
    for (bad, name) in [
        (f32::NAN, "nan"),
        (f32::INFINITY, "inf"),
        (-1.0, "negative"),
        (-0.0, "minus zero"),
    ] {
        let mut w = wire.clone();
        w[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&bad.to_le_bytes());
        assert_eq!(
            decode(&w),
            Err(CodecError::InvalidScale { chunk: 1 }),
            "{name}"
        );
    }
    let mut w = wire.clone();
    w[16..24].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(decode(&w), Err(CodecError::ZeroChunk));
    let mut w = wire.clone();
    *w.last_mut().unwrap() |= 1; // 20 elements: 4 padding bits in the last byte
    assert_eq!(decode(&w), Err(CodecError::NonZeroPadding));
    let unit = payload(9, ScaleKind::Unit, None);
    let mut w = unit.encode();
    w[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2.0f32.to_le_bytes());
    assert_eq!(decode(&w), Err(CodecError::InvalidScale { chunk: 0 }));
    // A header announcing 2^62 elements in 24 bytes: rejected without allocating.
    let mut w = wire[..HEADER_LEN].to_vec();
    w[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(
        decode(&w),
        Err(CodecError::Truncated { .. } | CodecError::TooLarge)
    ));
    // u64::MAX elements in chunks of 1: 4·k overflows usize.
    w[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    w[16..24].copy_from_slice(&1u64.to_le_bytes());
    assert_eq!(decode(&w), Err(CodecError::TooLarge));
}

#[test]
fn compressed_new_validates_its_parts() {
    assert_eq!(
        Compressed::new(3, 0, ScaleKind::Rms, vec![], vec![0]),
        Err(CodecError::ZeroChunk)
    );
    assert_eq!(
        Compressed::new(3, 2, ScaleKind::Rms, vec![1.0], vec![0]),
        Err(CodecError::LengthMismatch {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(
        Compressed::new(9, 9, ScaleKind::Rms, vec![1.0], vec![0]),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(
        Compressed::new(3, 3, ScaleKind::Rms, vec![1.0], vec![0x10]),
        Err(CodecError::NonZeroPadding)
    );
    assert!(Compressed::new(3, 3, ScaleKind::Rms, vec![1.0], vec![0xE0]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The fuzz targets' checks, run on random inputs in the normal test suite.
    #[test]
    fn fuzz_entry_points_hold_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::decode_bytes(&data);
        fuzzing::roundtrip(&data);
    }

    /// Random valid payloads with a mutated byte: decode returns (Ok or a typed
    /// error), and anything accepted re-encodes to the same bytes.
    #[test]
    fn mutated_payloads_never_panic(n in 0usize..200, at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut w = payload(n, ScaleKind::MeanAbs, Some(16)).encode();
        let i = at.index(w.len());
        w[i] ^= flip;
        fuzzing::decode_bytes(&w);
    }
}

#[test]
fn large_chunked_decode_matches_bit_by_bit() {
    // Chunks of 999 (not byte-aligned) and ≥ 16 Ki elements (table path).
    for chunk in [Some(999), Some(20_000), None] {
        let n = 50_001;
        let c = payload(n, ScaleKind::Rms, chunk);
        let c_len = c.chunk_len();
        let mut out = vec![0.0f32; n];
        c.decode_into(&mut out).unwrap();
        for (i, &v) in out.iter().enumerate() {
            let bit = c.bits()[i / 8] >> (7 - i % 8) & 1 == 1;
            let s = c.scales()[i / c_len];
            assert_eq!(v, if bit { s } else { -s }, "element {i}, chunk {chunk:?}");
        }
    }
}
