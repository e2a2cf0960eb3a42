//! [`RowInit`]: the value a new row starts as, a function of its id alone,
//! so a row's first value does not depend on which rank owns it, when it
//! was first seen or how many ranks there are.

use alloc::sync::Arc;
use core::fmt;

/// How a row `id` is initialised: `f(id, row)` fills `row` (`dim` values,
/// zeroed before the call). Must depend on `id` (and captured constants such
/// as a seed) only: owners call it when an id first reaches them, and the
/// evaluation path calls it for ids no rank holds.
#[derive(Clone)]
pub struct RowInit(Arc<InitFn>);

/// The shared initialiser function.
type InitFn = dyn Fn(u64, &mut [f32]) + Send + Sync;

impl fmt::Debug for RowInit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowInit(..)")
    }
}

impl RowInit {
    /// Rows start at zero.
    pub fn zeros() -> Self {
        Self(Arc::new(|_, _| {}))
    }

    /// Rows start as `f(id, row)` (`row` arrives zeroed).
    pub fn from_fn(f: impl Fn(u64, &mut [f32]) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Rows start uniform in `[-scale, scale)`, drawn from `(seed, id)` by
    /// a SplitMix64 stream: reproducible on every rank and platform.
    pub fn uniform(seed: u64, scale: f32) -> Self {
        Self::from_fn(move |id, row| {
            let mut s = seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for x in row {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                // 24 random bits → [0, 1), exactly representable.
                let u = (z >> 40) as f32 / (1u64 << 24) as f32;
                *x = scale * (2.0 * u - 1.0);
            }
        })
    }

    /// Fill `row` with row `id`'s initial value.
    pub fn fill(&self, id: u64, row: &mut [f32]) {
        row.fill(0.0);
        (self.0)(id, row);
    }
}
