//! A batch's per-example and per-row passes split over the threads of the
//! current rayon pool (`--threads`) in fixed-size chunks.
//!
//! Every pass here writes only its own items' outputs (an example's logit,
//! pooled input and interaction terms; a row's gradient) from inputs that
//! no other item writes, with the serial arithmetic, so the result is the
//! same bits whatever the split and the thread count. Sums over *several*
//! items are never split: the caller adds them in order after the pass (a
//! batch loss), or gives each sum one owner ([`super::by_row::ByRow`]: a
//! row's gradient terms in batch order).
//!
//! With one thread, or one chunk's worth of items, a pass runs on the
//! calling thread without touching the pool.

use core::ops::Range;
use rayon::prelude::*;

/// Examples one task takes: a few dozen features × `k` each, some
/// microseconds a piece, so a task is worth more than waking a thread
/// (see `par::MIN_PARALLEL_MACS`'s reasoning) and a 256-example batch still
/// splits into enough tasks to balance two or three threads.
pub(crate) const EXAMPLES_PER_TASK: usize = 16;

/// Rows one task takes (a row's few terms of `k + 1` floats each).
pub(crate) const ROWS_PER_TASK: usize = 128;

/// Whether a pass over `items` in tasks of `per_task` goes to the pool.
fn split(items: usize, per_task: usize) -> bool {
    items > per_task && super::par::threads() > 1
}

/// `f(items, a, b)` over consecutive chunks of `per_task` of `n` items,
/// where `a` holds `wa` values per item and `b` holds `wb` (both at least
/// `n` items long; widths at least 1); `items` is the chunk's item range
/// and `a`, `b` its part of each buffer.
///
/// # Panics
/// When a width or `per_task` is 0 or a buffer is shorter than `n` items.
pub(crate) fn for_chunks2<A: Send, B: Send>(
    n: usize,
    per_task: usize,
    (a, wa): (&mut [A], usize),
    (b, wb): (&mut [B], usize),
    f: impl Fn(Range<usize>, &mut [A], &mut [B]) + Sync,
) {
    assert!(wa > 0 && wb > 0 && per_task > 0, "zero width");
    let (a, b) = (&mut a[..n * wa], &mut b[..n * wb]);
    if split(n, per_task) {
        a.par_chunks_mut(per_task * wa)
            .zip(b.par_chunks_mut(per_task * wb))
            .enumerate()
            .for_each(|(c, (a, b))| f(c * per_task..((c + 1) * per_task).min(n), a, b));
    } else {
        // One chunk holding everything: the serial loop.
        f(0..n, a, b);
    }
}

/// [`for_chunks2`] over three buffers.
///
/// # Panics
/// When a width or `per_task` is 0 or a buffer is shorter than `n` items.
pub(crate) fn for_chunks3<A: Send, B: Send, C: Send>(
    n: usize,
    per_task: usize,
    (a, wa): (&mut [A], usize),
    (b, wb): (&mut [B], usize),
    (c, wc): (&mut [C], usize),
    f: impl Fn(Range<usize>, &mut [A], &mut [B], &mut [C]) + Sync,
) {
    assert!(wa > 0 && wb > 0 && wc > 0 && per_task > 0, "zero width");
    let (a, b, c) = (&mut a[..n * wa], &mut b[..n * wb], &mut c[..n * wc]);
    if split(n, per_task) {
        a.par_chunks_mut(per_task * wa)
            .zip(b.par_chunks_mut(per_task * wb))
            .zip(c.par_chunks_mut(per_task * wc))
            .enumerate()
            .for_each(|(i, ((a, b), c))| {
                f(i * per_task..((i + 1) * per_task).min(n), a, b, c);
            });
    } else {
        f(0..n, a, b, c);
    }
}

/// `f(first, chunk)` over consecutive chunks of `per_task` items of `data`
/// (`first`: the index of the chunk's first item).
///
/// # Panics
/// When `per_task` is 0.
pub(crate) fn for_chunks<T: Send>(
    data: &mut [T],
    per_task: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(per_task > 0, "zero chunk");
    if split(data.len(), per_task) {
        data.par_chunks_mut(per_task)
            .enumerate()
            .for_each(|(c, chunk)| f(c * per_task, chunk));
    } else {
        f(0, data);
    }
}

/// `f(l, g)` for every row `l` of `grads` (`d` floats each, `g` row `l`'s),
/// rows in tasks of [`ROWS_PER_TASK`].
pub(crate) fn for_rows(grads: &mut [f32], d: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if d == 0 {
        return;
    }
    for_chunks(grads, ROWS_PER_TASK * d, |first, chunk| {
        for (i, g) in chunk.chunks_exact_mut(d).enumerate() {
            f(first / d + i, g);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item visited once, with its own slices, at 1–3 threads.
    #[test]
    fn chunks_cover_every_item_once_with_its_own_slices() {
        for t in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            pool.install(|| {
                for n in [0, 1, 16, 17, 100] {
                    let (mut a, mut b, mut c) =
                        (vec![0u32; n * 2], vec![0u32; n], vec![0u32; n * 3]);
                    for_chunks3(
                        n,
                        16,
                        (&mut a, 2),
                        (&mut b, 1),
                        (&mut c, 3),
                        |r, a, b, c| {
                            assert_eq!(
                                (a.len(), b.len(), c.len()),
                                (r.len() * 2, r.len(), r.len() * 3)
                            );
                            for (i, e) in r.enumerate() {
                                a[2 * i] += e as u32 + 1;
                                b[i] += e as u32 + 1;
                                c[3 * i + 2] += e as u32 + 1;
                            }
                        },
                    );
                    let want: Vec<u32> = (1..=n as u32).collect();
                    assert_eq!(b, want, "{t} threads, n {n}");
                    assert!(a.chunks(2).map(|p| p[0]).eq(want.iter().copied()));
                    assert!(c.chunks(3).map(|p| p[2]).eq(want.iter().copied()));
                    for_chunks2(n, 16, (&mut a, 2), (&mut b, 1), |r, a, b| {
                        for (i, e) in r.enumerate() {
                            a[2 * i + 1] = e as u32;
                            b[i] *= 2;
                        }
                    });
                    assert!(a.chunks(2).map(|p| p[1]).eq(0..n as u32));
                    assert!(b.iter().zip(&want).all(|(x, y)| *x == 2 * y));
                    let mut g = vec![0.0f32; n * 3];
                    for_rows(&mut g, 3, |l, g| g.fill(l as f32));
                    assert!(g.iter().enumerate().all(|(i, &x)| x == (i / 3) as f32));
                    let mut v = vec![0usize; n * 50];
                    for_chunks(&mut v, 7, |first, c| {
                        for (i, x) in c.iter_mut().enumerate() {
                            *x += first + i + 1;
                        }
                    });
                    assert!(v.iter().enumerate().all(|(i, &x)| x == i + 1));
                }
            });
        }
    }
}
