//! Scales (RMS, mean-abs, max-abs) with a fixed, documented reduction order.
//!
//! # Reduction order (reproducible bits)
//!
//! Sums run in `f64` over **8 interleaved lanes**: element `i` of the slice
//! (counted from the slice's first element) is added to lane `i % 8`, lanes in
//! increasing `i`; the lanes are then combined as
//! `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`. Squares are formed in
//! `f64` (`(x as f64) * (x as f64)`, exact). This order is fixed on every
//! platform (no FMA contraction in Rust), so any implementation that follows it
//! reproduces our scales bit for bit. Eight lanes (not one) because a single
//! sequential `f64` chain is latency-bound at ~3 GB/s, a quarter of memory
//! bandwidth.
//!
//! Then `rms = (sum_sq / n as f64).sqrt() as f32` and
//! `mean_abs = (sum_abs / n as f64) as f32`; both are `0.0` for `n = 0`.
//! `max_abs` is the largest `|x|` (exact, order-free).

/// Which scale `α` a chunk of signs is decoded with (`x̂ = ±α`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ScaleKind {
    /// `α = ‖p‖₂ / √n` (DeepSpeed 1-bit Adam; preserves the ℓ2 norm). The default.
    #[default]
    Rms,
    /// `α = ‖p‖₁ / n` (EF-SignSGD; minimises `‖p − α·σ(p)‖₂` over α).
    MeanAbs,
    /// `α = max |p|` (the stochastic variant's scale `s`).
    MaxAbs,
    /// `α = 1`: the bare sign (no magnitude).
    Unit,
}

impl ScaleKind {
    /// Wire byte of this kind.
    pub(crate) const fn to_byte(self) -> u8 {
        match self {
            Self::Rms => 0,
            Self::MeanAbs => 1,
            Self::MaxAbs => 2,
            Self::Unit => 3,
        }
    }

    /// Kind of a wire byte, if known.
    pub(crate) const fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Rms),
            1 => Some(Self::MeanAbs),
            2 => Some(Self::MaxAbs),
            3 => Some(Self::Unit),
            _ => None,
        }
    }

    /// The scale of `x` (see the module docs for the order).
    pub fn of(self, x: &[f32]) -> f32 {
        let mut acc = Accumulator::new(self);
        acc.feed(x);
        acc.finish()
    }
}

/// `sqrt(Σ x² / n)` (RMS), `0.0` for an empty slice; order in the module docs.
pub fn rms(x: &[f32]) -> f32 {
    ScaleKind::Rms.of(x)
}

/// `Σ |x| / n` (mean absolute value), `0.0` for an empty slice.
pub fn mean_abs(x: &[f32]) -> f32 {
    ScaleKind::MeanAbs.of(x)
}

/// `max |x|`, `0.0` for an empty slice (a NaN is ignored).
pub fn max_abs(x: &[f32]) -> f32 {
    ScaleKind::MaxAbs.of(x)
}

/// `Σ x²` in `f64`, 8 interleaved lanes (module docs).
pub fn sum_sq(x: &[f32]) -> f64 {
    let mut l = Lanes::default();
    l.feed(x, |v| f64::from(v) * f64::from(v));
    l.total()
}

/// `Σ |x|` in `f64`, 8 interleaved lanes (module docs).
pub fn sum_abs(x: &[f32]) -> f64 {
    let mut l = Lanes::default();
    l.feed(x, |v| f64::from(v.abs()));
    l.total()
}

/// Eight `f64` lanes fed in index order; `pos` = elements fed so far, so a
/// sum can be fed in pieces and still follow the one documented order.
#[derive(Clone, Copy, Debug, Default)]
struct Lanes {
    lanes: [f64; 8],
    pos: usize,
}

impl Lanes {
    #[inline(always)]
    fn feed(&mut self, x: &[f32], term: impl Fn(f32) -> f64) {
        // Head: finish the current group of 8 one element at a time.
        let head = ((8 - self.pos % 8) % 8).min(x.len());
        let (first, rest) = x.split_at(head);
        for &v in first {
            self.lanes[self.pos % 8] += term(v);
            self.pos += 1;
        }
        // Body: whole groups, lane j gets element j of the group (vectorises).
        let groups = rest.chunks_exact(8);
        let tail = groups.remainder();
        // Lanes in a local so they stay in registers (vectorises).
        let mut lanes = self.lanes;
        for g in groups {
            for (lane, &v) in lanes.iter_mut().zip(g) {
                *lane += term(v);
            }
        }
        self.lanes = lanes;
        self.pos += rest.len() - tail.len();
        for &v in tail {
            self.lanes[self.pos % 8] += term(v);
            self.pos += 1;
        }
    }

    /// See [`Accumulator::fused_words`]; `pos % 8 == 0`, `x.len() % 64 == 0`.
    #[inline(always)]
    fn fused_words(
        &mut self,
        x: &[f32],
        buf: &mut [f32],
        alpha: f32,
        signs: &mut [u8],
        term: impl Fn(f32) -> f64,
    ) {
        let mut lanes = self.lanes;
        for ((xw, bw), sw) in x
            .chunks_exact(64)
            .zip(buf.chunks_exact_mut(64))
            .zip(signs.chunks_exact_mut(8))
        {
            for (q, &xi) in bw.iter_mut().zip(xw) {
                *q = xi + (*q - sign_scale(*q, alpha));
            }
            feed_word(&mut lanes, bw, sw, &term);
        }
        self.lanes = lanes;
        self.pos += x.len();
    }

    /// [`Self::fused_words`] from `old` into `new` (the double-buffered
    /// compressor), also checking every new value: returns `false` if one is
    /// NaN/±∞ (then `new` holds garbage and the caller discards it). Each
    /// word is formed in registers and handed to `store` (a plain copy, or
    /// non-temporal stores for buffers far larger than the cache).
    #[inline(always)]
    fn fused_words_into(
        &mut self,
        w: Words<'_>,
        term: impl Fn(f32) -> f64,
        store: impl Fn(&mut [f32], &[f32; 64]),
    ) -> bool {
        let Words {
            x,
            old,
            new,
            alpha,
            signs,
        } = w;
        let mut lanes = self.lanes;
        // Branch-free: OR of "exponent all ones" over the word (vectorises).
        let mut bad = 0u32;
        for (((xw, ow), nw), sw) in x
            .chunks_exact(64)
            .zip(old.chunks_exact(64))
            .zip(new.chunks_exact_mut(64))
            .zip(signs.chunks_exact_mut(8))
        {
            let mut w = [0.0f32; 64];
            for ((q, &o), &xi) in w.iter_mut().zip(ow).zip(xw) {
                let p = xi + (o - sign_scale(o, alpha));
                bad |= u32::from((p.to_bits() & 0x7fff_ffff) as i32 >= INF_BITS);
                *q = p;
            }
            feed_word(&mut lanes, &w, sw, &term);
            store(nw, &w);
        }
        self.lanes = lanes;
        self.pos += x.len();
        bad == 0
    }

    #[inline(always)]
    fn total(&self) -> f64 {
        let l = &self.lanes;
        ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
    }
}

/// Add one 64-element word's terms to the 8 lanes (the documented order)
/// and write its sign word.
#[inline(always)]
fn feed_word(lanes: &mut [f64; 8], w: &[f32], signs: &mut [u8], term: &impl Fn(f32) -> f64) {
    for g in w.chunks_exact(8) {
        for (lane, &v) in lanes.iter_mut().zip(g) {
            *lane += term(v);
        }
    }
    if let Ok(w) = <&[f32; 64]>::try_from(w) {
        signs.copy_from_slice(&crate::pack::fast_word(w).to_be_bytes());
    }
}

/// `α·σ(p)`: `+α` when `!(p < 0)`, else `−α` (exact in `f32`).
#[inline(always)]
pub(crate) fn sign_scale(p: f32, alpha: f32) -> f32 {
    if p < 0.0 { -alpha } else { alpha }
}

/// The streams of one double-buffered fused pass over whole words: input
/// `x`, the buffer before (`old`) and after (`new`) the step, the pending
/// scale `alpha` of `old`, and the sign bytes (8 per word).
#[derive(Debug)]
pub(crate) struct Words<'a> {
    pub(crate) x: &'a [f32],
    pub(crate) old: &'a [f32],
    pub(crate) new: &'a mut [f32],
    pub(crate) alpha: f32,
    pub(crate) signs: &'a mut [u8],
}

/// Running scale of one chunk fed in pieces (the fused compressor's blocks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Accumulator {
    kind: ScaleKind,
    lanes: Lanes,
    max: f32,
}

impl Accumulator {
    pub(crate) fn new(kind: ScaleKind) -> Self {
        Self {
            kind,
            lanes: Lanes::default(),
            max: 0.0,
        }
    }

    /// Feed the next elements of the chunk (in index order).
    #[inline(always)]
    pub(crate) fn feed(&mut self, x: &[f32]) {
        match self.kind {
            ScaleKind::Rms => self.lanes.feed(x, |v| f64::from(v) * f64::from(v)),
            ScaleKind::MeanAbs => self.lanes.feed(x, |v| f64::from(v.abs())),
            ScaleKind::MaxAbs => {
                self.max = x.iter().fold(self.max, |m, &v| m.max(v.abs()));
                self.lanes.pos += x.len();
            }
            ScaleKind::Unit => self.lanes.pos += x.len(),
        }
    }

    /// The fused compressor's inner loop for [`ScaleKind::Rms`] and
    /// [`ScaleKind::MeanAbs`], one 64-element word at a time so memory streams
    /// without pauses: `buf ← x + (buf − α·σ(buf))`, feed the new values (the
    /// documented lane order), and write their sign word to `signs`. Same
    /// operations in the same order as update, [`Self::feed`], pack.
    ///
    /// Returns `false` (and does nothing) unless the kind is RMS or mean-abs,
    /// the lanes are at a group boundary, and `x.len()` is a multiple of 64.
    #[inline(always)]
    pub(crate) fn fused_words(
        &mut self,
        x: &[f32],
        buf: &mut [f32],
        alpha: f32,
        signs: &mut [u8],
    ) -> bool {
        if !self.lanes.pos.is_multiple_of(8) || !x.len().is_multiple_of(64) {
            return false;
        }
        match self.kind {
            ScaleKind::Rms => self
                .lanes
                .fused_words(x, buf, alpha, signs, |v| f64::from(v) * f64::from(v)),
            ScaleKind::MeanAbs => self
                .lanes
                .fused_words(x, buf, alpha, signs, |v| f64::from(v.abs())),
            ScaleKind::MaxAbs | ScaleKind::Unit => return false,
        }
        true
    }

    /// [`Self::fused_words`] reading the buffer from `old` and writing the new
    /// values to `new`; `Some(false)` when a new value is NaN/±∞ (`new` is then
    /// garbage), `None` (nothing done) in the cases `fused_words` refuses.
    #[inline(always)]
    pub(crate) fn fused_words_into(
        &mut self,
        w: Words<'_>,
        store: impl Fn(&mut [f32], &[f32; 64]),
    ) -> Option<bool> {
        if !self.lanes.pos.is_multiple_of(8) || !w.x.len().is_multiple_of(64) {
            return None;
        }
        match self.kind {
            ScaleKind::Rms => {
                let sq = |v: f32| f64::from(v) * f64::from(v);
                Some(self.lanes.fused_words_into(w, sq, store))
            }
            ScaleKind::MeanAbs => {
                let abs = |v: f32| f64::from(v.abs());
                Some(self.lanes.fused_words_into(w, abs, store))
            }
            ScaleKind::MaxAbs | ScaleKind::Unit => None,
        }
    }

    /// The running lanes for a vector kernel that adds terms in the
    /// documented order itself: `Some((abs, lanes, pos))` for the sum kinds
    /// (`abs`: mean-abs terms `|v|`, else squares) when the lanes are at a
    /// group boundary; the kernel adds the count it fed to `pos`.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2")),
        allow(dead_code, reason = "used by the x86_64 kernels only")
    )]
    #[inline(always)]
    pub(crate) fn sum_lanes(&mut self) -> Option<(bool, &mut [f64; 8], &mut usize)> {
        let abs = match self.kind {
            ScaleKind::Rms => false,
            ScaleKind::MeanAbs => true,
            ScaleKind::MaxAbs | ScaleKind::Unit => return None,
        };
        if !self.lanes.pos.is_multiple_of(8) {
            return None;
        }
        let Lanes { lanes, pos } = &mut self.lanes;
        Some((abs, lanes, pos))
    }

    /// `Σ x²` fed so far (meaningful for [`ScaleKind::Rms`]).
    pub(crate) fn sum_sq(&self) -> f64 {
        self.lanes.total()
    }

    /// The chunk's scale.
    pub(crate) fn finish(&self) -> f32 {
        let n = self.lanes.pos;
        if n == 0 {
            return match self.kind {
                ScaleKind::Unit => 1.0,
                _ => 0.0,
            };
        }
        #[allow(clippy::cast_precision_loss, reason = "n ≤ 2^53 for any real slice")]
        let nf = n as f64;
        match self.kind {
            ScaleKind::Rms => num_traits::Float::sqrt(self.lanes.total() / nf) as f32,
            ScaleKind::MeanAbs => (self.lanes.total() / nf) as f32,
            ScaleKind::MaxAbs => self.max,
            ScaleKind::Unit => 1.0,
        }
    }
}

/// `|v|` bit pattern of ±∞ (and the smallest NaN pattern).
const INF_BITS: i32 = 0x7f80_0000;

/// Whether any `|v|` bit pattern is at least `limit` (branch-free: vectorises).
#[inline(always)]
fn any_at_least(x: &[f32], limit: i32) -> bool {
    // Masked patterns are ≤ 0x7fff_ffff, so a signed compare is exact.
    let hits = x.iter().fold(0u32, |acc, v| {
        acc | u32::from((v.to_bits() & 0x7fff_ffff) as i32 >= limit)
    });
    hits != 0
}

/// Whether any element is NaN or ±∞ (branch-free).
pub(crate) fn any_non_finite(x: &[f32]) -> bool {
    any_at_least(x, INF_BITS)
}

/// The index of the first NaN/±∞ in `x`, if any.
pub(crate) fn first_non_finite(x: &[f32]) -> Option<usize> {
    const BLOCK: usize = 1024;
    for (b, block) in x.chunks(BLOCK).enumerate() {
        // Branch-free scan of the block, then locate only if needed.
        if any_at_least(block, INF_BITS) {
            let i = block.iter().position(|v| !v.is_finite()).unwrap_or(0);
            return Some(b * BLOCK + i);
        }
    }
    None
}

/// `max |x|` over a slice known to be finite, exact.
pub(crate) fn max_abs_finite(x: &[f32]) -> f32 {
    f32::from_bits(x.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff)))
}

/// `Ok(())` when every element of `x` is finite, else the first bad index.
///
/// # Errors
/// [`CodecError::NonFinite`](crate::CodecError::NonFinite) with the index of the
/// first NaN or ±∞.
pub fn check_finite(x: &[f32]) -> Result<(), crate::CodecError> {
    match first_non_finite(x) {
        None => Ok(()),
        Some(index) => Err(crate::CodecError::NonFinite { index }),
    }
}
