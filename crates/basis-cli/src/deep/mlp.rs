//! A ReLU multi-layer perceptron over a flat parameter slice, forward and
//! backward over a whole batch (row-major `batch × width` activations).
//!
//! Layer `l` maps `widths[l]` to `widths[l+1]`: `h_{l+1} = relu(h_l W_l + b_l)`,
//! no ReLU after the last layer (a logit, or DLRM's bottom-tower vector). Parameters
//! lie back to back as `W_0 (in × out, row-major), b_0, W_1, b_1, …`, so one
//! dense optimizer (Adam, 1-bit Adam) owns the whole tower as one vector.
//!
//! Backward, with `g = ∂L/∂z_l` (`batch × out`): `∂W_l = h_lᵀ g`,
//! `∂b_l = Σ_rows g`, `∂h_l = g W_lᵀ`, and `∂z_{l−1} = ∂h_l ⊙ [h_l > 0]`.
//! Every product goes through [`super::gemm::matmul`], split over the
//! threads of the current pool by blocks of rows ([`super::par`]): the
//! forward pass as `batch` row blocks, each filled with the bias, multiplied
//! and rectified while in cache; the backward pass runs `∂W` (blocks of
//! `W`'s rows) beside `∂h` (blocks of the batch, masked by the ReLU in the
//! same block). The bias sums run in row order. Results are the same bits
//! at any thread count.

use super::gemm::{Mat, matmul};
use super::par;
use crate::rng::Rng;

/// Largest tower this CLI builds: 2^28 parameters, 1 GiB of f32 (about 4 GiB
/// with Adam's two moments and the gradient). Beyond it an `--mlp` is a
/// typo, not a model, and is refused before any allocation.
const MAX_PARAMS: usize = 1 << 28;

/// The shape of a tower: `widths[0]` inputs, then each layer's outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mlp {
    widths: Vec<usize>,
    /// Where each layer's parameters are (derived from `widths`; kept so a
    /// step allocates nothing).
    layers: Vec<Layer>,
}

/// Where layer `l`'s parameters are in the flat slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layer {
    w: usize,
    b: usize,
    inp: usize,
    out: usize,
}

impl Mlp {
    /// A tower from `input` features through `layers` widths; `option`
    /// names the flag the widths came from, for errors.
    ///
    /// Fails with a message naming `option` on an empty list, a zero width,
    /// or more than [`MAX_PARAMS`] parameters.
    pub(crate) fn new(input: usize, layers: &[usize], option: &str) -> Result<Self, String> {
        if layers.is_empty() || layers.contains(&0) {
            return Err(format!(
                "{option}: widths must be a non-empty list of positive integers"
            ));
        }
        let mut widths = vec![input];
        widths.extend_from_slice(layers);
        let mut total = 0usize;
        for w in widths.windows(2) {
            total = w[0]
                .checked_mul(w[1])
                .and_then(|x| x.checked_add(w[1]))
                .and_then(|x| x.checked_add(total))
                .filter(|&t| t <= MAX_PARAMS)
                .ok_or_else(|| {
                    format!(
                        "{option} {layers:?}: over {MAX_PARAMS} dense parameters with {input} inputs"
                    )
                })?;
        }
        let layers = layers_of(&widths);
        Ok(Self { widths, layers })
    }

    /// A tower that ends in the logit: as [`Mlp::new`], and the last width
    /// must be 1.
    ///
    /// Fails with a message naming `option`.
    pub(crate) fn logit(input: usize, layers: &[usize], option: &str) -> Result<Self, String> {
        if layers.last() != Some(&1) {
            return Err(format!(
                "{option}: the last width must be 1 (the logit), got {layers:?}"
            ));
        }
        Self::new(input, layers, option)
    }

    /// Inputs, then every layer's width.
    #[cfg(test)]
    pub(crate) fn widths(&self) -> &[usize] {
        &self.widths
    }

    /// Number of parameters.
    pub(crate) fn params(&self) -> usize {
        self.layers.last().map_or(0, |l| l.b + l.out)
    }

    /// Parameters of each layer (weights, then biases), in order.
    pub(crate) fn layer_lens(&self) -> Vec<usize> {
        self.layers.iter().map(|l| l.inp * l.out + l.out).collect()
    }

    /// Outputs per row.
    pub(crate) fn outputs(&self) -> usize {
        self.widths.last().copied().unwrap_or(0)
    }

    /// Widest layer (activation buffers are `batch × widest`).
    fn widest(&self) -> usize {
        self.widths.iter().copied().max().unwrap_or(0)
    }

    /// He initialisation (`W ~ N(0, 2/fan_in)`, the last layer `N(0, 1/fan_in)`),
    /// biases 0; deterministic in `rng`.
    pub(crate) fn init(&self, params: &mut [f32], rng: &mut Rng) {
        let layers = &self.layers;
        for (i, l) in layers.iter().enumerate() {
            let gain = if i + 1 == layers.len() { 1.0 } else { 2.0 };
            let std = (gain / l.inp as f64).sqrt();
            for w in &mut params[l.w..l.b] {
                *w = (std * rng.normal()) as f32;
            }
            params[l.b..l.b + l.out].fill(0.0);
        }
    }

    /// Forward pass over `batch` rows; the input must already be in
    /// `acts.input_mut(batch)`. Returns the `batch × outputs` outputs.
    pub(crate) fn forward<'a>(
        &self,
        params: &[f32],
        batch: usize,
        acts: &'a mut Activations,
    ) -> &'a [f32] {
        let layers = &self.layers;
        for (i, l) in layers.iter().enumerate() {
            let (inp, rest) = acts.h.split_at_mut(i + 1);
            let x = Mat::new(&inp[i][..batch * l.inp], batch, l.inp);
            let z = &mut rest[0][..batch * l.out];
            let w = Mat::new(&params[l.w..l.b], l.inp, l.out);
            let bias = &params[l.b..l.b + l.out];
            let relu = i + 1 < layers.len();
            par::row_blocks_mut(z, batch, l.out, batch * l.inp * l.out, |r, zb| {
                for row in zb.chunks_exact_mut(l.out) {
                    row.copy_from_slice(bias);
                }
                matmul(x.row_range(r), w, zb, true);
                if relu {
                    for v in zb.iter_mut() {
                        *v = v.max(0.0);
                    }
                }
            });
        }
        &acts.h[layers.len()][..batch * self.outputs()]
    }

    /// Backward pass after [`Mlp::forward`] on the same `acts`: from
    /// `d_out` (`batch × outputs` values, `∂L/∂output`) write the parameter
    /// gradient into `grad` (same layout as the parameters; every element is
    /// written, so it need not be zeroed) and `∂L/∂input`
    /// (`batch × widths[0]`) into `acts.d_input(batch)`.
    ///
    /// Each layer's finished gradient goes to `on_layer` as soon as it is
    /// written, last layer first: its range in
    /// `grad` (weights then bias, contiguous) and the values. Why: so a
    /// data-parallel trainer can start that layer's exchange while the
    /// layers below are still being differentiated (`--dense-overlap`).
    /// The pass never writes a range again after handing it over, so what
    /// `on_layer` saw is the final gradient.
    pub(crate) fn backward(
        &self,
        params: &[f32],
        batch: usize,
        d_out: &[f32],
        grad: &mut [f32],
        acts: &mut Activations,
        on_layer: &mut dyn FnMut(core::ops::Range<usize>, &[f32]),
    ) {
        let layers = &self.layers;
        let n_out = batch * self.outputs();
        acts.g[..n_out].copy_from_slice(&d_out[..n_out]);
        for (i, l) in layers.iter().enumerate().rev() {
            let g = &acts.g[..batch * l.out];
            let x = &acts.h[i][..batch * l.inp];
            let (gw, gb) = grad[l.w..l.b + l.out].split_at_mut(l.inp * l.out);
            let dx = &mut acts.dh[..batch * l.inp];
            let (xm, gm) = (Mat::new(x, batch, l.inp), Mat::new(g, batch, l.out));
            let w = Mat::new(&params[l.w..l.b], l.inp, l.out);
            let macs = batch * l.inp * l.out;
            par::join(
                || {
                    // `∂W` overwritten (β = 0: the product does not read `gw`),
                    // by blocks of W's rows (the inputs).
                    par::row_blocks_mut(gw, l.inp, l.out, macs, |r, gwb| {
                        matmul(xm.t().row_range(r), gm, gwb, false);
                    });
                },
                || {
                    gb.fill(0.0);
                    for row in g.chunks_exact(l.out) {
                        for (b, &v) in gb.iter_mut().zip(row) {
                            *b += v;
                        }
                    }
                    par::row_blocks_mut(dx, batch, l.inp, macs, |r, dxb| {
                        let xb = &x[r.start * l.inp..r.end * l.inp];
                        matmul(gm.row_range(r), w.t(), dxb, false);
                        if i > 0 {
                            // ReLU: h_i = relu(z), so ∂z = ∂h where h_i > 0.
                            // A select, not a branch, so the loop vectorises.
                            for (d, &h) in dxb.iter_mut().zip(xb) {
                                *d = if h <= 0.0 { 0.0 } else { *d };
                            }
                        }
                    });
                },
            );
            core::mem::swap(&mut acts.g, &mut acts.dh);
            on_layer(l.w..l.b + l.out, &grad[l.w..l.b + l.out]);
        }
    }
}

/// Where each layer of a tower of `widths` has its parameters.
fn layers_of(widths: &[usize]) -> Vec<Layer> {
    let mut at = 0;
    widths
        .windows(2)
        .map(|w| {
            let l = Layer {
                w: at,
                b: at + w[0] * w[1],
                inp: w[0],
                out: w[1],
            };
            at = l.b + l.out;
            l
        })
        .collect()
}

/// Activation and gradient buffers of a tower for batches up to `capacity`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Activations {
    /// `h[0]` = input, `h[l+1]` = output of layer `l`.
    h: Vec<Vec<f32>>,
    /// Gradient of the current layer's output, and of its input.
    g: Vec<f32>,
    dh: Vec<f32>,
}

impl Activations {
    /// Buffers for `mlp` and batches of up to `capacity` rows.
    ///
    /// Fails with a message naming `--mlp` when they cannot be allocated.
    pub(crate) fn new(mlp: &Mlp, capacity: usize) -> Result<Self, String> {
        let alloc = |n: usize| crate::deep::zeros(n, "tower activations");
        let h = mlp
            .widths
            .iter()
            .map(|&w| alloc(capacity.saturating_mul(w)))
            .collect::<Result<_, _>>()?;
        let wide = capacity.saturating_mul(mlp.widest());
        Ok(Self {
            h,
            g: alloc(wide)?,
            dh: alloc(wide)?,
        })
    }

    /// The input rows (`batch × widths[0]`) to fill before [`Mlp::forward`].
    pub(crate) fn input_mut(&mut self, batch: usize, width: usize) -> &mut [f32] {
        &mut self.h[0][..batch * width]
    }

    /// `∂L/∂input` after [`Mlp::backward`] (`batch × widths[0]`).
    pub(crate) fn d_input(&self, batch: usize, width: usize) -> &[f32] {
        // `backward` swaps after each layer, so the last ∂h is in `g`.
        &self.g[..batch * width]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_bad_widths() {
        let m = Mlp::new(10, &[4, 3, 1], "--mlp").unwrap();
        assert_eq!(m.params(), 10 * 4 + 4 + 4 * 3 + 3 + 3 + 1);
        assert_eq!(m.outputs(), 1);
        assert!(Mlp::new(10, &[], "--mlp").unwrap_err().contains("--mlp"));
        assert!(Mlp::new(10, &[4, 0, 1], "--x").unwrap_err().contains("--x"));
        let huge = Mlp::new(416, &[usize::MAX / 2, 1], "--mlp").unwrap_err();
        assert!(
            huge.contains("--mlp") && huge.contains("dense parameters"),
            "{huge}"
        );
        assert!(Mlp::new(1 << 20, &[1 << 12, 1], "--mlp").is_err());
        assert!(Mlp::new(1 << 10, &[1 << 17, 1], "--mlp").is_ok());
        assert!(Mlp::new(1 << 10, &[1 << 18, 1], "--mlp").is_err());
    }
}
