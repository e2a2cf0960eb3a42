//! DLRM (Naumov et al. 2019) over gathered rows: a bottom MLP turns the
//! dense features into one `k`-vector, every pair of that vector and the
//! per-field embeddings interacts by a dot product, and a top MLP maps the
//! bottom vector and the dots to the logit.
//!
//! ```text
//! t_0 = Bottom(dense),  t_{1+f} = e_f = Σ_{i ∈ field f} x_i v_i
//! logit = Top([t_0, ⟨t_a, t_b⟩ for a < b])          ((F+1)F/2 dots)
//! ```
//!
//! Backward with `δ = scale · (σ(logit) − y)`: the top MLP gives `∂t_0`
//! directly and `g_ab` for every dot; `∂t_a += g_ab t_b`, `∂t_b += g_ab t_a`;
//! the bottom MLP takes `∂t_0`; `∂v_i = x_i ∂t_{1+f(i)}`. The rows' linear
//! weight `w` is not used (its gradient is 0). Dense parameters are
//! `[Bottom…, Top…]`. The per-example passes and the per-row sums run on
//! the pool's threads ([`super::chunks`], [`super::by_row`]) with the same
//! bits at any thread count. Same interface as DeepFM (see the [module](super)).

use super::batch::LocalBatch;
use super::by_row::ByRow;
use super::chunks;
use super::mlp::{Activations, Mlp};
use super::zeros;
use crate::rng::Rng;
use core::ops::Range;

/// The DLRM shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dlrm {
    /// Embedding size `k`.
    pub(crate) k: usize,
    /// Categorical fields `F`.
    pub(crate) fields: usize,
    /// Dense features per example.
    pub(crate) dense_width: usize,
    bottom: Mlp,
    top: Mlp,
}

/// Buffers reused across batches.
#[derive(Debug, Clone, Default)]
pub(crate) struct Workspace {
    capacity: usize,
    bottom: Activations,
    top: Activations,
    /// `batch × (F+1) × k`: the interacting vectors, then their gradients.
    t: Vec<f32>,
    dt: Vec<f32>,
    /// `batch × k`: `∂t_0` for the bottom tower.
    dz: Vec<f32>,
    logits: Vec<f32>,
    delta: Vec<f32>,
    /// The batch's features by row, for the row gradients.
    by_row: ByRow,
}

impl Dlrm {
    /// DLRM with embedding size `k` over `fields` fields and `dense_width`
    /// dense features; `bottom` hidden widths (`k` is appended) and `top`
    /// widths (the last must be 1).
    ///
    /// Fails with a message naming the option at fault.
    pub(crate) fn new(
        k: usize,
        fields: usize,
        dense_width: usize,
        bottom: &[usize],
        top: &[usize],
    ) -> Result<Self, String> {
        if dense_width == 0 {
            return Err(
                "--model dlrm needs dense features (only --format criteo-synth has them)".into(),
            );
        }
        let mut b = bottom.to_vec();
        b.push(k);
        let vectors = fields + 1;
        let top_in = vectors
            .checked_mul(fields)
            .map(|p| p / 2 + k)
            .ok_or("--dim: DLRM interaction overflows")?;
        let top = Mlp::logit(top_in, top, "--mlp")?;
        Ok(Self {
            k,
            fields,
            dense_width,
            bottom: Mlp::new(dense_width, &b, "--bottom-mlp")?,
            top,
        })
    }

    /// Parameters of each layer of the bottom, then of the top tower.
    pub(crate) fn tower_layers(&self) -> (Vec<usize>, Vec<usize>) {
        (self.bottom.layer_lens(), self.top.layer_lens())
    }

    /// Dense parameters: bottom, then top.
    pub(crate) fn dense_len(&self) -> usize {
        self.bottom.params() + self.top.params()
    }

    /// Fresh dense parameters (He-initialised), deterministic in `seed`.
    ///
    /// Fails when they cannot be allocated.
    pub(crate) fn init_dense(&self, seed: u64) -> Result<Vec<f32>, String> {
        let mut dense = zeros(self.dense_len(), "--mlp parameters")?;
        let (b, t) = dense.split_at_mut(self.bottom.params());
        let mut rng = Rng::derive(seed, 0xD12A);
        self.bottom.init(b, &mut rng);
        self.top.init(t, &mut rng);
        Ok(dense)
    }

    fn workspace(&self, capacity: usize) -> Result<Workspace, String> {
        let tk = capacity.saturating_mul((self.fields + 1) * self.k);
        Ok(Workspace {
            capacity,
            bottom: Activations::new(&self.bottom, capacity)?,
            top: Activations::new(&self.top, capacity)?,
            t: zeros(tk, "--dim")?,
            dt: zeros(tk, "--dim")?,
            dz: zeros(capacity.saturating_mul(self.k), "--dim")?,
            logits: zeros(capacity, "--batch")?,
            delta: zeros(capacity, "--batch")?,
            by_row: ByRow::default(),
        })
    }

    fn check(&self, rows: &[f32], batch: &LocalBatch, ws: &mut Workspace) -> Result<(), String> {
        super::deepfm::check_batch(self.k, self.fields, rows, batch)?;
        if batch.dense.len() != batch.len() * self.dense_width {
            return Err(format!(
                "DLRM: {} dense values for {} examples of {}",
                batch.dense.len(),
                batch.len(),
                self.dense_width
            ));
        }
        if batch.len() > ws.capacity {
            *ws = self.workspace(batch.len())?;
        }
        Ok(())
    }

    /// Logits of every example of `batch`; they stay in the workspace.
    ///
    /// Fails when `rows` or `batch` do not fit the model.
    pub(crate) fn forward<'w>(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], String> {
        self.check(rows, batch, ws)?;
        let (k, d, n, v) = (self.k, self.k + 1, batch.len(), self.fields + 1);
        let (pb, pt) = dense.split_at(self.bottom.params());
        ws.bottom
            .input_mut(n, self.dense_width)
            .copy_from_slice(&batch.dense);
        let z0 = self.bottom.forward(pb, n, &mut ws.bottom);
        let top_in = k + v * (v - 1) / 2;
        let inp = ws.top.input_mut(n, top_in);
        // Each example's vectors and their dots, examples split over the
        // pool (each writes only its own).
        let interact = |r: Range<usize>, t: &mut [f32], inp: &mut [f32]| {
            for (i, e) in r.enumerate() {
                let te = &mut t[i * v * k..(i + 1) * v * k];
                te.fill(0.0);
                te[..k].copy_from_slice(&z0[e * k..(e + 1) * k]);
                for j in batch.offsets[e]..batch.offsets[e + 1] {
                    let (l, x, f) = (
                        batch.local[j] as usize,
                        batch.values[j],
                        usize::from(batch.fields[j]),
                    );
                    let row = &rows[l * d + 1..(l + 1) * d];
                    for (p, &vq) in te[(1 + f) * k..(2 + f) * k].iter_mut().zip(row) {
                        *p += x * vq;
                    }
                }
                let te = &*te;
                let ie = &mut inp[i * top_in..(i + 1) * top_in];
                ie[..k].copy_from_slice(&te[..k]);
                let mut p = k;
                for a in 0..v {
                    for b in a + 1..v {
                        let (ta, tb) = (&te[a * k..(a + 1) * k], &te[b * k..(b + 1) * k]);
                        ie[p] = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
                        p += 1;
                    }
                }
            }
        };
        chunks::for_chunks2(
            n,
            chunks::EXAMPLES_PER_TASK,
            (&mut ws.t, v * k),
            (inp, top_in),
            interact,
        );
        let out = self.top.forward(pt, n, &mut ws.top);
        ws.logits[..n].copy_from_slice(out);
        Ok(&ws.logits[..n])
    }

    /// Forward and backward, as [`super::DeepFm::forward_backward`].
    ///
    /// Fails when `rows` or `batch` do not fit the model.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "the trainers run the hooked pass")
    )]
    pub(crate) fn forward_backward(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        scale: f32,
        ws: &mut Workspace,
        out: &mut super::DeepGrads,
    ) -> Result<(), String> {
        self.forward_backward_hooked(dense, rows, batch, scale, ws, out, &mut |_, _| {})
    }

    /// [`Self::forward_backward`] with the dense gradient handed over piece
    /// by piece, as [`super::DeepFm::forward_backward_hooked`]: the top
    /// tower's layers last first, then the whole top tower (before the
    /// interaction and row gradients), then the bottom tower's layers, last
    /// first.
    ///
    /// Fails as [`Self::forward_backward`], before any hand-over.
    #[allow(
        clippy::too_many_arguments,
        reason = "forward_backward's, plus the hook"
    )]
    pub(crate) fn forward_backward_hooked(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        scale: f32,
        ws: &mut Workspace,
        out: &mut super::DeepGrads,
        on_dense: &mut dyn FnMut(Range<usize>, &[f32]),
    ) -> Result<(), String> {
        self.forward(dense, rows, batch, ws)?;
        let (k, d, n, v) = (self.k, self.k + 1, batch.len(), self.fields + 1);
        let top_in = k + v * (v - 1) / 2;
        out.begin(
            rows.len(),
            dense.len(),
            &ws.logits[..n],
            batch,
            scale,
            &mut ws.delta,
        );
        let (pb, pt) = dense.split_at(self.bottom.params());
        let (gb, gt) = out.dense.split_at_mut(self.bottom.params());
        let top_at = self.bottom.params();
        // The top tower's parameters follow the bottom's.
        self.top
            .backward(pt, n, &ws.delta[..n], gt, &mut ws.top, &mut |r, g| {
                on_dense(r.start + top_at..r.end + top_at, g);
            });
        // The whole top tower once more (a group spanning its layers).
        on_dense(top_at..top_at + gt.len(), gt);
        let dinp = ws.top.d_input(n, top_in);
        // Each example's vector gradients, examples split over the pool.
        let t = &ws.t;
        let spread = |r: Range<usize>, dt: &mut [f32], dz: &mut [f32]| {
            for (i, e) in r.enumerate() {
                let te = &t[e * v * k..(e + 1) * v * k];
                let de = &mut dt[i * v * k..(i + 1) * v * k];
                let ge = &dinp[e * top_in..(e + 1) * top_in];
                de.fill(0.0);
                de[..k].copy_from_slice(&ge[..k]);
                let mut p = k;
                for a in 0..v {
                    for b in a + 1..v {
                        let g = ge[p];
                        p += 1;
                        for q in 0..k {
                            de[a * k + q] += g * te[b * k + q];
                            de[b * k + q] += g * te[a * k + q];
                        }
                    }
                }
                dz[i * k..(i + 1) * k].copy_from_slice(&de[..k]);
            }
        };
        chunks::for_chunks2(
            n,
            chunks::EXAMPLES_PER_TASK,
            (&mut ws.dt, v * k),
            (&mut ws.dz, k),
            spread,
        );
        // Row gradients: each row's terms in batch order, rows split over
        // the pool (`ByRow`: the serial loop's sums, the same bits).
        ws.by_row.build(batch);
        let (dt, by_row) = (&ws.dt, &ws.by_row);
        chunks::for_rows(&mut out.rows, d, |l, g| {
            g.fill(0.0);
            for &(j, e) in by_row.of(l) {
                let (j, e) = (j as usize, e as usize);
                let (x, f) = (batch.values[j], usize::from(batch.fields[j]));
                let de = &dt[e * v * k..(e + 1) * v * k];
                for (gq, &dq) in g[1..].iter_mut().zip(&de[(1 + f) * k..(2 + f) * k]) {
                    *gq += x * dq;
                }
            }
        });
        self.bottom
            .backward(pb, n, &ws.dz[..n * k], gb, &mut ws.bottom, on_dense);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deep::DeepGrads;

    /// A plain f64 MLP (ReLU between layers) over `params` from `at`.
    fn mlp64(
        widths: &[usize],
        params: &[f64],
        mut at: usize,
        mut h: Vec<f64>,
    ) -> (Vec<f64>, usize) {
        for (l, w) in widths.windows(2).enumerate() {
            let mut next = vec![0.0; w[1]];
            for (o, nx) in next.iter_mut().enumerate() {
                let mut acc = params[at + w[0] * w[1] + o];
                for (i, hi) in h.iter().enumerate() {
                    acc += hi * params[at + i * w[1] + o];
                }
                *nx = if l + 2 < widths.len() {
                    acc.max(0.0)
                } else {
                    acc
                };
            }
            at += w[0] * w[1] + w[1];
            h = next;
        }
        (h, at)
    }

    /// The slow f64 DLRM: `scale · Σ log-loss`.
    fn reference_loss(m: &Dlrm, dense: &[f64], rows: &[f64], b: &LocalBatch, scale: f64) -> f64 {
        let (k, d, v) = (m.k, m.k + 1, m.fields + 1);
        let mut total = 0.0;
        for e in 0..b.len() {
            let x: Vec<f64> = b.dense[e * m.dense_width..(e + 1) * m.dense_width]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let (z0, at) = mlp64(m.bottom.widths(), dense, 0, x);
            let mut t = vec![vec![0.0; k]; v];
            t[0] = z0;
            for j in b.offsets[e]..b.offsets[e + 1] {
                let l = b.local[j] as usize;
                for q in 0..k {
                    t[1 + usize::from(b.fields[j])][q] +=
                        f64::from(b.values[j]) * rows[l * d + 1 + q];
                }
            }
            let mut inp = t[0].clone();
            for a in 0..v {
                for c in a + 1..v {
                    inp.push((0..k).map(|q| t[a][q] * t[c][q]).sum());
                }
            }
            let (z, _) = mlp64(m.top.widths(), dense, at, inp);
            let (z, y) = (z[0], f64::from(b.labels[e]));
            total += z.max(0.0) + (-z.abs()).exp().ln_1p() - y * z;
        }
        scale * total
    }

    #[test]
    fn row_gradients_are_the_serial_loops_bits_at_1_2_and_3_threads() {
        let mut rng = Rng::new(29);
        let (rows, b) = crate::deep::random_batch(&mut rng, (200, 300, 4, 4, 3));
        let m = Dlrm::new(4, 4, 3, &[5], &[6, 1]).unwrap();
        let dense = m.init_dense(1).unwrap();
        let (k, d, n, v) = (m.k, m.k + 1, b.len(), m.fields + 1);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut first = None;
        for t in [1, 2, 3] {
            let (mut ws, mut g) = (Workspace::default(), DeepGrads::default());
            crate::deep::pool(t).install(|| {
                m.forward_backward(&dense, &rows, &b, 0.01, &mut ws, &mut g)
                    .unwrap();
            });
            // The loop over examples this pass replaced, on this run's
            // vector gradients: terms added to rows as met, in batch order.
            let mut want = vec![0.0f32; rows.len()];
            for e in 0..n {
                let de = &ws.dt[e * v * k..(e + 1) * v * k];
                for j in b.offsets[e]..b.offsets[e + 1] {
                    let (l, x, f) = (b.local[j] as usize, b.values[j], usize::from(b.fields[j]));
                    let g = &mut want[l * d + 1..(l + 1) * d];
                    for (gq, &dq) in g.iter_mut().zip(&de[(1 + f) * k..(2 + f) * k]) {
                        *gq += x * dq;
                    }
                }
            }
            assert!(bits(&g.rows) == bits(&want), "{t} threads: rows differ");
            assert!(want.iter().filter(|&&x| x != 0.0).count() > rows.len() / 2);
            let all = (bits(&g.rows), bits(&g.dense), g.loss.to_bits());
            match &first {
                None => first = Some(all),
                Some(one) => assert!(*one == all, "{t} threads differ from 1"),
            }
        }
    }

    #[test]
    fn gradients_match_f64_finite_differences_for_every_parameter() {
        let m = Dlrm::new(3, 3, 2, &[5], &[6, 1]).unwrap();
        let mut rng = Rng::new(21);
        let dense: Vec<f32> = (0..m.dense_len())
            .map(|_| 0.5 * rng.normal() as f32)
            .collect();
        let mut b = LocalBatch::default();
        b.clear();
        b.dense_width = 2;
        for id in 0..6 {
            b.push_row(id);
        }
        let rows: Vec<f32> = (0..6 * 4).map(|_| 0.7 * rng.normal() as f32).collect();
        let examples: [&[(u32, f32, u8)]; 4] = [
            &[(0, 1.0, 0), (1, 0.5, 1), (2, 1.5, 1), (3, 1.0, 2)],
            &[(4, 1.0, 0), (2, 1.0, 1)],
            &[(0, 2.0, 0), (5, 1.0, 1), (3, -1.0, 2)],
            &[(5, 1.0, 2)],
        ];
        for (e, feats) in examples.iter().enumerate() {
            for &(l, v, f) in feats.iter() {
                b.push_feature(l, v, f);
            }
            b.end_example_with_dense((e % 2) as f32, &[rng.normal() as f32, 0.5]);
        }
        let scale = 0.25;
        let mut ws = Workspace::default();
        let mut g = DeepGrads::default();
        // A used buffer: the backward pass must overwrite every gradient
        // (the dense part is not zeroed between batches).
        m.forward_backward(&dense, &rows, &b, 7.0, &mut ws, &mut g)
            .unwrap();
        m.forward_backward(&dense, &rows, &b, scale, &mut ws, &mut g)
            .unwrap();
        crate::deep::assert_matches_finite_differences(
            |d, r, s| reference_loss(&m, d, r, &b, s),
            &dense,
            &rows,
            scale,
            &g,
        );
        assert!(g.dense[..m.bottom.params()].iter().any(|&x| x.abs() > 1e-3));
        assert!(
            Dlrm::new(3, 3, 0, &[5], &[1])
                .unwrap_err()
                .contains("dense features")
        );
    }
}
