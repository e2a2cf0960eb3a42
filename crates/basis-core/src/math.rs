//! The transcendental functions of the step, the same bits on every target.
//!
//! `num_traits::Float::exp` (and `exp2`, `log2`, `powf`) calls the
//! platform's C library when any crate in the build turns on
//! `num-traits/std` (glibc on a Linux host), and the pure-Rust `libm` crate
//! otherwise (wasm32, thumbv7em, any `no_std` build). The two are accurate
//! to about an ulp but not equal bit for bit, so a BASIS run (scalars,
//! 1-byte code tables, row profiles) differed between an x86_64 host and
//! wasm32. Calling `libm` directly makes every target compute the same
//! value. `sqrt` is not here: IEEE 754 requires it correctly rounded, so
//! every implementation agrees.

/// `e^x` (libm's `expf`).
#[inline]
pub(crate) fn exp(x: f32) -> f32 {
    libm::expf(x)
}

/// `x^y` (libm's `powf`).
#[inline]
pub(crate) fn powf(x: f32, y: f32) -> f32 {
    libm::powf(x, y)
}

/// `2^x` in f64 (libm's `exp2`).
#[inline]
pub(crate) fn exp2_f64(x: f64) -> f64 {
    libm::exp2(x)
}

/// `log₂ x` in f64 (libm's `log2`).
#[inline]
pub(crate) fn log2_f64(x: f64) -> f64 {
    libm::log2(x)
}

/// `2^x` (libm's `exp2f`).
#[inline]
pub(crate) fn exp2(x: f32) -> f32 {
    libm::exp2f(x)
}

/// `log₂ x` (libm's `log2f`).
#[inline]
pub(crate) fn log2(x: f32) -> f32 {
    libm::log2f(x)
}

/// `x^n` by binary powering, in a fixed order of products: LLVM lowers
/// `f64::powi` to a runtime call whose order is the same today, but no
/// document promises it, and num-traits' `no_std` fallback is its own code.
/// Written out, the order is this one everywhere: the result multiplies
/// `x^(2^i)` for the set bits `i` of `n`, lowest first (compiler-builtins'
/// `__powidf2`, so a host build's values do not change).
pub(crate) fn powi(x: f64, n: i32) -> f64 {
    let mut base = x;
    let mut e = n.unsigned_abs();
    let mut acc = 1.0f64;
    loop {
        if e & 1 != 0 {
            acc *= base;
        }
        e >>= 1;
        if e == 0 {
            break;
        }
        base *= base;
    }
    if n < 0 { 1.0 / acc } else { acc }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Binary powering against repeated multiplication where both are
    /// exact (powers of two), and against the slow product elsewhere
    /// within rounding.
    #[test]
    fn powi_matches_repeated_multiplication() {
        for n in 0..60 {
            assert_eq!(powi(2.0, n), (0..n).fold(1.0, |a, _| a * 2.0));
            assert_eq!(powi(2.0, -n), 1.0 / (0..n).fold(1.0, |a, _| a * 2.0));
        }
        for n in 0..2000 {
            let slow = (0..n).fold(1.0f64, |a, _| a * 0.999);
            let fast = powi(0.999, n);
            assert!((fast - slow).abs() <= 1e-12 * slow.max(1e-300), "{n}");
        }
    }
}
