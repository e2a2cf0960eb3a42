//! Wire format: round trips, exact sizes, and a typed error for every malformed header.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

use core::num::NonZeroUsize;

use onebit_codec::stochastic::SplitMix64;
use onebit_codec::wire::{VERSION, VERSION_1};
use onebit_codec::{
    CHECKSUM_LEN, CodecError, Compressed, Compressor, CompressorConfig, ErrorFeedback, HEADER_LEN,
    ScaleKind, crc32c, decode, encoded_len, fuzzing, stochastic,
};
use proptest::prelude::*;

fn payload(n: usize, kind: ScaleKind, chunk: Option<usize>) -> Compressed {
    let cfg = CompressorConfig::default()
        .with_feedback(ErrorFeedback::Full)
        .with_scale(kind)
        .with_chunk(chunk.and_then(NonZeroUsize::new));
    let mut c = Compressor::with_config(n, cfg).unwrap();
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.25)
        .collect();
    c.compress(&x).unwrap()
}

/// The version-1 encoding of `c` (no checksum), as older builds wrote it.
fn v1(c: &Compressed) -> Vec<u8> {
    let mut w = c.encode();
    w.truncate(w.len() - CHECKSUM_LEN);
    w[4] = VERSION_1;
    w
}

/// Recompute the checksum of a version-2 payload after editing it, so the
/// checks behind the checksum can be reached.
fn reseal(w: &mut [u8]) {
    let end = w.len() - CHECKSUM_LEN;
    let sum = crc32c(&w[..end]);
    w[end..].copy_from_slice(&sum.to_le_bytes());
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
                    n.div_ceil(8) + HEADER_LEN + 4 * k + CHECKSUM_LEN,
                    "n {n} chunk {chunk:?}"
                );
                assert_eq!(wire[4], VERSION);
                // Version 1 still decodes, to the same payload.
                assert_eq!(decode(&v1(&c)).unwrap(), c);
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
    // Reported as cut, with both lengths (not as a checksum mismatch).
    assert_eq!(
        decode(&wire[..total - 3]).unwrap_err().to_string(),
        format!(
            "payload truncated: needs {total} bytes, found {}",
            total - 3
        )
    );
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

/// Version 1 has no checksum: a header bit flip is a typed error or a
/// payload of a visibly different shape (kind, length, chunk).
#[test]
fn every_header_bit_flip_is_caught_or_harmless() {
    let original = payload(100, ScaleKind::Rms, Some(30));
    let wire = v1(&original);
    for byte in 0..HEADER_LEN {
        for bit in 0..8 {
            let mut w = wire.clone();
            w[byte] ^= 1 << bit;
            let got = decode(&w);
            match byte {
                0..=3 => assert_eq!(got, Err(CodecError::BadMagic)),
                // 1 → 3, 5, …; 1 → 0; but never 1 → 2 (bit 1 sets 3).
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

/// Issue 16: in version 1 a flipped sign or scale bit decoded `Ok` to a wrong
/// tensor (an exponent flip gave a scale of 1.7e-38). In version 2 every
/// single-bit flip anywhere in the payload — header, scales, signs, the
/// checksum itself — is an error, and so is every flip of two adjacent bits.
#[test]
fn every_bit_flip_of_a_payload_is_an_error() {
    for (n, kind, chunk) in [
        (100, ScaleKind::Rms, Some(30)),
        (1000, ScaleKind::MaxAbs, Some(64)),
        (13, ScaleKind::Unit, None),
    ] {
        let wire = payload(n, kind, chunk).encode();
        for bit in 0..wire.len() * 8 {
            for width in [1u16, 3] {
                let mut w = wire.clone();
                let pattern = width << (bit % 8);
                w[bit / 8] ^= pattern as u8;
                if let Some(next) = w.get_mut(bit / 8 + 1) {
                    *next ^= (pattern >> 8) as u8;
                }
                let got = decode(&w);
                assert!(
                    got.is_err(),
                    "n {n}: flip of {width:b} at bit {bit} decoded: {got:?}"
                );
            }
        }
        // A flip in the scales or signs is reported as a checksum mismatch
        // (the scale's exponent bit here) …
        let mut w = wire.clone();
        w[HEADER_LEN + 3] ^= 0x20;
        assert!(matches!(
            decode(&w),
            Err(CodecError::ChecksumMismatch { .. })
        ));
        // … where version 1 decodes the same flip to another scale.
        let c = payload(n, kind, chunk);
        let mut old = v1(&c);
        old[HEADER_LEN + 3] ^= 0x20;
        if let Ok(wrong) = decode(&old) {
            assert_ne!(wrong.scales()[0], c.scales()[0]);
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
        reseal(&mut w);
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
    let last_sign_byte = w.len() - CHECKSUM_LEN - 1;
    w[last_sign_byte] |= 1; // 20 elements: 4 padding bits in the last byte
    reseal(&mut w);
    assert_eq!(decode(&w), Err(CodecError::NonZeroPadding));
    let unit = payload(9, ScaleKind::Unit, None);
    let mut w = unit.encode();
    w[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2.0f32.to_le_bytes());
    reseal(&mut w);
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
        fuzzing::corrupted_payload(&data);
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
