//! DeepFM (Guo et al. 2017) over gathered rows: the FM logit plus an MLP
//! over the concatenated per-field embeddings, both reading the same rows.
//!
//! ```text
//! e_f(x)   = Σ_{i ∈ field f} x_i v_i                 (weighted-sum pooling)
//! logit(x) = b + Σ_i w_i x_i + ½ Σ_j [(Σ_i v_ij x_i)² − Σ_i v_ij² x_i²]
//!              + MLP([e_0, …, e_{F−1}])
//! ```
//!
//! Backward with `δ = scale · (σ(logit) − y)` and `u = ∂MLP/∂input · δ`
//! (from [`Mlp::backward`]): `∂w_i = δ x_i`,
//! `∂v_ij = δ x_i (S_j − v_ij x_i) + x_i u_{f(i), j}`, `∂b = δ`. Row
//! gradients are summed per local row in example order, so they are
//! deterministic; the per-example passes and the per-row sums run on the
//! pool's threads ([`super::chunks`], [`super::by_row`]) with the same bits
//! at any thread count. See the [module interface](super) for how a trainer
//! supplies rows.

use super::batch::LocalBatch;
use super::by_row::ByRow;
use super::chunks;
use super::mlp::{Activations, Mlp};
use super::zeros;
use crate::rng::Rng;
use core::ops::Range;

/// The DeepFM shape: embedding size, fields, tower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeepFm {
    /// Embedding size `k` (a row is `k + 1` floats).
    pub(crate) k: usize,
    /// Number of fields `F` (the tower's input is `F · k`).
    pub(crate) fields: usize,
    /// The tower.
    pub(crate) mlp: Mlp,
}

/// Gradients of one batch (see [`DeepFm::forward_backward`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeepGrads {
    /// `ids.len() × (k + 1)`, in the batch's local row order.
    pub(crate) rows: Vec<f32>,
    /// Gradient of the dense parameters `[b, MLP…]`.
    pub(crate) dense: Vec<f32>,
    /// Summed (unscaled) log-loss of the batch.
    pub(crate) loss: f64,
}

/// Buffers reused across batches.
#[derive(Debug, Clone, Default)]
pub(crate) struct Workspace {
    capacity: usize,
    acts: Activations,
    /// `batch × k`: `S_j = Σ_i v_ij x_i` per example.
    s: Vec<f32>,
    /// FM part of each logit, then the full logits.
    logits: Vec<f32>,
    /// `δ` per example.
    delta: Vec<f32>,
    /// The batch's features by row, for the row gradients.
    by_row: ByRow,
}

impl DeepFm {
    /// DeepFM with embedding size `k` over `fields` fields and tower widths
    /// `layers` (the last must be 1).
    ///
    /// Fails with a message naming `--mlp` (see [`Mlp::new`]) or `--dim`.
    pub(crate) fn new(k: usize, fields: usize, layers: &[usize]) -> Result<Self, String> {
        let input = fields
            .checked_mul(k)
            .ok_or_else(|| format!("--dim {k}: tower input overflows"))?;
        Ok(Self {
            k,
            fields,
            mlp: Mlp::logit(input, layers, "--mlp")?,
        })
    }

    /// Parameters of each tower layer, in order (after the bias).
    pub(crate) fn tower_layers(&self) -> Vec<usize> {
        self.mlp.layer_lens()
    }

    /// Dense parameters: the bias and the tower.
    pub(crate) fn dense_len(&self) -> usize {
        1 + self.mlp.params()
    }

    /// Fresh dense parameters (`b = 0`, He-initialised tower), deterministic in `seed`.
    ///
    /// Fails when they cannot be allocated.
    pub(crate) fn init_dense(&self, seed: u64) -> Result<Vec<f32>, String> {
        let mut dense = zeros(self.dense_len(), "--mlp parameters")?;
        self.mlp
            .init(&mut dense[1..], &mut Rng::derive(seed, 0xD1F3));
        Ok(dense)
    }

    fn input(&self) -> usize {
        self.fields * self.k
    }

    /// Buffers for batches of up to `capacity` examples.
    ///
    /// Fails with a message naming `--mlp` when they cannot be allocated.
    pub(crate) fn workspace(&self, capacity: usize) -> Result<Workspace, String> {
        Ok(Workspace {
            capacity,
            acts: Activations::new(&self.mlp, capacity)?,
            s: zeros(capacity.saturating_mul(self.k), "--dim")?,
            logits: zeros(capacity, "--batch")?,
            delta: zeros(capacity, "--batch")?,
            by_row: ByRow::default(),
        })
    }

    /// Check that `batch` and `rows` fit this model and the workspace is
    /// large enough.
    fn check(&self, rows: &[f32], batch: &LocalBatch, ws: &mut Workspace) -> Result<(), String> {
        check_batch(self.k, self.fields, rows, batch)?;
        if batch.len() > ws.capacity {
            *ws = self.workspace(batch.len())?;
        }
        Ok(())
    }

    /// Logits of every example of `batch` (rows gathered as in the module
    /// interface); they stay in the workspace for the backward pass.
    ///
    /// Fails when `rows` or `batch` do not fit the model (see the interface).
    pub(crate) fn forward<'w>(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], String> {
        self.check(rows, batch, ws)?;
        let (k, d, n, width) = (self.k, self.k + 1, batch.len(), self.input());
        let x = ws.acts.input_mut(n, width);
        // The FM logit and the pooled tower input of each example, examples
        // split over the pool (each writes only its own outputs).
        let fm_part = |r: Range<usize>, s: &mut [f32], x: &mut [f32], z: &mut [f32]| {
            for (i, e) in r.enumerate() {
                let s = &mut s[i * k..(i + 1) * k];
                s.fill(0.0);
                let mut linear = dense[0];
                let mut sq = 0.0f32;
                let xe = &mut x[i * width..(i + 1) * width];
                xe.fill(0.0);
                for j in batch.offsets[e]..batch.offsets[e + 1] {
                    let (l, v, f) = (batch.local[j] as usize, batch.values[j], batch.fields[j]);
                    let row = &rows[l * d..(l + 1) * d];
                    linear += row[0] * v;
                    let pooled = &mut xe[usize::from(f) * k..(usize::from(f) + 1) * k];
                    for ((sj, p), &vj) in s.iter_mut().zip(pooled).zip(&row[1..]) {
                        let vx = vj * v;
                        *sj += vx;
                        *p += vx;
                        sq += vx * vx;
                    }
                }
                let ss: f32 = s.iter().map(|a| a * a).sum();
                z[i] = linear + 0.5 * (ss - sq);
            }
        };
        chunks::for_chunks3(
            n,
            chunks::EXAMPLES_PER_TASK,
            (&mut ws.s, k),
            (x, width),
            (&mut ws.logits, 1),
            fm_part,
        );
        let deep = self.mlp.forward(&dense[1..], n, &mut ws.acts);
        for (z, &o) in ws.logits[..n].iter_mut().zip(deep) {
            *z += o;
        }
        Ok(&ws.logits[..n])
    }

    /// Forward and backward: into `out`, the gradient of `scale · Σ_e
    /// log-loss_e` for every gathered row and for the dense parameters, and
    /// the summed log-loss.
    ///
    /// Fails when `rows` or `batch` do not fit the model (see the interface).
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
        out: &mut DeepGrads,
    ) -> Result<(), String> {
        self.forward_backward_hooked(dense, rows, batch, scale, ws, out, &mut |_, _| {})
    }

    /// [`Self::forward_backward`], handing each finished piece of the dense
    /// gradient to `on_dense` as soon as it is written (its range in
    /// `out.dense` and the values; the bias, then the tower's layers last
    /// first, all before the row gradients), so a trainer can start those
    /// exchanges while the rest of the backward pass runs. Nothing handed
    /// over is written again. Then, still before the row gradients, the
    /// whole dense range once more (ranges overlap: a group spanning several
    /// layers starts there).
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
        out: &mut DeepGrads,
        on_dense: &mut dyn FnMut(core::ops::Range<usize>, &[f32]),
    ) -> Result<(), String> {
        self.forward(dense, rows, batch, ws)?;
        let (k, d, n, width) = (self.k, self.k + 1, batch.len(), self.input());
        out.begin(
            rows.len(),
            dense.len(),
            &ws.logits[..n],
            batch,
            scale,
            &mut ws.delta,
        );
        out.dense[0] = ws.delta[..n].iter().sum();
        on_dense(0..1, &out.dense[..1]);
        // The tower's parameters follow the bias: its ranges shift by one.
        self.mlp.backward(
            &dense[1..],
            n,
            &ws.delta[..n],
            &mut out.dense[1..],
            &mut ws.acts,
            &mut |r, g| on_dense(r.start + 1..r.end + 1, g),
        );
        // The whole dense gradient is final here, before the row pass: a
        // group spanning layers (`--dense-groups tower`) can start now.
        on_dense(0..out.dense.len(), &out.dense);
        let u = ws.acts.d_input(n, width);
        // Row gradients: each row's terms in batch order, rows split over
        // the pool (`ByRow`: the serial loop's sums, the same bits).
        ws.by_row.build(batch);
        let (s, delta, by_row) = (&ws.s, &ws.delta, &ws.by_row);
        chunks::for_rows(&mut out.rows, d, |l, g| {
            let theta = &rows[l * d..(l + 1) * d];
            g.fill(0.0);
            for &(j, e) in by_row.of(l) {
                let (j, e) = (j as usize, e as usize);
                let (x, f) = (batch.values[j], usize::from(batch.fields[j]));
                let s = &s[e * k..(e + 1) * k];
                let uf = &u[e * width + f * k..e * width + (f + 1) * k];
                let dx = delta[e] * x;
                g[0] += dx;
                for q in 0..k {
                    g[q + 1] += dx * (s[q] - theta[q + 1] * x) + x * uf[q];
                }
            }
        });
        Ok(())
    }
}

/// Check that `batch` and `rows` fit a model of embedding size `k` over
/// `fields` fields: `k + 1` floats per gathered row, every local index has
/// a row, every field is `< fields`.
pub(super) fn check_batch(
    k: usize,
    fields: usize,
    rows: &[f32],
    batch: &LocalBatch,
) -> Result<(), String> {
    let d = k + 1;
    let n_rows = batch.ids.len();
    if rows.len() != n_rows * d {
        return Err(format!(
            "{} gathered floats for {n_rows} rows of {d}",
            rows.len()
        ));
    }
    if let Some(&l) = batch.local.iter().find(|&&l| l as usize >= n_rows) {
        return Err(format!("local row {l} of {n_rows}"));
    }
    if let Some(&f) = batch.fields.iter().find(|&&f| usize::from(f) >= fields) {
        return Err(format!("field {f} but the model has {fields}"));
    }
    Ok(())
}

impl DeepGrads {
    /// The start of either tower's backward pass: `rows` row-gradient
    /// floats and `dense` parameter gradients (neither zeroed: the row pass
    /// and the tower's backward write every one), the summed log-loss of
    /// `logits` against `batch`'s labels, and `delta[e] = scale · (σ(z_e) −
    /// y_e)`, the gradient of the scaled loss at each logit.
    pub(super) fn begin(
        &mut self,
        rows: usize,
        dense: usize,
        logits: &[f32],
        batch: &LocalBatch,
        scale: f32,
        delta: &mut [f32],
    ) {
        // Both are fully overwritten: zeroing them would be one more pass
        // per step (the dense gradient is as large as the tower, 10^6+
        // floats). `resize` keeps the capacity.
        self.rows.resize(rows, 0.0);
        if self.dense.len() != dense {
            self.dense.clear();
            self.dense.resize(dense, 0.0);
        }
        let mut loss = 0.0;
        for ((&z, &y), d) in logits.iter().zip(&batch.labels).zip(delta.iter_mut()) {
            let zf = f64::from(z);
            loss += zf.max(0.0) + (-zf.abs()).exp().ln_1p() - f64::from(y) * zf;
            *d = (1.0 / (1.0 + (-z).exp()) - y) * scale;
        }
        self.loss = loss;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slow, obviously correct DeepFM in f64: pairwise FM definition,
    /// explicit pooling, the MLP as nested loops. Returns `scale · Σ loss`.
    fn reference_loss(m: &DeepFm, dense: &[f64], rows: &[f64], b: &LocalBatch, scale: f64) -> f64 {
        let (k, d) = (m.k, m.k + 1);
        let widths = m.mlp.widths();
        let mut total = 0.0;
        for e in 0..b.len() {
            let feats: Vec<usize> = (b.offsets[e]..b.offsets[e + 1]).collect();
            let row = |j: usize| &rows[b.local[j] as usize * d..(b.local[j] as usize + 1) * d];
            let x = |j: usize| f64::from(b.values[j]);
            let mut z = dense[0];
            for (a, &i) in feats.iter().enumerate() {
                z += row(i)[0] * x(i);
                for &j in &feats[a + 1..] {
                    let dot: f64 = (1..d).map(|q| row(i)[q] * row(j)[q]).sum();
                    z += dot * x(i) * x(j);
                }
            }
            let mut h = vec![0.0; m.fields * k];
            for &i in &feats {
                let f = usize::from(b.fields[i]);
                for q in 0..k {
                    h[f * k + q] += x(i) * row(i)[q + 1];
                }
            }
            let mut at = 1;
            for (l, w) in widths.windows(2).enumerate() {
                let (inp, outp) = (w[0], w[1]);
                let mut next = vec![0.0; outp];
                for (o, nx) in next.iter_mut().enumerate() {
                    let mut acc = dense[at + inp * outp + o];
                    for (i, hi) in h.iter().enumerate() {
                        acc += hi * dense[at + i * outp + o];
                    }
                    *nx = if l + 2 < widths.len() {
                        acc.max(0.0)
                    } else {
                        acc
                    };
                }
                at += inp * outp + outp;
                h = next;
            }
            z += h[0];
            let y = f64::from(b.labels[e]);
            total += z.max(0.0) + (-z.abs()).exp().ln_1p() - y * z;
        }
        scale * total
    }

    /// 5 examples over 3 fields; field 1 has two weighted features in some.
    fn setup() -> (DeepFm, Vec<f32>, Vec<f32>, LocalBatch) {
        let m = DeepFm::new(3, 3, &[6, 4, 1]).unwrap();
        let mut rng = Rng::new(11);
        let dense: Vec<f32> = (0..m.dense_len())
            .map(|_| 0.5 * rng.normal() as f32)
            .collect();
        let mut b = LocalBatch::default();
        b.clear();
        let n_rows = 7;
        for id in 0..n_rows {
            b.push_row(100 + id);
        }
        let rows: Vec<f32> = (0..n_rows as usize * 4)
            .map(|_| 0.7 * rng.normal() as f32)
            .collect();
        let examples: [&[(u32, f32, u8)]; 5] = [
            &[(0, 1.0, 0), (1, 0.5, 1), (2, 1.5, 1), (3, 1.0, 2)],
            &[(4, 1.0, 0), (2, 1.0, 1)],
            &[(0, 2.0, 0), (5, 1.0, 1), (6, 0.3, 2), (3, -1.0, 2)],
            &[(6, 1.0, 2)],
            &[(4, 1.0, 0), (1, 1.0, 1), (5, 0.8, 1), (3, 1.0, 2)],
        ];
        for (e, feats) in examples.iter().enumerate() {
            for &(l, v, f) in feats.iter() {
                b.push_feature(l, v, f);
            }
            b.end_example((e % 2) as f32);
        }
        (m, dense, rows, b)
    }

    #[test]
    fn row_gradients_are_the_serial_loops_bits_at_1_2_and_3_threads() {
        let mut rng = Rng::new(23);
        // Enough examples and rows that both passes split into tasks.
        let (rows, b) = crate::deep::random_batch(&mut rng, (200, 300, 4, 4, 0));
        let m = DeepFm::new(4, 4, &[8, 1]).unwrap();
        let dense = m.init_dense(1).unwrap();
        let (k, d, n, width) = (m.k, m.k + 1, b.len(), m.input());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut first = None;
        for t in [1, 2, 3] {
            let (mut ws, mut g) = (Workspace::default(), DeepGrads::default());
            crate::deep::pool(t).install(|| {
                m.forward_backward(&dense, &rows, &b, 0.01, &mut ws, &mut g)
                    .unwrap();
            });
            // The loop over examples this pass replaced, on this run's
            // per-example values: each feature's terms added to its row as
            // met, in batch order.
            let u = ws.acts.d_input(n, width);
            let mut want = vec![0.0f32; rows.len()];
            for e in 0..n {
                let (delta, s) = (ws.delta[e], &ws.s[e * k..(e + 1) * k]);
                for j in b.offsets[e]..b.offsets[e + 1] {
                    let (l, x, f) = (b.local[j] as usize, b.values[j], usize::from(b.fields[j]));
                    let theta = &rows[l * d..(l + 1) * d];
                    let uf = &u[e * width + f * k..e * width + (f + 1) * k];
                    let g = &mut want[l * d..(l + 1) * d];
                    let dx = delta * x;
                    g[0] += dx;
                    for q in 0..k {
                        g[q + 1] += dx * (s[q] - theta[q + 1] * x) + x * uf[q];
                    }
                }
            }
            assert!(bits(&g.rows) == bits(&want), "{t} threads: rows differ");
            // The check can fail: most rows have several terms.
            assert!(want.iter().filter(|&&x| x != 0.0).count() > rows.len() / 2);
            let all = (bits(&g.rows), bits(&g.dense), g.loss.to_bits());
            match &first {
                None => first = Some(all),
                Some(one) => assert!(*one == all, "{t} threads differ from 1"),
            }
        }
    }

    #[test]
    fn forward_equals_the_f64_reference() {
        let (m, dense, rows, b) = setup();
        let mut ws = m.workspace(2).unwrap(); // smaller than the batch: grows
        let mut g = DeepGrads::default();
        m.forward_backward(&dense, &rows, &b, 1.0, &mut ws, &mut g)
            .unwrap();
        let to64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        let r = reference_loss(&m, &to64(&dense), &to64(&rows), &b, 1.0);
        assert!(
            (g.loss - r).abs() < 1e-4 * r.abs().max(1.0),
            "{} vs {r}",
            g.loss
        );
    }

    #[test]
    fn gradients_match_f64_finite_differences_for_every_parameter() {
        let (m, dense, rows, b) = setup();
        let scale = 1.0 / b.len() as f32;
        let mut ws = m.workspace(b.len()).unwrap();
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
        // The check can fail: a tower gradient of zero would not match.
        assert!(g.dense[1..].iter().any(|&x| x.abs() > 1e-3));
    }

    #[test]
    fn same_inputs_same_bits_and_bad_batches_are_errors() {
        let (m, dense, rows, b) = setup();
        let run = || {
            let mut ws = m.workspace(b.len()).unwrap();
            let mut g = DeepGrads::default();
            m.forward_backward(&dense, &rows, &b, 0.2, &mut ws, &mut g)
                .unwrap();
            (g.rows, g.dense)
        };
        assert_eq!(run(), run());
        let mut ws = m.workspace(1).unwrap();
        let mut g = DeepGrads::default();
        let short = &rows[..rows.len() - 4];
        assert!(
            m.forward_backward(&dense, short, &b, 1.0, &mut ws, &mut g)
                .is_err()
        );
        let mut bad = b.clone();
        bad.fields[0] = 3;
        let err = m
            .forward_backward(&dense, &rows, &bad, 1.0, &mut ws, &mut g)
            .unwrap_err();
        assert!(err.contains("field 3"), "{err}");
    }
}
