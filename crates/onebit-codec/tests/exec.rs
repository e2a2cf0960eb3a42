//! The codec's passes in pieces (`onebit_codec::exec`) against the serial
//! calls, bit for bit, with the pieces run in reverse order on two threads:
//! the pieces must not depend on each other or on their order.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

use core::num::NonZeroUsize;

use onebit_codec::exec::{Executor, Sequential, pack_signs_into_with, unpack_signs_with};
use onebit_codec::{
    CodecError, Compressor, CompressorConfig, ErrorFeedback, ScaleKind, pack_signs_into,
    packed_len, unpack_signs,
};
use proptest::prelude::*;

/// The second half of the pieces on another thread, each half backwards.
struct Scrambled;

impl Executor for Scrambled {
    fn for_each<T, F>(&self, mut items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        let back = items.split_off(items.len() / 2);
        std::thread::scope(|s| {
            s.spawn(|| back.into_iter().rev().for_each(&f));
            items.into_iter().rev().for_each(&f);
        });
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn config() -> impl Strategy<Value = CompressorConfig> {
    let feedback = prop_oneof![
        Just(ErrorFeedback::Full),
        (0.0f32..=1.0).prop_map(|beta| ErrorFeedback::Decayed { beta })
    ];
    let scale = prop_oneof![
        Just(ScaleKind::Rms),
        Just(ScaleKind::MeanAbs),
        Just(ScaleKind::MaxAbs),
        Just(ScaleKind::Unit)
    ];
    // Multiples of 64 take the whole-chunk pieces, others the block pieces.
    let chunk = prop_oneof![
        Just(None),
        (1usize..20_000).prop_map(NonZeroUsize::new),
        (1usize..300).prop_map(|k| NonZeroUsize::new(64 * k)),
    ];
    (feedback, scale, chunk).prop_map(|(feedback, scale, chunk)| {
        CompressorConfig::default()
            .with_feedback(feedback)
            .with_scale(scale)
            .with_chunk(chunk)
    })
}

/// A step's input: moderate values, in some steps one NaN or one value that
/// overflows `x + e` (the error index must be the serial one).
fn input(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mode, at) = (next() % 6, usize::try_from(next()).unwrap_or(0) % n.max(1));
    (0..n)
        .map(|i| match (mode, i == at) {
            (0, true) => f32::NAN,
            (1, true) => f32::MAX,
            _ => ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 4.0,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Signs, scales, results, error buffers and untouched outputs on
    /// error: all the serial compressor's, step after step.
    #[test]
    fn compressor_in_pieces_is_the_serial_compressor(
        n in prop_oneof![0usize..300, 16_000usize..50_000],
        config in config(),
        seeds in proptest::collection::vec(any::<u64>(), 1..4),
    ) {
        let mut serial = Compressor::with_config(n, config).unwrap();
        let mut split = serial.clone();
        let k = serial.chunks();
        for seed in seeds {
            let x = input(n, seed);
            let (mut want_signs, mut want_scales) = (vec![0xAAu8; packed_len(n)], vec![-1.0f32; k]);
            let want = serial.compress_chunks_into(&x, &mut want_signs, &mut want_scales);
            let (mut signs, mut scales) = (vec![0xAAu8; packed_len(n)], vec![-1.0f32; k]);
            let got = split.compress_chunks_into_with(&Scrambled, &x, &mut signs, &mut scales);
            prop_assert_eq!(got, want);
            prop_assert_eq!(&signs, &want_signs);
            prop_assert_eq!(bits(&scales), bits(&want_scales));
            let (mut e, mut want_e) = (vec![0.0; n], vec![0.0; n]);
            split.error_into_with(&Scrambled, &mut e).unwrap();
            serial.error_into(&mut want_e).unwrap();
            prop_assert_eq!(bits(&e), bits(&want_e));
        }
    }

    /// Packing, unpacking and decoding in pieces give the serial bits.
    #[test]
    fn pack_unpack_decode_in_pieces_are_serial(
        n in prop_oneof![0usize..300, 16_000usize..50_000],
        seed in any::<u64>(),
        chunk in 1usize..20_000,
    ) {
        let x: Vec<f32> = input(n, seed).into_iter().map(|v| if v.is_finite() { v } else { -1.5 }).collect();
        let mut want = vec![0u8; packed_len(n)];
        pack_signs_into(&x, &mut want).unwrap();
        let mut got = vec![0x55u8; packed_len(n)];
        pack_signs_into_with(&Scrambled, &x, &mut got).unwrap();
        prop_assert_eq!(&got, &want);
        let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
        unpack_signs(&want, 0.75, &mut a).unwrap();
        unpack_signs_with(&Scrambled, &want, 0.75, &mut b).unwrap();
        prop_assert_eq!(bits(&a), bits(&b));
        let config = CompressorConfig::default().with_chunk(NonZeroUsize::new(chunk));
        let small: Vec<f32> = x.iter().map(|v| v.clamp(-8.0, 8.0)).collect();
        let c = Compressor::with_config(n, config).unwrap().compress(&small).unwrap();
        c.decode_into_with(&Scrambled, &mut b).unwrap();
        prop_assert_eq!(bits(&b), bits(&c.to_f32()));
        let (mut a, mut b) = (vec![0.5f32; n], vec![0.5f32; n]);
        c.decode_add(&mut a).unwrap();
        c.decode_add_with(&Scrambled, &mut b).unwrap();
        prop_assert_eq!(bits(&a), bits(&b));
    }
}

/// Wrong lengths are the serial calls' errors, and change nothing.
#[test]
fn bad_lengths_are_refused_like_serial() {
    let mut c = Compressor::new(100);
    let x = vec![1.0f32; 100];
    assert_eq!(
        c.compress_into_with(&Sequential, &x[..99], &mut [0u8; 13]),
        Err(CodecError::LengthMismatch {
            expected: 100,
            found: 99
        })
    );
    assert_eq!(
        c.compress_into_with(&Sequential, &x, &mut [0u8; 12]),
        Err(CodecError::BufferSize {
            expected: 13,
            found: 12
        })
    );
    assert_eq!(
        pack_signs_into_with(&Sequential, &x, &mut [0u8; 14]),
        Err(CodecError::BufferSize {
            expected: 13,
            found: 14
        })
    );
    let payload = c.compress_with(&Sequential, &x).unwrap();
    assert_eq!(
        payload.decode_into_with(&Sequential, &mut [0.0; 99]),
        Err(CodecError::LengthMismatch {
            expected: 100,
            found: 99
        })
    );
    let mut chunked = Compressor::with_config(
        100,
        CompressorConfig::default().with_chunk(NonZeroUsize::new(10)),
    )
    .unwrap();
    assert_eq!(
        chunked.compress_into_with(&Sequential, &x, &mut [0u8; 13]),
        Err(CodecError::LengthMismatch {
            expected: 10,
            found: 1
        })
    );
}
