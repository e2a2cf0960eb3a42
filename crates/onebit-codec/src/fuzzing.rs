//! Entry points of the cargo-fuzz targets, kept outside this package (one
//! library call per target).
//!
//! They panic when an invariant breaks: that is how a fuzzer reports a bug.

use alloc::vec;
use alloc::vec::Vec;
use core::num::NonZeroUsize;

use crate::wire::{VERSION, VERSION_1};
use crate::{
    CHECKSUM_LEN, Compressor, CompressorConfig, ErrorFeedback, ScaleKind, check_finite, decode,
    encoded_len, pack_signs, packed_len, reference, sign_bit,
};

/// `decode` must return (never panic, never over-allocate) on any bytes, and
/// whatever it accepts must re-encode to the same bytes: a version-2 payload
/// to itself, a version-1 payload to itself plus the checksum trailer.
///
/// # Panics
/// When an accepted payload does not re-encode to `data`.
pub fn decode_bytes(data: &[u8]) {
    if let Ok(c) = decode(data) {
        let again = c.encode();
        if data.get(4) == Some(&VERSION_1) {
            let (body, _) = again.split_at(again.len() - CHECKSUM_LEN);
            assert_eq!(&body[..4], &data[..4]);
            assert_eq!(body[4], VERSION);
            assert_eq!(
                &body[5..],
                &data[5..],
                "v1 decode → encode is not the identity"
            );
        } else {
            assert_eq!(again, data, "decode → encode is not the identity");
        }
        assert_eq!(c.to_f32().len(), c.len());
    }
}

/// Compress the floats in `data[2..]`, encode, flip the bits of the mask
/// `data[1]` (at least one) at the byte `data[0]` selects: `decode` must fail,
/// since CRC-32C catches every error burst of up to 32 bits, and a flip
/// in the header is refused by its own checks or by the checksum.
///
/// # Panics
/// When a corrupted payload decodes.
pub fn corrupted_payload(data: &[u8]) {
    let [at, mask, rest @ ..] = data else {
        return;
    };
    let x: Vec<f32> = rest
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let Ok(c) = Compressor::new(x.len()).compress(&x) else {
        return;
    };
    let mut wire = c.encode();
    let i = usize::from(*at) % wire.len();
    wire[i] ^= (*mask).max(1);
    assert!(decode(&wire).is_err(), "a corrupted payload decoded");
}

/// Build a tensor and options from `data`, compress two steps with the fused
/// compressor and the two-pass reference, and check: identical bits, signs
/// equal to the bit-by-bit rule, exact payload size, encode → decode identity.
///
/// Layout of `data`: byte 0 picks the scale kind and feedback, byte 1 the chunk
/// (0 = none), the rest are `f32` LE (split into two steps).
///
/// # Panics
/// When any of the checks fails.
pub fn roundtrip(data: &[u8]) {
    let [sel, chunk_byte, rest @ ..] = data else {
        return;
    };
    let kind = match sel % 4 {
        0 => ScaleKind::Rms,
        1 => ScaleKind::MeanAbs,
        2 => ScaleKind::MaxAbs,
        _ => ScaleKind::Unit,
    };
    let feedback = if sel & 4 == 0 {
        ErrorFeedback::Full
    } else {
        ErrorFeedback::Decayed { beta: 0.75 }
    };
    let chunk = NonZeroUsize::new(usize::from(*chunk_byte));
    let floats: Vec<f32> = rest
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let n = floats.len() / 2;
    let config = CompressorConfig {
        feedback,
        scale: kind,
        chunk,
    };
    let Ok(mut fused) = Compressor::with_config(n, config) else {
        return;
    };
    let mut e = vec![0.0f32; n];
    let k = fused.chunks();
    for x in [&floats[..n], &floats[n..2 * n]] {
        let (mut bits, mut scales) = (vec![0u8; packed_len(n)], vec![0.0f32; k]);
        let e_before = e.clone();
        let reference_result = reference::compress_step(
            x,
            &mut e,
            feedback,
            kind,
            chunk.map(NonZeroUsize::get),
            &mut bits,
            &mut scales,
        );
        let fused_result = fused.compress(x);
        let Ok(c) = fused_result else {
            assert!(reference_result.is_err(), "fused failed, reference did not");
            return;
        };
        assert!(reference_result.is_ok(), "reference failed, fused did not");
        assert!(check_finite(x).is_ok());
        assert_eq!(
            c.bits(),
            &bits[..],
            "signs differ from the two-pass reference"
        );
        assert_eq!(
            bit_pattern(c.scales()),
            bit_pattern(&scales),
            "scales differ"
        );
        let mut fused_e = vec![0.0f32; n];
        assert!(fused.error_into(&mut fused_e).is_ok());
        assert_eq!(
            bit_pattern(&fused_e),
            bit_pattern(&e),
            "error buffers differ"
        );
        // Signs of p = x + e_before, packed one bit at a time.
        let mut naive = vec![0u8; packed_len(n)];
        for (i, (&xi, &ei)) in x.iter().zip(&e_before).enumerate() {
            naive[i / 8] |= u8::from(sign_bit(xi + ei)) << (7 - i % 8);
        }
        assert_eq!(
            c.bits(),
            &naive[..],
            "signs differ from the bit-by-bit rule"
        );
        let repacked = pack_signs(&c.to_f32());
        assert!(c.scales().contains(&0.0) || repacked.as_raw_slice() == c.bits());
        let wire = c.encode();
        assert_eq!(Some(wire.len()), encoded_len(n, fused.chunk_len()));
        assert_eq!(
            decode(&wire).ok().as_ref(),
            Some(&c),
            "encode → decode changed the payload"
        );
        if let Some((_, short)) = wire.split_last() {
            assert!(decode(short).is_err(), "a truncated payload decoded");
        }
        // The same payload as version 1 (no trailer) decodes to it too.
        if let Some(mut old) = wire.get(..wire.len() - CHECKSUM_LEN).map(<[u8]>::to_vec) {
            old[4] = VERSION_1;
            assert_eq!(decode(&old).ok().as_ref(), Some(&c), "v1 decode differs");
        }
    }
}

fn bit_pattern(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `graded::decode` on arbitrary bytes (grade from `data[0]`, element
/// count from `data[1]`): a typed error or success, never a panic; on
/// error the output is unchanged; on success a 2-bit frame re-encodes its
/// own decoded levels to the same codes, and a bf16 frame to itself.
///
/// # Panics
/// When a check fails.
pub fn graded_decode(data: &[u8]) {
    use crate::graded::{Grade, decode, encode_residual};
    let [g, n, frame @ ..] = data else {
        return;
    };
    let grade = if g % 2 == 0 {
        Grade::TwoBit
    } else {
        Grade::Bf16
    };
    let mut out = vec![0.5f32; usize::from(*n)];
    if decode(grade, frame, &mut out, false).is_err() {
        assert!(
            out.iter().all(|&x| x == 0.5),
            "a refused frame changed the output"
        );
        return;
    }
    assert!(out.iter().all(|x| x.is_finite()));
    if grade == Grade::Bf16 {
        let mut again = vec![0u8; frame.len()];
        let mut p = out.clone();
        assert!(encode_residual(grade, &mut p, &mut again).is_ok());
        assert_eq!(again, frame, "bf16 decode → encode is not the identity");
        assert!(p.iter().all(|&r| r == 0.0));
    }
}
