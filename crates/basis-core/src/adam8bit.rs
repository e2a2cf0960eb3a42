//! [`Adam8bit`]: Adam whose moments are stored as 8-bit codes with one f32
//! absmax per block: bitsandbytes' block-wise scheme (Dettmers et al. 2022,
//! "8-bit Optimizers via Block-wise Quantization"), laid out per row.
//!
//! **Codes.** `m` uses the signed dynamic tree map, `v` the unsigned one
//! ([`dynamic_map`]): bitsandbytes' `create_dynamic_map(signed, 7, 8)`.
//! For `i = 0..7` the map holds `k_i` values `10^(i−6)·μ` where the `μ` are
//! the midpoints of `k_i` equal steps of `[0.1, 1]` (`k_i = 2^i`, mirrored
//! to negative values, when signed; `k_i = 2^(i+1)` unsigned), plus 0 and
//! 1: 256 sorted values whose density follows the magnitude, from `~10^-7`
//! to 1. Each value is computed in f64 and rounded to f32 once (the
//! library builds it in f32 arithmetic, so an entry may differ in the last
//! bit). A value `x` is stored as the code nearest to `x / absmax` (ties to
//! the lower code; bitsandbytes' non-stochastic quantization), read back as
//! `map[code]·absmax`.
//!
//! **Blocks per row.** bitsandbytes blocks a flat tensor in runs of 256
//! (2048 in older versions) values. A sparse row is read and written as a
//! unit, so blocks here never cross rows: row `i` is split into
//! `⌈d/block⌉` blocks of `block` values (the last one shorter), each with
//! its own absmax for `m` and for `v`. With the default `block = 256` and
//! `d ≤ 256` that is one absmax pair per row: `2·d + 8` bytes per row
//! (vs `8·d` for f32 Adam). A smaller block (64) tracks rows with uneven
//! coordinates more closely at 8 more bytes per block.
//!
//! **Step** (for each row with a gradient, as bitsandbytes' block-wise
//! kernel does per block): dequantize the row's `m`, `v`; Adam's update in
//! f32 (global step count for bias correction, like
//! [`ExactAdam`](crate::ExactAdam)); the parameter moves by the f32
//! moments; then each block's new absmax is taken and the moments are
//! quantized back. Rows absent from the batch keep their codes untouched.

use alloc::vec;
use alloc::vec::Vec;
use core::mem::size_of;

use num_traits::Float;

use crate::adam::AdamConfig;
use crate::batch::apply_row;
use crate::error::{ConfigError, StateError, StateField, StepError};
use crate::kernel::bias_corrections;
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, Plumbing, RowDriver, adam_fingerprint};
use crate::state::kind;
use crate::table::RowAccess;

/// Per slot: the codes of `m` and of `v` (d each), then the blocks' absmax
/// of `m` and of `v` (`≥ 0`).
type Codes = (Lane<u8>, Lane<u8>, Lane<f32>);

/// Values per block when none is given: bitsandbytes' block size.
pub const DEFAULT_BLOCK: usize = 256;

/// bitsandbytes' dynamic tree quantization map (`create_dynamic_map(signed,
/// max_exponent_bits = 7, total_bits = 8)`): 256 sorted values in `[-1, 1]`
/// (signed) or `[0, 1]` (unsigned). See the module documentation.
///
/// ```
/// use basis_core::dynamic_map;
///
/// let signed = dynamic_map(true);
/// assert_eq!((signed[127], signed[255]), (0.0, 1.0));
/// assert!(signed.windows(2).all(|w| w[0] < w[1]));
/// let unsigned = dynamic_map(false);
/// assert_eq!((unsigned[0], unsigned[255]), (0.0, 1.0));
/// assert!(unsigned[1] > 0.0 && unsigned[1] < 1e-6);
/// ```
pub fn dynamic_map(signed: bool) -> [f32; 256] {
    const SCALE: [f64; 7] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0];
    let mut out = [0.0f32; 256];
    let mut len = 0;
    for (i, &scale) in SCALE.iter().enumerate() {
        let items = if signed {
            1usize << i
        } else {
            1usize << (i + 1)
        };
        for k in 0..items {
            let lo = 0.1 + 0.9 * k as f64 / items as f64;
            let hi = 0.1 + 0.9 * (k + 1) as f64 / items as f64;
            let x = (scale * ((lo + hi) / 2.0)) as f32;
            out[len] = x;
            len += 1;
            if signed {
                out[len] = -x;
                len += 1;
            }
        }
    }
    // 0 and 1 complete the 256 values (254 + 2, signed or not).
    out[len] = 0.0;
    out[len + 1] = 1.0;
    out.sort_unstable_by(f32::total_cmp);
    out
}

/// The code of `map` nearest to `x` (ties to the lower code).
fn encode(map: &[f32; 256], x: f32) -> u8 {
    let above = map.partition_point(|&c| c <= x);
    if above == 0 {
        return 0;
    }
    if above == map.len() {
        return 255;
    }
    let lo = above - 1;
    // map[lo] <= x < map[lo + 1]; every other code is farther.
    if map[above] - x < x - map[lo] {
        above as u8
    } else {
        lo as u8
    }
}

/// Adam with 8-bit block-wise quantized moments (bitsandbytes' scheme,
/// blocks within a row). Takes [`AdamConfig`] (every field applies) and a
/// block size.
///
/// ```
/// use basis_core::{Adam8bit, AdamConfig, DenseTable, ExactAdam, RowIndex, SparseOptimizer};
///
/// let config = AdamConfig::default().with_dim(8).with_lr(0.01).with_row_index(RowIndex::Dense { rows: 4 });
/// let mut q = Adam8bit::new(config, 256)?;
/// let mut exact = ExactAdam::new(config)?;
/// let (mut a, mut b) = (vec![0.5f32; 32], vec![0.5f32; 32]);
/// for s in 0..20 {
///     let g: Vec<f32> = (0..8).map(|j| ((s * 8 + j) as f32 * 0.7).sin()).collect();
///     q.step(&[1], &g, &mut DenseTable::new(&mut a, 8)?)?;
///     exact.step(&[1], &g, &mut DenseTable::new(&mut b, 8)?)?;
/// }
/// // Close to f32 Adam, at 2·d + 8 bytes per row instead of 8·d.
/// assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 0.01));
/// assert_eq!(q.memory().scalars, 4 * (2 * 8 + 8));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Adam8bit {
    config: AdamConfig,
    block: usize,
    blocks: usize,
    signed: [f32; 256],
    unsigned: [f32; 256],
    state: RowDriver<Codes>,
    /// The dequantized row (`m`, `v`) and its update: `3·d` f32.
    work: Vec<f32>,
}

impl Adam8bit {
    /// Zero moments, blocks of `block` values (within a row).
    ///
    /// # Errors
    /// [`ConfigError`] from [`AdamConfig::validate`],
    /// [`ConfigError::BlockSize`] for `block == 0`, or
    /// [`ConfigError::AllocationFailed`] for a dense range that does not fit.
    pub fn new(config: AdamConfig, block: usize) -> Result<Self, ConfigError> {
        config.validate()?;
        if block == 0 {
            return Err(ConfigError::BlockSize);
        }
        let d = config.dim;
        let blocks = d.div_ceil(block);
        let signed = dynamic_map(true);
        let unsigned = dynamic_map(false);
        let plumbing = Plumbing {
            dim: d,
            nonfinite: config.nonfinite,
            grad_clip: config.grad_clip,
            kind: kind::ADAM8BIT,
            max_steps: u64::from(u32::MAX),
        };
        let state = RowDriver::new(plumbing, config.row_index, |n| {
            Ok((
                Lane::new(d, n, encode(&signed, 0.0))?,
                Lane::new(d, n, encode(&unsigned, 0.0))?,
                Lane::new(2 * blocks, n, 0.0)?.nonneg(),
            ))
        })?;
        Ok(Self {
            config,
            block,
            blocks,
            signed,
            unsigned,
            state,
            work: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// Values per block.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Row `id`'s dequantized `(m, v)`, if it has state.
    pub fn moments(&self, id: u64) -> Option<(Vec<f32>, Vec<f32>)> {
        let s = self.state.slot_of(id)?;
        let d = self.config.dim;
        let (mut m, mut v) = (vec![0.0; d], vec![0.0; d]);
        self.quant().decode(&self.state.lanes, s, &mut m, &mut v);
        Some((m, v))
    }

    /// The code maps and block layout, apart from the state they read.
    fn quant(&self) -> Quant<'_> {
        Quant {
            dim: self.config.dim,
            block: self.block,
            blocks: self.blocks,
            signed: &self.signed,
            unsigned: &self.unsigned,
        }
    }

    /// Moved rows' codes mean the same under the same dim, betas and block.
    fn fingerprint(&self) -> [(StateField, u64); 3] {
        let [dim, betas] = adam_fingerprint(self.config.dim, self.config.beta1, self.config.beta2);
        [dim, betas, (StateField::BlockSize, self.block as u64)]
    }
}

/// What decoding and storing a row needs besides its codes.
struct Quant<'a> {
    dim: usize,
    block: usize,
    blocks: usize,
    signed: &'a [f32; 256],
    unsigned: &'a [f32; 256],
}

impl Quant<'_> {
    /// Slot `s`'s moments into `m`, `v`.
    fn decode(&self, codes: &Codes, s: usize, m: &mut [f32], v: &mut [f32]) {
        let (mc, vc, sc) = (codes.0.row(s), codes.1.row(s), codes.2.row(s));
        for j in 0..self.dim {
            let b = j / self.block;
            m[j] = self.signed[usize::from(mc[j])] * sc[b];
            v[j] = self.unsigned[usize::from(vc[j])] * sc[self.blocks + b];
        }
    }

    /// Stores `m`, `v` in slot `s`: each block's absmax, then the codes.
    fn store(&self, codes: &mut Codes, s: usize, m: &[f32], v: &[f32]) {
        let d = self.dim;
        for b in 0..self.blocks {
            let range = b * self.block..((b + 1) * self.block).min(d);
            let am = m[range.clone()].iter().fold(0.0f32, |a, x| a.max(x.abs()));
            let av = v[range.clone()].iter().fold(0.0f32, |a, &x| a.max(x));
            let sc = codes.2.row_mut(s);
            sc[b] = am;
            sc[self.blocks + b] = av;
            let mc = codes.0.row_mut(s);
            for j in range.clone() {
                mc[j] = encode(self.signed, if am > 0.0 { m[j] / am } else { 0.0 });
            }
            let vc = codes.1.row_mut(s);
            for j in range {
                vc[j] = encode(self.unsigned, if av > 0.0 { v[j] / av } else { 0.0 });
            }
        }
    }
}

impl SparseOptimizer for Adam8bit {
    fn dim(&self) -> usize {
        self.config.dim
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        let c = self.config;
        let d = c.dim;
        let quant = Quant {
            dim: d,
            block: self.block,
            blocks: self.blocks,
            signed: &self.signed,
            unsigned: &self.unsigned,
        };
        let work = &mut self.work;
        work.resize(3 * d, 0.0);
        self.state
            .step(ids, grads, table, |codes, slot, g, row, steps| {
                let t = u32::try_from(steps).unwrap_or(u32::MAX);
                let (bc1, bc2) = bias_corrections(c.beta1, c.beta2, t, c.bias_correction);
                let (m, rest) = work.split_at_mut(d);
                let (v, upd) = rest.split_at_mut(d);
                quant.decode(codes, slot, m, v);
                for j in 0..d {
                    m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                    v[j] = c.beta2 * v[j] + (1.0 - c.beta2) * (g[j] * g[j]);
                    upd[j] = c.lr * ((m[j] / bc1) / (Float::sqrt(v[j] / bc2) + c.eps));
                }
                if let Some(row) = row {
                    apply_row(row, upd, c.lr * c.weight_decay);
                }
                quant.store(codes, slot, m, v);
            })
    }

    crate::rows::driver_methods!();

    fn memory(&self) -> MemoryReport {
        let (mc, vc, scales) = &self.state.lanes;
        let base = self.state.memory();
        MemoryReport {
            scalars: mc.bytes() + vc.bytes() + scales.bytes(),
            code_tables: 2 * 256 * size_of::<f32>(),
            scratch: base.scratch + self.work.capacity() * size_of::<f32>(),
            ..base
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        self.state.export_state(|w| w.u64(self.block as u64))
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let block = self.block as u64;
        self.state.import_state(bytes, |r| {
            if r.u64()? != block {
                return Err(StateError::ConfigMismatch {
                    field: StateField::BlockSize,
                });
            }
            Ok(())
        })
    }
}
