//! The factorization machine (Rendle 2010): linear terms plus pairwise
//! interactions of `k`-dimensional embeddings, over sparse weighted features.
//!
//! ```text
//! logit(x) = b + Σ_i w_i x_i + ½ Σ_f [ (Σ_i v_if x_i)² − Σ_i v_if² x_i² ]
//! ```
//!
//! Each table row holds `[w_i, v_i1 .. v_ik]` (row dim `d = k + 1`), so one
//! sparse optimizer owns both the linear weight and the embedding of a
//! feature — the case where per-dimension scales differ. The global bias `b`
//! is the dense parameter, trained with `onebit-adam`'s Adam
//! (`crate::run::single_dense_optimizer`; data-parallel ranks with
//! `--dense-opt`).
//!
//! Gradients of the mean log-loss over a batch: with `δ = σ(logit) − y`
//! divided by the batch size, `∂/∂w_i = δ x_i`, `∂/∂v_if = δ x_i (S_f − v_if x_i)`
//! where `S_f = Σ_j v_jf x_j`; `∂/∂b = δ`.
//!
//! With a tower (`--model deepfm|dlrm`, [`Fm::with_tower`]) the same table
//! feeds DeepFM or DLRM ([`crate::deep`]); prediction and gradients then go
//! through its gathered-rows interface, and the dense parameters are the
//! tower's.

use crate::data::Examples;
use crate::deep::{ByRow, DeepGrads, LocalBatch, Tower, Workspace, chunks, gather_rows};
use crate::rng::Rng;

/// The FM parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fm {
    /// Embedding size `k` (row dim is `k + 1`).
    pub(crate) k: usize,
    /// `rows × (k+1)` row-major table.
    pub(crate) table: Vec<f32>,
    /// Dense parameters: `[b]` (with a tower, `[b, MLP…]`).
    pub(crate) dense: Vec<f32>,
    /// The dense tower (DeepFM or DLRM), if any.
    pub(crate) tower: Option<Tower>,
}

impl Fm {
    /// A model of `rows` rows with `w = 0`, `v ~ N(0, init_std²)` (deterministic in `seed`).
    ///
    /// Fails with a one-line message naming `--dim` and the bytes needed when
    /// the table does not fit (it is `rows × (k + 1)` floats, sized by the
    /// user's `--dim`: an allocator abort is not an answer).
    pub(crate) fn new(rows: usize, k: usize, init_std: f32, seed: u64) -> Result<Self, String> {
        let d = k.saturating_add(1);
        let mut table = crate::validate::try_zeroed("--dim", k, "the model table", rows, d)?;
        // One stream, row after row; a value takes two draws (Box–Muller),
        // so row `r` starts `2·k·r` draws in: blocks of rows, each skipping
        // to its first row, fill the table on the pool's threads with the
        // values the serial loop draws.
        const ROWS_PER_TASK: usize = 4096;
        let rng = Rng::derive(seed, 0x1417);
        chunks::for_chunks(&mut table, ROWS_PER_TASK * d, |first, block| {
            let mut rng = rng.clone();
            rng.skip((first / d * k * 2) as u64);
            for row in block.chunks_exact_mut(d) {
                for v in &mut row[1..] {
                    *v = init_std * rng.normal() as f32;
                }
            }
        });
        Ok(Self {
            k,
            table,
            dense: vec![0.0],
            tower: None,
        })
    }

    /// This FM as the FM part of DeepFM with `tower` (dense parameters
    /// initialised from `seed`).
    ///
    /// Fails when the tower's parameters cannot be allocated.
    pub(crate) fn with_tower(mut self, tower: Tower, seed: u64) -> Result<Self, String> {
        self.dense = tower.init_dense(seed)?;
        self.tower = Some(tower);
        Ok(self)
    }

    /// Row dimension `k + 1`.
    pub(crate) fn dim(&self) -> usize {
        self.k + 1
    }

    /// The logit of one example; fills `s` (length `k`) with `S_f`.
    fn forward(&self, rows: &[u32], values: &[f32], s: &mut [f32]) -> f32 {
        let d = self.dim();
        s.fill(0.0);
        let mut linear = self.dense[0];
        let mut sq = 0.0f32;
        for (&r, &x) in rows.iter().zip(values) {
            let row = &self.table[r as usize * d..(r as usize + 1) * d];
            linear += row[0] * x;
            for (sf, &v) in s.iter_mut().zip(&row[1..]) {
                let vx = v * x;
                *sf += vx;
                sq += vx * vx;
            }
        }
        let ss: f32 = s.iter().map(|x| x * x).sum();
        linear + 0.5 * (ss - sq)
    }

    /// Logits of every example.
    pub(crate) fn predict(&self, ex: &Examples) -> Vec<f32> {
        if let Some(tower) = &self.tower {
            return self.predict_deep(tower, ex);
        }
        // Examples are independent: split over the pool's threads in
        // fixed chunks, each with its own `S` buffer.
        const CHUNK: usize = 1024;
        let mut out = vec![0.0f32; ex.len()];
        chunks::for_chunks(&mut out, CHUNK, |first, out| {
            let mut s = vec![0.0f32; self.k];
            for (i, z) in out.iter_mut().enumerate() {
                let (r, v) = ex.features(first + i);
                *z = self.forward(r, v, &mut s);
            }
        });
        out
    }
}

impl Fm {
    /// Tower logits, in chunks through the gathered-rows interface.
    fn predict_deep(&self, tower: &Tower, ex: &Examples) -> Vec<f32> {
        const CHUNK: usize = 512;
        let mut out = Vec::with_capacity(ex.len());
        let mut ws = Workspace::default();
        let (mut batch, mut rows) = (LocalBatch::default(), Vec::new());
        let mut slot = vec![u32::MAX; self.table.len() / self.dim()];
        let all: Vec<usize> = (0..ex.len()).collect();
        for chunk in all.chunks(CHUNK) {
            batch.fill_from(ex, chunk, &mut slot);
            gather_rows(&self.table, self.dim(), &batch.ids, &mut rows);
            match tower.forward(&self.dense, &rows, &batch, &mut ws) {
                Ok(z) => out.extend_from_slice(z),
                // Unreachable for a data set's own examples (fields and rows
                // come from it); NaN logits make the metrics show it.
                Err(_) => out.extend(core::iter::repeat_n(f32::NAN, chunk.len())),
            }
        }
        out
    }
}

/// Batch buffers of a [`Grads`] (the local batch and its features by row
/// serve the FM too).
#[derive(Debug, Default)]
struct DeepBuffers {
    batch: LocalBatch,
    by_row: ByRow,
    rows: Vec<f32>,
    ws: Workspace,
    out: DeepGrads,
}

/// Per-batch gradient buffer: distinct rows in first-seen order, their
/// summed gradients, the dense gradient and the batch loss.
#[derive(Debug)]
pub(crate) struct Grads {
    /// Distinct row ids of the batch.
    pub(crate) ids: Vec<u64>,
    /// `ids.len() × dim` gradients.
    pub(crate) rows: Vec<f32>,
    /// Gradient of the dense parameters.
    pub(crate) dense: Vec<f32>,
    /// Summed log-loss of the batch.
    pub(crate) loss: f64,
    slot: Vec<u32>,
    /// The FM's `S_f` of each example of the batch (`batch × k`).
    s: Vec<f32>,
    /// The FM's `(δ, loss term)` of each example of the batch.
    per_example: Vec<(f32, f64)>,
    deep: DeepBuffers,
}

impl Grads {
    /// A buffer for a model of `rows` rows.
    pub(crate) fn new(fm: &Fm, rows: usize) -> Self {
        Self {
            ids: Vec::new(),
            rows: Vec::new(),
            dense: vec![0.0; fm.dense.len()],
            loss: 0.0,
            slot: vec![u32::MAX; rows],
            s: Vec::new(),
            per_example: Vec::new(),
            deep: DeepBuffers::default(),
        }
    }

    /// Make room for a model of `rows` rows (a buffer reused over batches
    /// whose row count varies, as a shard's gathered rows do).
    pub(crate) fn reserve_rows(&mut self, rows: usize) {
        if self.slot.len() < rows {
            self.slot.resize(rows, u32::MAX);
        }
    }

    /// Compute the gradients of the mean log-loss over `batch` (example indices),
    /// plus `l2·θ` for every row touched.
    ///
    /// Fails only with a tower whose buffers cannot be allocated.
    pub(crate) fn compute(
        &mut self,
        fm: &Fm,
        ex: &Examples,
        batch: &[usize],
        l2: f32,
    ) -> Result<(), String> {
        self.compute_scaled(fm, ex, batch, l2, batch.len())
    }

    /// Like [`Grads::compute`] for a share of a larger batch of `batch_len`
    /// examples: the gradient of this share's part of the batch-mean loss
    /// (shares then sum to the batch gradient).
    ///
    /// Fails only with a tower whose buffers cannot be allocated.
    pub(crate) fn compute_scaled(
        &mut self,
        fm: &Fm,
        ex: &Examples,
        batch: &[usize],
        l2: f32,
        batch_len: usize,
    ) -> Result<(), String> {
        self.compute_scaled_hooked(fm, ex, batch, (l2, batch_len), &mut |_, _| {})
    }

    /// [`Grads::compute_scaled`], handing a tower's finished dense gradient
    /// ranges to `on_dense` during its backward pass
    /// (`Tower::forward_backward_hooked`; `--dense-overlap`); an FM hands
    /// nothing over.
    ///
    /// Fails as [`Grads::compute_scaled`].
    pub(crate) fn compute_scaled_hooked(
        &mut self,
        fm: &Fm,
        ex: &Examples,
        batch: &[usize],
        (l2, batch_len): (f32, usize),
        on_dense: &mut dyn FnMut(core::ops::Range<usize>, &[f32]),
    ) -> Result<(), String> {
        if let Some(tower) = &fm.tower {
            self.compute_deep(fm, tower, ex, (batch, batch_len), on_dense)?;
            self.add_l2(fm, l2);
            return Ok(());
        }
        let (k, d, n) = (fm.k, fm.dim(), batch.len());
        let scale = 1.0 / batch_len.max(1) as f32;
        self.s.resize(n * k.max(1), 0.0);
        self.per_example.resize(n, (0.0, 0.0));
        let b = &mut self.deep;
        let (s, per_example) = (&mut self.s, &mut self.per_example);
        let (lb, by_row, slot) = (&mut b.batch, &mut b.by_row, &mut self.slot);
        // The row numbering is serial (first-seen order, as the serial loop
        // numbered rows) and the forward pass reads the examples directly,
        // so the two run side by side.
        crate::deep::par::join(
            || {
                lb.fill_from(ex, batch, slot);
                by_row.build(lb);
            },
            || {
                // Per example, split over the pool: `S` (kept for the
                // rows), and `δ` and the loss term, summed below in example
                // order.
                chunks::for_chunks2(
                    n,
                    chunks::EXAMPLES_PER_TASK,
                    (s, k.max(1)),
                    (per_example, 1),
                    |r, s, out| {
                        for (i, e) in r.enumerate() {
                            let (rows, values) = ex.features(batch[e]);
                            let z = fm.forward(rows, values, &mut s[i * k..(i + 1) * k]);
                            let y = ex.labels[batch[e]];
                            let p = 1.0 / (1.0 + (-z).exp());
                            let zf = f64::from(z);
                            let loss = zf.max(0.0) + (-zf.abs()).exp().ln_1p() - f64::from(y) * zf;
                            out[i] = ((p - y) * scale, loss);
                        }
                    },
                );
            },
        );
        let table = &fm.table;
        self.dense.fill(0.0);
        self.loss = 0.0;
        for &(delta, loss) in &self.per_example[..n] {
            self.loss += loss;
            self.dense[0] += delta;
        }
        // Row gradients (`+ l2·θ` last, as `add_l2` adds it): each row's
        // terms in batch order, rows split over the pool (`ByRow`: the
        // serial loop's sums, the same bits).
        self.ids.clone_from(&b.batch.ids);
        self.rows.resize(self.ids.len() * d, 0.0);
        let (s, per_example, lb, by_row) = (&self.s, &self.per_example, &b.batch, &b.by_row);
        chunks::for_rows(&mut self.rows, d, |l, g| {
            let id = lb.ids[l] as usize;
            let theta = &table[id * d..(id + 1) * d];
            g.fill(0.0);
            for &(j, e) in by_row.of(l) {
                let (j, e) = (j as usize, e as usize);
                let x = lb.values[j];
                let s = &s[e * k..(e + 1) * k];
                let dx = per_example[e].0 * x;
                g[0] += dx;
                for f in 0..k {
                    g[f + 1] += dx * (s[f] - theta[f + 1] * x);
                }
            }
            if l2 > 0.0 {
                for (g, &t) in g.iter_mut().zip(theta) {
                    *g += l2 * t;
                }
            }
        });
        Ok(())
    }

    /// Tower gradients through the gathered-rows interface.
    fn compute_deep(
        &mut self,
        fm: &Fm,
        tower: &Tower,
        ex: &Examples,
        (batch, batch_len): (&[usize], usize),
        on_dense: &mut dyn FnMut(core::ops::Range<usize>, &[f32]),
    ) -> Result<(), String> {
        let b = &mut self.deep;
        b.batch.fill_from(ex, batch, &mut self.slot);
        gather_rows(&fm.table, fm.dim(), &b.batch.ids, &mut b.rows);
        let scale = 1.0 / batch_len.max(1) as f32;
        tower.forward_backward_hooked(
            &fm.dense, &b.rows, &b.batch, scale, &mut b.ws, &mut b.out, on_dense,
        )?;
        // `fill_from` left `slot` all unset; the FM path's reset over
        // `ids` is then a no-op.
        self.ids.clone_from(&b.batch.ids);
        core::mem::swap(&mut self.rows, &mut b.out.rows);
        core::mem::swap(&mut self.dense, &mut b.out.dense);
        self.loss = b.out.loss;
        Ok(())
    }

    /// `+ l2·θ` on every row of the batch (rows split over the pool).
    fn add_l2(&mut self, fm: &Fm, l2: f32) {
        let d = fm.dim();
        if l2 > 0.0 {
            let (ids, table) = (&self.ids, &fm.table);
            chunks::for_rows(&mut self.rows, d, |slot, g| {
                let id = ids[slot] as usize;
                for (g, &t) in g.iter_mut().zip(&table[id * d..(id + 1) * d]) {
                    *g += l2 * t;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn examples() -> Examples {
        Examples {
            offsets: vec![0, 3, 5],
            rows: vec![0, 1, 2, 1, 3],
            values: vec![1.0, 0.5, 2.0, 1.0, 1.0],
            fields: vec![0, 1, 2, 1, 2],
            labels: vec![1.0, 0.0],
            dense: vec![],
            dense_width: 0,
        }
    }

    /// The O(n²) definition of the FM logit.
    fn naive_logit(fm: &Fm, rows: &[u32], values: &[f32]) -> f32 {
        let d = fm.dim();
        let mut z = fm.dense[0];
        for (a, (&r, &x)) in rows.iter().zip(values).enumerate() {
            z += fm.table[r as usize * d] * x;
            for (&r2, &x2) in rows[a + 1..].iter().zip(&values[a + 1..]) {
                let dot: f32 = (1..d)
                    .map(|f| fm.table[r as usize * d + f] * fm.table[r2 as usize * d + f])
                    .sum();
                z += dot * x * x2;
            }
        }
        z
    }

    fn loss(fm: &Fm, ex: &Examples) -> f64 {
        crate::metrics::log_loss(&fm.predict(ex), &ex.labels)
    }

    #[test]
    fn forward_matches_pairwise_definition() {
        let mut fm = Fm::new(4, 3, 0.5, 1).unwrap();
        fm.table[0] = 0.3;
        fm.dense[0] = -0.2;
        let ex = examples();
        let z = fm.predict(&ex);
        for (e, &ze) in z.iter().enumerate() {
            let (r, v) = ex.features(e);
            assert!((ze - naive_logit(&fm, r, v)).abs() < 1e-5);
        }
    }

    /// The serial FM gradient loop this crate had before the batch was
    /// split over threads: rows numbered on first sight, every feature's
    /// terms added to its row in batch order, then `+ l2·θ`.
    fn serial_grads(
        fm: &Fm,
        ex: &Examples,
        batch: &[usize],
        l2: f32,
    ) -> (Vec<u64>, Vec<f32>, f32, f64) {
        let (d, k) = (fm.dim(), fm.k);
        let mut slot = vec![u32::MAX; fm.table.len() / d];
        let (mut ids, mut rows, mut bias, mut loss) = (Vec::new(), Vec::new(), 0.0f32, 0.0f64);
        let mut s = vec![0.0f32; k];
        let scale = 1.0 / batch.len() as f32;
        for &e in batch {
            let (rs, values) = ex.features(e);
            let z = fm.forward(rs, values, &mut s);
            let y = ex.labels[e];
            let p = 1.0 / (1.0 + (-z).exp());
            let zf = f64::from(z);
            loss += zf.max(0.0) + (-zf.abs()).exp().ln_1p() - f64::from(y) * zf;
            let delta = (p - y) * scale;
            bias += delta;
            for (&r, &x) in rs.iter().zip(values) {
                if slot[r as usize] == u32::MAX {
                    slot[r as usize] = ids.len() as u32;
                    ids.push(u64::from(r));
                    rows.resize(rows.len() + d, 0.0);
                }
                let at = slot[r as usize] as usize * d;
                let theta = &fm.table[r as usize * d..(r as usize + 1) * d];
                let dx = delta * x;
                rows[at] += dx;
                for f in 0..k {
                    rows[at + f + 1] += dx * (s[f] - theta[f + 1] * x);
                }
            }
        }
        for (i, &id) in ids.iter().enumerate() {
            for j in 0..d {
                rows[i * d + j] += l2 * fm.table[id as usize * d + j];
            }
        }
        (ids, rows, bias, loss)
    }

    /// `n` examples of 1–8 features over 500 rows (repeats within an
    /// example included), labels at random.
    fn random_examples(rng: &mut Rng, n: usize) -> Examples {
        let mut ex = Examples {
            offsets: vec![0],
            rows: vec![],
            values: vec![],
            fields: vec![],
            labels: vec![],
            dense: vec![],
            dense_width: 0,
        };
        for _ in 0..n {
            for f in 0..1 + rng.below(8) {
                ex.rows.push(rng.below(500) as u32);
                ex.values.push(rng.uniform() as f32 + 0.25);
                ex.fields.push(f as u8);
            }
            ex.offsets.push(ex.rows.len());
            ex.labels.push(rng.below(2) as f32);
        }
        ex
    }

    #[test]
    fn fm_gradients_are_the_serial_loops_bits_at_1_2_and_3_threads() {
        let mut rng = Rng::new(9);
        // Over 1024 examples: prediction splits too.
        let ex = random_examples(&mut rng, 2100);
        let mut fm = Fm::new(500, 8, 0.3, 4).unwrap();
        for r in fm.table.chunks_exact_mut(9) {
            r[0] = 0.2 * rng.normal() as f32;
        }
        fm.dense[0] = 0.1;
        let mut batch: Vec<usize> = (0..ex.len()).collect();
        rng.shuffle(&mut batch);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for l2 in [0.0, 0.01] {
            let (ids, rows, bias, loss) = serial_grads(&fm, &ex, &batch, l2);
            // The check can fail: many rows, most with several terms.
            assert!(ids.len() > 200 && rows.iter().filter(|&&g| g != 0.0).count() > ids.len());
            for t in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap();
                let mut g = Grads::new(&fm, 500);
                pool.install(|| {
                    // Twice: buffers reused from a smaller batch first.
                    g.compute(&fm, &ex, &batch[..40], l2).unwrap();
                    g.compute(&fm, &ex, &batch, l2).unwrap();
                });
                assert_eq!(g.ids, ids, "{t} threads");
                assert!(
                    bits(&g.rows) == bits(&rows),
                    "{t} threads, l2 {l2}: rows differ"
                );
                assert_eq!(g.dense[0].to_bits(), bias.to_bits(), "{t} threads");
                assert_eq!(g.loss.to_bits(), loss.to_bits(), "{t} threads");
                let z = pool.install(|| fm.predict(&ex));
                let mut s = vec![0.0; fm.k];
                for (e, &ze) in z.iter().enumerate() {
                    let (r, v) = ex.features(e);
                    assert_eq!(ze.to_bits(), fm.forward(r, v, &mut s).to_bits());
                }
            }
        }
    }

    #[test]
    fn the_table_is_the_serial_draws_at_1_2_and_3_threads() {
        let (rows, k, std, seed) = (9000, 5, 0.1, 7);
        let mut want = vec![0.0f32; rows * (k + 1)];
        let mut rng = Rng::derive(seed, 0x1417);
        for row in want.chunks_exact_mut(k + 1) {
            for v in &mut row[1..] {
                *v = std * rng.normal() as f32;
            }
        }
        for t in [1, 2, 3] {
            let fm = crate::deep::pool(t).install(|| Fm::new(rows, k, std, seed).unwrap());
            assert!(fm.table == want, "{t} threads");
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let fm = Fm::new(4, 3, 0.5, 2).unwrap();
        let ex = examples();
        let mut g = Grads::new(&fm, 4);
        g.compute(&fm, &ex, &[0, 1], 0.0).unwrap();
        let d = fm.dim();
        for (slot, &id) in g.ids.iter().enumerate() {
            for j in 0..d {
                let h = 1e-3;
                let mut plus = fm.clone();
                plus.table[id as usize * d + j] += h;
                let mut minus = fm.clone();
                minus.table[id as usize * d + j] -= h;
                let numeric = (loss(&plus, &ex) - loss(&minus, &ex)) / (2.0 * f64::from(h));
                let analytic = f64::from(g.rows[slot * d + j]);
                assert!(
                    (numeric - analytic).abs() < 1e-3,
                    "row {id} dim {j}: {numeric} vs {analytic}"
                );
            }
        }
        assert!((g.loss / 2.0 - loss(&fm, &ex)).abs() < 1e-6);
    }
}
