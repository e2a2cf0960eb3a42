//! Dense Adam(W) (`onebit_adam::AdamW`) on rayon, bit-identical to serial.
//!
//! The step is element-wise (no sums), so splitting the tensors into blocks
//! and running each block through the serial kernel gives the same bits for
//! any split and any thread count; the block only has to be large enough to
//! amortize a task and small enough to balance two threads. Each block runs
//! on [`Kernel::detect`] (AVX-512 where the CPU has it); the block is a
//! multiple of every vector width, so only the last block has a tail.

use onebit_adam::{AdamW, Kernel};
use rayon::prelude::*;

use crate::Error;

/// Elements per parallel block (1 MiB of each tensor): a few hundred
/// microseconds of work, so task overhead is noise and two threads balance.
const BLOCK: usize = 1 << 18;

/// [`AdamW::step_scaled`] (without the zero mask) on the current rayon pool:
/// `m`, `v` from `g / div`, then `x`; the same bits as the serial call on
/// any number of threads.
///
/// # Errors
/// [`Error::LengthMismatch`] when `m`, `v` or `g` differ in length from
/// `x`; nothing changes then.
pub fn par_adam_step(
    h: &AdamW,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    div: f32,
) -> Result<(), Error> {
    for len in [m.len(), v.len(), g.len()] {
        check_len(x.len(), len)?;
    }
    let kernel = Kernel::detect();
    x.par_chunks_mut(BLOCK)
        .zip(m.par_chunks_mut(BLOCK))
        .zip(v.par_chunks_mut(BLOCK))
        .zip(g.par_chunks(BLOCK))
        .for_each(|(((x, m), v), g)| {
            // Same-length blocks by construction: the call cannot fail.
            let _ = h.step_scaled(kernel, x, m, v, g, div, None);
        });
    Ok(())
}

/// [`AdamW::update`] (`v` frozen, `m` given) on the current rayon pool.
///
/// # Errors
/// [`Error::LengthMismatch`] when `m` or `v` differ in length from `x`.
pub fn par_adam_update(h: &AdamW, x: &mut [f32], m: &[f32], v: &[f32]) -> Result<(), Error> {
    check_len(x.len(), m.len())?;
    check_len(x.len(), v.len())?;
    let kernel = Kernel::detect();
    x.par_chunks_mut(BLOCK)
        .zip(m.par_chunks(BLOCK))
        .zip(v.par_chunks(BLOCK))
        .for_each(|((x, m), v)| {
            // Same-length blocks by construction: the call cannot fail.
            let _ = h.update(kernel, x, m, v);
        });
    Ok(())
}

fn check_len(expected: usize, got: usize) -> Result<(), Error> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch { expected, got })
    }
}
