//! The bridge between the safe compressor types and the leaf SIMD kernels
//! (`simd`, which imports nothing from the rest of the crate): the input
//! type, and the fused word loops on the widest vectors the CPU has, with
//! their portable stand-ins where there is no x86_64 kernel.

use alloc::vec::Vec;

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
use crate::scale::{Accumulator, Words};

/// What a step compresses: `x` itself, or `wa·a + wb·b` formed on the fly.
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    /// The input itself.
    Plain(&'a [f32]),
    /// `wa·a + wb·b`: `(wa, a, wb, b)`.
    Blend(f32, &'a [f32], f32, &'a [f32]),
}

impl<'a> Input<'a> {
    /// Elements `start..end` of the input: borrowed, or formed in `stage`
    /// (`end − start ≤ stage.len()`).
    #[inline(always)]
    pub(crate) fn block<'s>(&self, start: usize, end: usize, stage: &'s mut [f32]) -> &'s [f32]
    where
        'a: 's,
    {
        match *self {
            Input::Plain(x) => &x[start..end],
            Input::Blend(wa, a, wb, b) => {
                let st = &mut stage[..end - start];
                for ((o, &a), &b) in st.iter_mut().zip(&a[start..end]).zip(&b[start..end]) {
                    *o = wa * a + wb * b;
                }
                st
            }
        }
    }

    /// Elements `start..end` of the input, still unformed.
    pub(crate) fn slice(self, start: usize, end: usize) -> Self {
        match self {
            Input::Plain(x) => Input::Plain(&x[start..end]),
            Input::Blend(wa, a, wb, b) => Input::Blend(wa, &a[start..end], wb, &b[start..end]),
        }
    }

    /// The whole input as a vector (slow paths).
    pub(crate) fn to_vec(self) -> Vec<f32> {
        match self {
            Input::Plain(x) => x.to_vec(),
            Input::Blend(wa, a, wb, b) => a.iter().zip(b).map(|(&a, &b)| wa * a + wb * b).collect(),
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod x86 {
    use super::Input;
    use crate::scale::{Accumulator, Words};
    use crate::simd::{self, Avx2Kernel};

    /// `Accumulator::fused_words_into` with one store kind, as an
    /// [`Avx2Kernel`] (inlined into the AVX2 entry point).
    struct FusedWords<'a, 'w, S> {
        acc: &'a mut Accumulator,
        w: Words<'w>,
        store: S,
    }

    impl<S: Fn(&mut [f32], &[f32; 64])> Avx2Kernel for FusedWords<'_, '_, S> {
        type Output = Option<bool>;
        #[inline(always)]
        fn run(self) -> Option<bool> {
            self.acc.fused_words_into(self.w, self.store)
        }
    }

    /// `Accumulator::fused_words_into` on the widest vectors the CPU has:
    /// the same code and bits, compiled for AVX2 when it is there. With
    /// `stream` (buffers much larger than the cache) and a 16-byte aligned
    /// `new`, the new values go out with non-temporal stores
    /// ([`simd::stream_word`]); the caller then runs [`fence`] once the
    /// step's last word is out.
    #[inline(always)]
    pub(crate) fn fused_words_into(
        acc: &mut Accumulator,
        w: Words<'_>,
        stream: bool,
    ) -> Option<bool> {
        if stream && (w.new.as_ptr() as usize).is_multiple_of(16) {
            simd::with_avx2(FusedWords {
                acc,
                w,
                store: simd::stream_word,
            })
        } else {
            simd::with_avx2(FusedWords {
                acc,
                w,
                store: simd::copy_word,
            })
        }
    }

    /// After a step that may have used non-temporal stores.
    pub(crate) fn fence(stream: bool) {
        if stream {
            simd::store_fence();
        }
    }

    /// The fused word loop over one chunk's whole words in AVX2 intrinsics
    /// ([`simd::fused_x8`]), if the CPU has AVX2 and the scale is a sum at
    /// a group boundary (`None`: not done).
    pub(crate) fn vector_words(
        acc: &mut Accumulator,
        x: Input<'_>,
        old: &[f32],
        new: &mut [f32],
        alpha: f32,
        signs: &mut [u8],
        stream: bool,
    ) -> Option<bool> {
        let x = match x {
            Input::Plain(x) => (x, None),
            Input::Blend(wa, a, wb, b) => (a, Some((wa, wb, b))),
        };
        simd::fused_x8(acc.sum_lanes()?, x, old, new, alpha, signs, stream)
    }

    /// The AVX2 fused word loop updating the buffer in place
    /// ([`full_step_chunk`](crate::full_step_chunk) for the parallel
    /// adapters), if the CPU has AVX2 (`None`: not done).
    pub(crate) fn vector_words_in_place(
        acc: &mut Accumulator,
        x: &[f32],
        buf: &mut [f32],
        alpha: f32,
        signs: &mut [u8],
    ) -> Option<bool> {
        simd::fused_x8_in_place(acc.sum_lanes()?, x, buf, alpha, signs)
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use x86::{fence, fused_words_into, vector_words, vector_words_in_place};

/// No non-temporal stores in the portable build.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) fn fence(_stream: bool) {}

/// The fused word loop (portable build).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(crate) fn fused_words_into(acc: &mut Accumulator, w: Words<'_>, _stream: bool) -> Option<bool> {
    acc.fused_words_into(w, |d: &mut [f32], w: &[f32; 64]| d.copy_from_slice(w))
}

/// No vector kernel in the portable build: always `None` (not done).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) fn vector_words(
    _: &mut Accumulator,
    _: Input<'_>,
    _: &[f32],
    _: &mut [f32],
    _: f32,
    _: &mut [u8],
    _: bool,
) -> Option<bool> {
    None
}

/// No vector kernel in the portable build: always `None` (not done).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) fn vector_words_in_place(
    _: &mut Accumulator,
    _: &[f32],
    _: &mut [f32],
    _: f32,
    _: &mut [u8],
) -> Option<bool> {
    None
}

#[cfg(all(test, target_arch = "x86_64", target_feature = "sse2"))]
mod tests {
    extern crate std;

    use super::{Input, vector_words, vector_words_in_place};
    use crate::scale::{Accumulator, ScaleKind, Words};
    use crate::simd::has_avx2;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -10.0f32..10.0,
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => Just(1e-40f32), // subnormal
            1 => Just(-3e38f32), // overflows when added to itself
            1 => any::<f32>(),   // NaN, ±∞, subnormals included
        ]
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    proptest! {
        /// The AVX2 fused kernel equals the portable word loop bit for bit:
        /// the new buffer, sign bytes, the 8 `f64` lanes (fed from a
        /// non-zero start), and the NaN/±∞ verdict; plain and blend input,
        /// both sum kinds, streaming and plain stores.
        #[test]
        fn avx2_fused_kernel_equals_the_portable_word_loop(
            words in 1usize..5,
            seed in prop::collection::vec(value(), 64 * 3 * 4 + 24),
            (alpha, wa, wb) in (0.0f32..4.0, -1.0f32..1.0, -1.0f32..1.0),
            mean_abs: bool,
            blend: bool,
            stream: bool,
        ) {
            prop_assume!(has_avx2());
            let n = 64 * words;
            let (a, rest) = seed.split_at(n);
            let (b, rest) = rest.split_at(n);
            let (old, head) = rest.split_at(n);
            let kind = if mean_abs { ScaleKind::MeanAbs } else { ScaleKind::Rms };
            let head: Vec<f32> = head.iter().map(|v| if v.is_finite() { *v } else { 1.0 }).collect();
            let (mut fast, mut slow) = (Accumulator::new(kind), Accumulator::new(kind));
            fast.feed(&head);
            slow.feed(&head);
            let x: Vec<f32> = if blend {
                a.iter().zip(b).map(|(&a, &b)| wa * a + wb * b).collect()
            } else {
                a.to_vec()
            };
            let input = if blend { Input::Blend(wa, a, wb, b) } else { Input::Plain(a) };
            let (mut new_s, mut sig_s) = (vec![0.0f32; n], vec![0u8; n / 8]);
            let clean_s = slow.fused_words_into(
                Words { x: &x, old, new: &mut new_s, alpha, signs: &mut sig_s },
                |d: &mut [f32], w: &[f32; 64]| d.copy_from_slice(w),
            );
            // Both kernels where the CPU has AVX-512F (else AVX2 twice).
            for avx2_only in [false, true] {
                crate::simd::tests::AVX2_ONLY.with(|c| c.set(avx2_only));
                let mut fast = fast;
                let (mut new_f, mut sig_f) = (vec![0.0f32; n], vec![0u8; n / 8]);
                let clean_f = vector_words(&mut fast, input, old, &mut new_f, alpha, &mut sig_f, stream);
                crate::simd::store_fence();
                prop_assert!(clean_f.is_some());
                prop_assert_eq!(clean_f, clean_s, "avx2_only {}", avx2_only);
                if clean_s == Some(true) {
                    prop_assert_eq!(bits(&new_f), bits(&new_s));
                    prop_assert_eq!(&sig_f, &sig_s);
                    prop_assert_eq!(fast.finish().to_bits(), slow.finish().to_bits());
                    prop_assert_eq!(fast.sum_sq().to_bits(), slow.sum_sq().to_bits());
                }
            }
        }

        /// The in-place AVX2 kernel (`full_step_chunk`) equals the portable
        /// in-place word loop: buffer, sign bytes and scale, bit for bit.
        #[test]
        fn avx2_in_place_kernel_equals_the_portable_word_loop(
            words in 1usize..5,
            seed in prop::collection::vec(value(), 64 * 2 * 4),
            alpha in 0.0f32..4.0,
            mean_abs: bool,
        ) {
            prop_assume!(has_avx2());
            let n = 64 * words;
            let (x, old) = (&seed[..n], &seed[n..2 * n]);
            let kind = if mean_abs { ScaleKind::MeanAbs } else { ScaleKind::Rms };
            let mut slow = Accumulator::new(kind);
            let mut buf_s = old.to_vec();
            let mut sig_s = vec![0u8; n / 8];
            prop_assert!(slow.fused_words(x, &mut buf_s, alpha, &mut sig_s));
            for avx2_only in [false, true] {
                crate::simd::tests::AVX2_ONLY.with(|c| c.set(avx2_only));
                let mut fast = Accumulator::new(kind);
                let mut buf_f = old.to_vec();
                let mut sig_f = vec![0u8; n / 8];
                prop_assert!(vector_words_in_place(&mut fast, x, &mut buf_f, alpha, &mut sig_f).is_some());
                prop_assert_eq!(bits(&buf_f), bits(&buf_s), "avx2_only {}", avx2_only);
                prop_assert_eq!(&sig_f, &sig_s);
                prop_assert_eq!(fast.finish().to_bits(), slow.finish().to_bits());
            }
        }

    }
}
