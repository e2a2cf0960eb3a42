//! A plain, single-threaded simulation of [`crate::compressed_allreduce`] on
//! `P` ranks: the obviously-correct slow path the tests (and the MPI backend's
//! tests) compare against bit for bit. No packing, no communicator: every
//! rank's buffer and error vectors are ordinary `Vec`s, and each algorithm step is
//! a loop written the way the math reads. Only the scale comes from
//! [`onebit_codec::scale::rms`], whose reduction order is part of the codec's
//! documented contract.

use alloc::vec;
use alloc::vec::Vec;

use crate::allreduce::padded_len;

/// Worker and server errors of all `P` simulated ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceState {
    /// `worker[r]`: rank `r`'s worker error `e_w` (`N` elements).
    pub worker: Vec<Vec<f32>>,
    /// `server[r]`: rank `r`'s server error `e_s` for chunk `r` (`N/P`).
    pub server: Vec<Vec<f32>>,
}

impl ReferenceState {
    /// Zero errors for buffers of `n` elements on `p ≥ 1` ranks.
    pub fn new(n: usize, p: usize) -> Self {
        let p = p.max(1);
        let big_n = padded_len(n, p);
        Self {
            worker: vec![vec![0.0; big_n]; p],
            server: vec![vec![0.0; big_n / p]; p],
        }
    }
}

/// `α·σ(v)` with σ(v) = +1 iff `!(v < 0)`.
fn signed(v: f32, alpha: f32) -> f32 {
    if v < 0.0 { -alpha } else { alpha }
}

/// Run one compressed all-reduce over `bufs` (one buffer per rank, all of
/// length `n`; `bufs.len()` = P = `state.worker.len()`). On return every
/// buffer holds the same decoded mean, exactly as every rank of
/// [`crate::compressed_allreduce`] would.
///
/// # Panics
/// If the buffers or the state do not have the shapes described above (a
/// test-support function: shapes are the caller's contract).
#[allow(
    clippy::needless_range_loop,
    reason = "index loops read like the paper's formulas; this is the slow reference"
)]
pub fn simulate_allreduce(bufs: &mut [Vec<f32>], state: &mut ReferenceState) {
    let p = bufs.len();
    assert!(p >= 1 && state.worker.len() == p && state.server.len() == p);
    let n = bufs[0].len();
    assert!(bufs.iter().all(|b| b.len() == n));
    if n == 0 {
        return;
    }
    let big_n = padded_len(n, p);
    let m = big_n / p;

    // Step 1: each worker forms p = x ⊕ 0 + e_w, its scale, its new error.
    let mut worker_p = vec![vec![0.0f32; big_n]; p];
    let mut alpha = vec![0.0f32; p];
    for r in 0..p {
        for i in 0..big_n {
            let x = if i < n { bufs[r][i] } else { 0.0 };
            worker_p[r][i] = x + state.worker[r][i];
        }
        alpha[r] = onebit_codec::scale::rms(&worker_p[r]);
        for i in 0..big_n {
            state.worker[r][i] = worker_p[r][i] - signed(worker_p[r][i], alpha[r]);
        }
    }

    // Step 3 (step 2 is the routing: server j reads chunk j of every worker):
    // server j sums (α_i/P)·σ_i in rank order, adds e_s, compresses.
    let pf = p as f32;
    let mut server_c = vec![vec![0.0f32; m]; p];
    let mut beta = vec![0.0f32; p];
    for j in 0..p {
        for k in 0..m {
            let mut c = 0.0f32;
            for i in 0..p {
                c += signed(worker_p[i][j * m + k], alpha[i] / pf);
            }
            server_c[j][k] = c + state.server[j][k];
        }
        beta[j] = onebit_codec::scale::rms(&server_c[j]);
        for k in 0..m {
            state.server[j][k] = server_c[j][k] - signed(server_c[j][k], beta[j]);
        }
    }

    // Step 4: everyone decodes β_j·σ(c_j), truncated to n.
    for b in bufs.iter_mut() {
        for (i, out) in b.iter_mut().enumerate() {
            let (j, k) = (i / m, i % m);
            *out = signed(server_c[j][k], beta[j]);
        }
    }
}

/// A plain simulation of [`crate::graded_allreduce`] on `P = bufs.len()`
/// ranks (same shapes as [`simulate_allreduce`]): every frame comes from
/// the codec's slow reference ([`onebit_codec::reference::graded_encode`])
/// and is decoded element by element from the values it stands for.
///
/// # Panics
/// On shapes other than described, or an input the codec refuses.
#[allow(
    clippy::needless_range_loop,
    reason = "index loops read like the formulas; this is the slow reference"
)]
pub fn simulate_graded(
    grade: onebit_codec::Grade,
    bufs: &mut [Vec<f32>],
    state: &mut ReferenceState,
) {
    use onebit_codec::reference::graded_encode;
    let p = bufs.len();
    assert!(p >= 1 && state.worker.len() == p && state.server.len() == p);
    let n = bufs[0].len();
    if n == 0 {
        return;
    }
    let big_n = padded_len(n, p);
    let m = big_n / p;
    // What a frame stands for, read element by element from its bytes:
    // 2-bit: bits 7−2j (negative) and 6−2j (large) of byte i/4 give
    // ±1/±3 times the trailing scale; bf16: the u16 at 2i, widened.
    let quantised = |x: &[f32]| -> (Vec<f32>, Vec<f32>) {
        let (frame, residual) = graded_encode(grade, x).expect("finite input");
        let q = (0..x.len())
            .map(|i| match grade {
                onebit_codec::Grade::TwoBit => {
                    let at = x.len().div_ceil(4);
                    let s = f32::from_le_bytes([
                        frame[at],
                        frame[at + 1],
                        frame[at + 2],
                        frame[at + 3],
                    ]);
                    let code = frame[i / 4] >> (6 - 2 * (i % 4));
                    let mag = if code & 1 == 1 { 3.0 } else { 1.0 };
                    let level = if code & 2 == 2 { -mag } else { mag };
                    level * s
                }
                _ => f32::from_bits(
                    u32::from(u16::from_le_bytes([frame[2 * i], frame[2 * i + 1]])) << 16,
                ),
            })
            .collect();
        (q, residual)
    };
    // Step 1: worker chunks.
    let mut sent = vec![vec![vec![0.0f32; m]; p]; p]; // sent[i][j]: rank i's chunk j
    for r in 0..p {
        let mut pv = vec![0.0f32; big_n];
        for i in 0..big_n {
            let x = if i < n { bufs[r][i] } else { 0.0 };
            pv[i] = x + state.worker[r][i];
        }
        for j in 0..p {
            let (q, e) = quantised(&pv[j * m..(j + 1) * m]);
            sent[r][j] = q;
            state.worker[r][j * m..(j + 1) * m].copy_from_slice(&e);
        }
    }
    // Step 3: server j.
    let pf = p as f32;
    let mut result = vec![vec![0.0f32; m]; p];
    for j in 0..p {
        let mut c = vec![0.0f32; m];
        for k in 0..m {
            let mut acc = 0.0f32;
            for i in 0..p {
                acc += sent[i][j][k];
            }
            c[k] = acc / pf + state.server[j][k];
        }
        let (q, e) = quantised(&c);
        result[j] = q;
        state.server[j] = e;
    }
    // Step 4.
    for b in bufs.iter_mut() {
        for (i, out) in b.iter_mut().enumerate() {
            *out = result[i / m][i % m];
        }
    }
}
