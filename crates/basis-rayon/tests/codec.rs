//! The parallel codec paths against the serial `onebit-codec`, bit for bit,
//! on 1, 2, 3 and 8 threads (tensors span several parallel blocks).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers too: a panic is a failing test"
)]

use core::num::NonZeroUsize;
use std::sync::OnceLock;

use basis_rayon::{
    Error, ParCompressor, par_decode_add, par_decode_into, par_pack_signs_into, par_unpack_signs,
    thread_pool,
};
use onebit_codec::{
    CodecError, Compressor, CompressorConfig, ErrorFeedback, ScaleKind, pack_signs_into,
    packed_len, unpack_signs,
};
use proptest::prelude::*;

const THREADS: [usize; 4] = [1, 2, 3, 8];

fn pools() -> &'static [rayon::ThreadPool] {
    static POOLS: OnceLock<Vec<rayon::ThreadPool>> = OnceLock::new();
    POOLS.get_or_init(|| THREADS.iter().map(|&t| thread_pool(t).unwrap()).collect())
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
    // Multiples of 64 take the whole-chunk path, others the block path.
    let chunk = prop_oneof![
        Just(None),
        (1usize..40_000).prop_map(NonZeroUsize::new),
        (1usize..400).prop_map(|k| NonZeroUsize::new(64 * k)),
    ];
    (feedback, scale, chunk).prop_map(|(feedback, scale, chunk)| {
        CompressorConfig::default()
            .with_feedback(feedback)
            .with_scale(scale)
            .with_chunk(chunk)
    })
}

/// Tensor lengths up to ~4 parallel blocks, odd sizes included.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..200, 16_000usize..70_000]
}

/// A step's input: mostly moderate values, sometimes a NaN or a huge value
/// (the serial overflow check must fire at the same index).
fn input(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mode = next() % 8;
    (0..n)
        .map(|_| {
            let r = next();
            let v = (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            match (mode, r % 5000) {
                (0, 0) => f32::NAN,
                (1, 0) => 3.3e38,
                (2, _) => -0.0,
                _ => v * 4.0,
            }
        })
        .collect()
}

fn compare_compressor(
    n: usize,
    config: CompressorConfig,
    seeds: &[u64],
) -> Result<(), TestCaseError> {
    let mut serial = Compressor::with_config(n, config).unwrap();
    let mut par: Vec<ParCompressor> = THREADS
        .iter()
        .map(|_| ParCompressor::with_config(n, config).unwrap())
        .collect();
    let k = serial.chunks();
    for &seed in seeds {
        let x = input(n, seed);
        let (mut want_signs, mut want_scales) = (vec![0xAAu8; packed_len(n)], vec![-1.0f32; k]);
        let want = serial.compress_chunks_into(&x, &mut want_signs, &mut want_scales);
        let mut want_e = vec![0.0; n];
        serial.error_into(&mut want_e).unwrap();
        for ((pool, threads), par) in pools().iter().zip(THREADS).zip(&mut par) {
            let (mut signs, mut scales) = (vec![0xAAu8; packed_len(n)], vec![-1.0f32; k]);
            let got = pool.install(|| par.compress_chunks_into(&x, &mut signs, &mut scales));
            prop_assert_eq!(
                got,
                want.map_err(Error::Codec),
                "result, {} threads",
                threads
            );
            prop_assert_eq!(&signs, &want_signs, "signs, {} threads", threads);
            prop_assert_eq!(
                bits(&scales),
                bits(&want_scales),
                "scales, {} threads",
                threads
            );
            let mut e = vec![0.0; n];
            pool.install(|| par.error_into(&mut e)).unwrap();
            prop_assert_eq!(bits(&e), bits(&want_e), "error buffer, {} threads", threads);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn compressor_is_bit_identical_to_serial(
        n in len(),
        config in config(),
        seeds in proptest::collection::vec(any::<u64>(), 1..4),
    ) {
        compare_compressor(n, config, &seeds)?;
    }

    #[test]
    fn pack_unpack_decode_are_bit_identical(n in len(), seed in any::<u64>(), chunk in 1usize..30_000) {
        let x = input(n, seed);
        let mut want = vec![0u8; packed_len(n)];
        pack_signs_into(&x, &mut want).unwrap();
        let mut unpacked = vec![0.0; n];
        unpack_signs(&want, 0.75, &mut unpacked).unwrap();
        let config = CompressorConfig::default()
.with_chunk(NonZeroUsize::new(chunk));
        let x_ok: Vec<f32> = x.iter().map(|v| if v.is_finite() && v.abs() < 1e30 { *v } else { 1.0 }).collect();
        let c = Compressor::with_config(n, config).unwrap().compress(&x_ok).unwrap();
        let decoded = c.to_f32();
        let mut added = vec![0.5f32; n];
        c.decode_add(&mut added).unwrap();
        for (pool, threads) in pools().iter().zip(THREADS) {
            pool.install(|| -> Result<(), TestCaseError> {
                let mut got = vec![0xFFu8; packed_len(n)];
                par_pack_signs_into(&x, &mut got).unwrap();
                prop_assert_eq!(&got, &want, "pack, {} threads", threads);
                let mut out = vec![0.0; n];
                par_unpack_signs(&got, 0.75, &mut out).unwrap();
                prop_assert_eq!(bits(&out), bits(&unpacked), "unpack, {} threads", threads);
                par_decode_into(&c, &mut out).unwrap();
                prop_assert_eq!(bits(&out), bits(&decoded), "decode, {} threads", threads);
                let mut acc = vec![0.5f32; n];
                par_decode_add(&c, &mut acc).unwrap();
                prop_assert_eq!(bits(&acc), bits(&added), "decode_add, {} threads", threads);
                Ok(())
            })?;
        }
    }
}

#[test]
fn compressor_round_trips_through_serial_state() {
    let n = 40_000;
    let x = input(n, 99);
    let mut serial = Compressor::new(n);
    let mut signs = vec![0u8; packed_len(n)];
    serial.compress_into(&x, &mut signs).unwrap();
    let mut par = ParCompressor::from_compressor(&mut serial);
    let mut par_signs = signs.clone();
    let want = serial.compress_into(&x, &mut signs).unwrap();
    let got = pools()[1]
        .install(|| par.compress_into(&x, &mut par_signs))
        .unwrap();
    assert_eq!((got.to_bits(), &par_signs), (want.to_bits(), &signs));
    let mut back = par.to_compressor().unwrap();
    assert_eq!(
        bits(back.materialize_error()),
        bits(serial.materialize_error())
    );
    // After a reset both start again from e = 0.
    serial.reset_error();
    par.reset_error();
    let want = serial.compress_into(&x, &mut signs).unwrap();
    let got = pools()[2]
        .install(|| par.compress_into(&x, &mut par_signs))
        .unwrap();
    assert_eq!((got.to_bits(), &par_signs), (want.to_bits(), &signs));
}

#[test]
fn bad_inputs_are_refused_like_serial() {
    let mut par = ParCompressor::new(100);
    let x = vec![1.0f32; 100];
    assert_eq!(
        par.compress_into(&x[..99], &mut [0u8; 13]),
        Err(Error::Codec(CodecError::LengthMismatch {
            expected: 100,
            found: 99
        }))
    );
    assert_eq!(
        par.compress_into(&x, &mut [0u8; 12]),
        Err(Error::Codec(CodecError::BufferSize {
            expected: 13,
            found: 12
        }))
    );
    assert_eq!(
        par_pack_signs_into(&x, &mut [0u8; 14]),
        Err(Error::Codec(CodecError::BufferSize {
            expected: 13,
            found: 14
        }))
    );
    assert_eq!(
        par_unpack_signs(&[0u8; 12], 1.0, &mut [0.0; 100]),
        Err(Error::Codec(CodecError::BufferSize {
            expected: 13,
            found: 12
        }))
    );
    let bad = ErrorFeedback::Decayed { beta: 1.5 };
    assert_eq!(
        ParCompressor::with_config(10, CompressorConfig::default().with_feedback(bad)).err(),
        Some(Error::Codec(CodecError::InvalidBeta))
    );
    assert_eq!(
        par.set_error(&[f32::INFINITY; 100]),
        Err(Error::Codec(CodecError::NonFinite { index: 0 }))
    );
    let mut e = vec![9.0; 100];
    par.error_into(&mut e).unwrap();
    assert_eq!(e, vec![0.0; 100], "a refused call changed the error buffer");
}
