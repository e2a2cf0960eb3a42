//! A streaming synthetic Criteo-like click log (`--format criteo-synth`):
//! 13 integer and 26 categorical fields, ids of an id space of 10^8 and more,
//! generated one example at a time from `(seed, index)` alone.
//!
//! - **Categorical fields** `C1..C26`: field `c` has `cardinalities()[c]`
//!   ids (Criteo-like: a few fields of 10^7 ids, many small ones; together
//!   `--synthetic-ids`, default 10^8; fields of up to 1000 ids keep their
//!   size at any id space), drawn from a Zipf law
//!   `P(rank r) ∝ 1/r^s` by rejection-inversion ([`Zipf`], exact, O(1)
//!   memory). A feature's key is `(13 + c) << 56 | rank`: the field sits in
//!   the top byte ([`crate::hashing::field_of`]), no hashing needed.
//! - **Integer fields** `I1..I13`: log-normal counts (missing with
//!   probability 0.05), as raw values for a dense bottom tower
//!   ([`SynthExample::dense`]) and, like the `criteo` loader, log-binned
//!   into categorical features of fields 0..12.
//! - **Labels** from a hidden model that an FM cannot represent but DeepFM
//!   can: `logit = b + 0.3·Σ_c w_c + Σ_{c<c'} ⟨v_c, v_c'⟩ + 3·Σ_j B_j
//!   relu(Σ_{c≥18} A_jc u_c + a_j) + 0.2·Σ_j d_j z_j`, where `w, v (rank 4),
//!   u` are planted per (field, id), `z_j` is the standardised log of `I_j`,
//!   and the ReLU teacher couples the last 8 categorical fields (the small,
//!   often-seen ones, so a model can learn their ids) at every order;
//!   `y ~ Bernoulli(σ(logit))`, flipped with probability `noise`. (The
//!   teacher's gain is 3 in the code: `TEACHER_GAIN`.)
//!
//! Every planted value is a pure function of `(seed, field, id)` and example
//! `i` of `(seed, i)` ([`CriteoSynth::example`]), so nothing scales with the
//! id space or the number of examples: any rank can generate any share of a
//! stream of any length, and memory holds only what a trainer keeps. Only
//! [`generate`] (the CLI's in-memory loader path) materialises examples.

use super::criteo::int_bin;
use super::{DataError, RawData};
use crate::hashing::feature_key_u64;
use crate::rng::{Rng, mix64};

/// Integer fields.
pub const INTS: usize = 13;
/// Categorical fields.
pub const CATS: usize = 26;
/// Hidden units of the ReLU teacher, and how many fields feed it.
const TEACHER_HIDDEN: usize = 8;
const TEACHER_FIELDS: usize = 8;
/// Weight of the ReLU teacher in the logit.
const TEACHER_GAIN: f64 = 3.0;
/// Smallest id space (the small fields alone hold ~4000 ids).
const MIN_IDS: u64 = 10_000;
/// Rank of the planted FM interactions.
const RANK: usize = 4;

/// Relative cardinalities of `C1..C26` (Criteo-like; scaled to the id space).
const SHAPE: [f64; CATS] = [
    4e7, 2.5e7, 1.5e7, 1e7, 5e6, 2e6, 1e6, 5e5, 3e5, 2e5, 1e5, 5e4, 3e4, 2e4, 1e4, 5e3, 3e3, 2e3,
    1e3, 500.0, 300.0, 100.0, 50.0, 20.0, 10.0, 4.0,
];

/// Generator parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct CriteoSynthConfig {
    /// Examples [`generate`] materialises (the stream itself is unbounded).
    /// Default 200 000.
    pub examples: usize,
    /// Total categorical id space (sum of the 26 cardinalities, at least this).
    /// Default 10^8.
    pub ids: u64,
    /// Zipf exponent `s` (`>= 0`; 0 = uniform). Default 1.1.
    pub zipf: f64,
    /// Label-flip probability. Default 0.05.
    pub noise: f64,
    /// Seed of the planted model and the examples. Default 1.
    pub seed: u64,
    /// `--stream`: do not materialise; a sharded trainer generates its
    /// shares on the fly ([`stream_dataset`]). Default `false`.
    pub stream: bool,
}

impl Default for CriteoSynthConfig {
    fn default() -> Self {
        Self {
            examples: 200_000,
            ids: 100_000_000,
            zipf: 1.1,
            noise: 0.05,
            seed: 1,
            stream: false,
        }
    }
}

/// Zipf law on ranks `1..=n`, `P(r) ∝ r^(−s)`, sampled by rejection-inversion
/// (Hörmann & Derflinger 1996, as in Apache Commons and `rand_distr`): O(1)
/// state and, on average, fewer than two uniforms per sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zipf {
    n: f64,
    s: f64,
    t: f64,
    q: f64,
}

impl Zipf {
    /// The law on `1..=n` (`n >= 1`, `s >= 0` finite; checked by the caller).
    pub fn new(n: u64, s: f64) -> Self {
        let n = n as f64;
        let one = (s - 1.0).abs() < 1e-12;
        let q = if one { 0.0 } else { 1.0 / (1.0 - s) };
        let t = if one {
            1.0 + n.ln()
        } else {
            (n.powf(1.0 - s) - s) * q
        };
        Self { n, s, t, q }
    }

    /// Inverse of the integral of the hat function.
    fn inv_cdf(&self, p: f64) -> f64 {
        let pt = p * self.t;
        if pt <= 1.0 {
            pt
        } else if self.q == 0.0 {
            (pt - 1.0).exp()
        } else {
            (pt * (1.0 - self.s) + self.s).powf(self.q)
        }
    }

    /// One rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let inv_b = self.inv_cdf(rng.uniform());
            let x = (inv_b + 1.0).floor().clamp(1.0, self.n);
            let mut ratio = x.powf(-self.s);
            if x > 1.0 {
                ratio *= inv_b.powf(self.s);
            }
            if rng.uniform() < ratio {
                return x as u64;
            }
        }
    }
}

/// One generated example.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SynthExample {
    /// `(feature key, 1.0)`: the binned integers present, then `C1..C26`.
    pub feats: Vec<(u64, f32)>,
    /// `ln(1 + I_j)` (0 when missing), for a dense bottom tower.
    pub dense: [f32; INTS],
    /// 0 or 1.
    pub label: f32,
}

/// The generator: Zipf laws per field and the hidden model's few global
/// weights (no per-id state).
#[derive(Debug, Clone)]
pub struct CriteoSynth {
    cfg: CriteoSynthConfig,
    cards: [u64; CATS],
    zipf: [Zipf; CATS],
    sigma_v: f64,
    teacher_a: [[f64; TEACHER_FIELDS]; TEACHER_HIDDEN],
    teacher_bias: [f64; TEACHER_HIDDEN],
    teacher_out: [f64; TEACHER_HIDDEN],
    /// Per integer field: log-normal (μ, σ) and label weight.
    ints: [(f64, f64, f64); INTS],
}

/// The key of rank `r` (0-based) of categorical field `c`.
pub fn cat_key(c: usize, r: u64) -> u64 {
    (((INTS + c) as u64) << 56) | r
}

impl CriteoSynth {
    /// The generator for `cfg`.
    ///
    /// Fails with [`DataError::Config`] when the id space is smaller than 10^4
    /// or above 2^48, the Zipf exponent is negative or not finite, or the
    /// noise is outside `[0, 0.5)`.
    pub fn new(cfg: &CriteoSynthConfig) -> Result<Self, DataError> {
        if !(MIN_IDS..=1 << 48).contains(&cfg.ids) {
            return Err(DataError::Config(format!(
                "--synthetic-ids {}: need 10^4 ..= 2^48 ids",
                cfg.ids
            )));
        }
        if !(cfg.zipf.is_finite() && cfg.zipf >= 0.0 && (0.0..0.5).contains(&cfg.noise)) {
            return Err(DataError::Config(
                "synthetic noise must be in [0, 0.5) and zipf finite and >= 0".into(),
            ));
        }
        let total: f64 = SHAPE.iter().sum();
        let mut cards = [0u64; CATS];
        // Scaled to the id space, but a small field keeps up to 1000 ids at
        // any scale (the teacher reads the small fields).
        for (c, &w) in cards.iter_mut().zip(&SHAPE) {
            *c = ((w / total * cfg.ids as f64).round() as u64).max(w.min(1000.0) as u64);
        }
        // Rounding: the first field takes the rest, so the sum is >= ids.
        let sum: u64 = cards.iter().sum();
        cards[0] += cfg.ids.saturating_sub(sum);
        let mut rng = Rng::derive(cfg.seed, 0xC517);
        let mut teacher_a = [[0.0; TEACHER_FIELDS]; TEACHER_HIDDEN];
        for row in &mut teacher_a {
            for a in row.iter_mut() {
                *a = rng.normal() * 2.0 / (TEACHER_FIELDS as f64).sqrt();
            }
        }
        let teacher_bias = core::array::from_fn(|_| 0.5 * rng.normal());
        let teacher_out = core::array::from_fn(|_| rng.normal() / (TEACHER_HIDDEN as f64).sqrt());
        let ints = core::array::from_fn(|_| {
            (1.0 + 2.0 * rng.uniform(), 0.5 + rng.uniform(), rng.normal())
        });
        let pairs = (CATS * (CATS - 1) / 2) as f64;
        Ok(Self {
            cfg: cfg.clone(),
            cards,
            zipf: core::array::from_fn(|c| Zipf::new(cards[c], cfg.zipf)),
            sigma_v: (1.0 / (pairs * RANK as f64)).powf(0.25),
            teacher_a,
            teacher_bias,
            teacher_out,
            ints,
        })
    }

    /// Ids per categorical field (they sum to at least `--synthetic-ids`).
    #[cfg(test)]
    pub fn cardinalities(&self) -> &[u64; CATS] {
        &self.cards
    }

    /// One-line description for reports.
    pub fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "{} examples, {} ids in 26 fields (C1 {} .. C26 {}), zipf {}, noise {}, seed {}",
            c.examples,
            self.cards.iter().sum::<u64>(),
            self.cards[0],
            self.cards[CATS - 1],
            c.zipf,
            c.noise,
            c.seed
        )
    }

    /// The planted `(w, u, v)` of an id: a pure function of `(seed, key)`.
    fn planted(&self, key: u64) -> (f64, f64, [f64; RANK]) {
        let mut r = Rng::new(mix64(self.cfg.seed ^ mix64(key ^ 0x9A17_0000_0000_0000)));
        let w = r.normal();
        let u = r.normal();
        (w, u, core::array::from_fn(|_| r.normal()))
    }

    /// Example `i` of the stream (a pure function of `(seed, i)`).
    pub fn example(&self, i: u64, out: &mut SynthExample) {
        let mut rng = Rng::new(mix64(
            self.cfg.seed.wrapping_mul(0xA24B_AED4_963E_E407) ^ mix64(i),
        ));
        out.feats.clear();
        let mut logit = -1.0;
        for (j, &(mu, sigma, weight)) in self.ints.iter().enumerate() {
            let z = rng.normal();
            if rng.uniform() < 0.05 {
                out.dense[j] = 0.0;
                continue;
            }
            let v = ((mu + sigma * z).exp() - 1.0).floor().max(0.0) as i64;
            out.dense[j] = (v as f32).ln_1p();
            out.feats
                .push((feature_key_u64(j as u32, int_bin(v) as u64), 1.0));
            logit += 0.2 * weight * z;
        }
        let mut vsum = [0.0f64; RANK];
        let mut vsq = 0.0;
        let mut u = [0.0f64; TEACHER_FIELDS];
        for c in 0..CATS {
            let rank = self.zipf[c].sample(&mut rng) - 1;
            let key = cat_key(c, rank);
            out.feats.push((key, 1.0));
            let (w, uc, v) = self.planted(key);
            logit += 0.3 * w;
            for (s, &x) in vsum.iter_mut().zip(&v) {
                *s += self.sigma_v * x;
                vsq += (self.sigma_v * x).powi(2);
            }
            if let Some(slot) = (c + TEACHER_FIELDS).checked_sub(CATS) {
                u[slot] = uc;
            }
        }
        logit += 0.5 * (vsum.iter().map(|x| x * x).sum::<f64>() - vsq);
        for j in 0..TEACHER_HIDDEN {
            let pre: f64 = self.teacher_a[j].iter().zip(&u).map(|(a, x)| a * x).sum();
            logit += TEACHER_GAIN * self.teacher_out[j] * (pre + self.teacher_bias[j]).max(0.0);
        }
        let p = 1.0 / (1.0 + (-logit).exp());
        let mut y = rng.uniform() < p;
        if rng.uniform() < self.cfg.noise {
            y = !y;
        }
        out.label = f32::from(u8::from(y));
    }
}

/// Largest held-out slice (validation or test) of a stream: it is
/// generated per round of evaluation only, but every rank scores all of it.
const MAX_STREAM_HELD_OUT: usize = 200_000;

/// First stream index of the held-out test slice: training reads `0..n`,
/// the test slice `TEST_FIRST + j` (disjoint for any `n ≤ 2^40`).
pub const TEST_FIRST: u64 = 1 << 40;

/// First stream index of the held-out validation slice, `VALID_FIRST + j`:
/// disjoint from training (`n ≤ 2^40`) and from the test slice (`j <
/// 200 000 ≪ 2^40`).
pub const VALID_FIRST: u64 = 1 << 41;

/// The streamed data set of `--stream`: no examples in memory, only the
/// generator; training reads stream examples `0..cfg.examples`, the
/// validation split is the held-out slice `VALID_FIRST + j`, `j <
/// min(examples · valid_frac, 200 000)` (at least one when `valid_frac > 0`),
/// and the test split the slice `TEST_FIRST + j`, `j < min(examples ·
/// test_frac, 200 000)`: the same i.i.d. generator, indices training never
/// reads. `rows` is an estimate of the distinct ids training will touch
/// ([`pilot`]), used only to size per-rank BASIS buckets.
///
/// Fails as [`CriteoSynth::new`], on zero examples, or on more than `2^40`
/// (the held-out slices start there).
pub fn stream_dataset(
    cfg: &CriteoSynthConfig,
    valid_frac: f64,
    test_frac: f64,
) -> Result<super::Dataset, DataError> {
    if cfg.examples == 0 {
        return Err(DataError::Config("criteo-synth needs examples > 0".into()));
    }
    if cfg.examples as u64 > TEST_FIRST {
        return Err(DataError::Config(format!(
            "--stream reads at most 2^40 training examples (the held-out slices start there); \
             --synthetic-examples is {}",
            cfg.examples
        )));
    }
    let g = CriteoSynth::new(cfg)?;
    let held_out = |frac: f64, min: usize| {
        ((cfg.examples as f64 * frac).round() as usize).clamp(min, MAX_STREAM_HELD_OUT)
    };
    let test = held_out(test_frac, 1);
    let valid = held_out(valid_frac, usize::from(valid_frac > 0.0));
    // Field ids only (no examples): the towers read the field count from them.
    let fields: Vec<u8> = (0..(INTS + CATS) as u8).collect();
    let shape = || super::Examples {
        offsets: vec![0],
        fields: fields.clone(),
        dense_width: INTS,
        ..super::Examples::default()
    };
    let pilot = pilot(&g, cfg.examples as u64);
    Ok(super::Dataset {
        name: format!("criteo-synth stream ({})", g.describe()),
        fields: (1..=INTS)
            .map(|j| format!("I{j}"))
            .chain((1..=CATS).map(|c| format!("C{c}")))
            .collect(),
        rows: usize::try_from(pilot.rows).unwrap_or(usize::MAX),
        row_counts: Vec::new(),
        train: shape(),
        valid: shape(),
        test: shape(),
        split: format!(
            "streamed: train = examples 0..{}, valid = {valid} held-out examples from 2^41, \
             test = {test} held-out examples from 2^40; positive rate over the first {} \
             training examples",
            cfg.examples, pilot.examples
        ),
        report: super::LoadReport::default(),
        stream: Some(super::StreamSpec {
            generator: g,
            train: cfg.examples,
            valid,
            test,
            positive_rate: pilot.positive_rate,
        }),
    })
}

/// What a stream's first training examples tell before training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pilot {
    /// Estimated distinct ids among all `n` training examples.
    pub rows: u64,
    /// Examples read (`min(n, 2m)`).
    pub examples: u64,
    /// Positive labels among them over `examples`.
    pub positive_rate: f64,
}

/// Reads the first `min(n, 2m)` training examples (`m = min(n/2, 2^16)`,
/// at least 1): their positive rate, and the distinct ids among all `n`,
/// estimated from the two prefixes (`m` and `2m` examples) by a power law
/// `distinct(n) ≈ d(2m)·(n/2m)^a` (Zipf vocabularies grow as a power of
/// the sample size), capped at `40·n`.
pub fn pilot(g: &CriteoSynth, n: u64) -> Pilot {
    let m = (n / 2).clamp(1, 1 << 16);
    let mut seen = std::collections::HashSet::new();
    let mut ex = SynthExample::default();
    let mut d = [0u64; 2];
    let (mut read, mut positives) = (0u64, 0u64);
    for i in 0..(2 * m).min(n) {
        g.example(i, &mut ex);
        seen.extend(ex.feats.iter().map(|f| f.0));
        read += 1;
        positives += u64::from(ex.label > 0.5);
        if i + 1 == m {
            d[0] = seen.len() as u64;
        }
    }
    d[1] = seen.len() as u64;
    let positive_rate = positives as f64 / read.max(1) as f64;
    let rows = if n <= 2 * m || d[0] == 0 {
        d[1]
    } else {
        let a = ((d[1] as f64 / d[0] as f64).ln() / 2f64.ln()).clamp(0.0, 1.0);
        let est = d[1] as f64 * (n as f64 / (2 * m) as f64).powf(a);
        (est as u64).min(40 * n)
    };
    Pilot {
        rows,
        examples: read,
        positive_rate,
    }
}

/// Materialise examples `0..cfg.examples` for the in-memory loader (their
/// index is their time).
///
/// Returns the data and its description. Fails as [`CriteoSynth::new`], or
/// on zero examples.
pub fn generate(cfg: &CriteoSynthConfig) -> Result<(RawData, String), DataError> {
    if cfg.examples == 0 {
        return Err(DataError::Config("criteo-synth needs examples > 0".into()));
    }
    let g = CriteoSynth::new(cfg)?;
    let names = (1..=INTS)
        .map(|j| format!("I{j}"))
        .chain((1..=CATS).map(|c| format!("C{c}")))
        .collect();
    let mut raw = RawData::new(names, true);
    let mut ex = SynthExample::default();
    for i in 0..cfg.examples {
        g.example(i as u64, &mut ex);
        raw.push_with_dense(&ex.feats, &ex.dense, ex.label, i as i64);
    }
    Ok((raw, g.describe()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::field_of;

    /// Exact Zipf probabilities by summation (the slow reference).
    fn exact_pmf(n: u64, s: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-s)).collect();
        let z: f64 = w.iter().sum();
        w.into_iter().map(|x| x / z).collect()
    }

    #[test]
    fn zipf_sampler_matches_the_exact_law() {
        let samples = 400_000;
        for &(n, s) in &[(1000u64, 1.1), (1000, 0.7), (50, 1.0), (20, 0.0), (1, 1.1)] {
            let pmf = exact_pmf(n, s);
            let z = Zipf::new(n, s);
            let mut rng = Rng::new(3);
            let mut counts = vec![0u64; n as usize];
            for _ in 0..samples {
                let r = z.sample(&mut rng);
                assert!((1..=n).contains(&r), "rank {r} of {n}");
                counts[r as usize - 1] += 1;
            }
            // The first ranks one by one, then the tail in blocks: each within
            // 5 standard deviations of the exact count.
            let mut cells: Vec<(f64, u64)> = (0..n.min(10) as usize)
                .map(|r| (pmf[r], counts[r]))
                .collect();
            for block in (10..n as usize).step_by(100) {
                let end = (block + 100).min(n as usize);
                cells.push((
                    pmf[block..end].iter().sum(),
                    counts[block..end].iter().sum(),
                ));
            }
            for (p, c) in cells {
                let expect = p * samples as f64;
                let sd = (expect * (1.0 - p)).sqrt().max(1.0);
                assert!(
                    (c as f64 - expect).abs() < 5.0 * sd,
                    "n {n} s {s}: count {c}, expected {expect:.0} ± {sd:.0}"
                );
            }
        }
    }

    #[test]
    fn zipf_head_of_a_huge_field_matches_the_exact_law() {
        // A 10^7-id field: the exact head probabilities by summing 10^7 terms.
        let n = 10_000_000;
        let pmf = exact_pmf(n, 1.1);
        let z = Zipf::new(n, 1.1);
        let mut rng = Rng::new(9);
        let samples = 200_000;
        let mut head = [0u64; 3];
        for _ in 0..samples {
            let r = z.sample(&mut rng);
            if r <= 3 {
                head[r as usize - 1] += 1;
            }
        }
        for (r, &c) in head.iter().enumerate() {
            let expect = pmf[r] * samples as f64;
            assert!(
                (c as f64 - expect).abs() < 5.0 * expect.sqrt(),
                "rank {}: {c} vs {expect:.0}",
                r + 1
            );
        }
    }

    #[test]
    fn examples_are_a_pure_function_of_seed_and_index() {
        let g = CriteoSynth::new(&CriteoSynthConfig::default()).unwrap();
        let (mut a, mut b) = (SynthExample::default(), SynthExample::default());
        g.example(123_456_789, &mut a);
        // Other examples in between change nothing; a second generator agrees.
        g.example(7, &mut b);
        let g2 = CriteoSynth::new(&CriteoSynthConfig::default()).unwrap();
        g2.example(123_456_789, &mut b);
        assert_eq!(a, b);
        g.example(123_456_790, &mut b);
        assert_ne!(a.feats, b.feats);
        let other = CriteoSynth::new(&CriteoSynthConfig {
            seed: 2,
            ..CriteoSynthConfig::default()
        })
        .unwrap();
        other.example(123_456_789, &mut b);
        assert_ne!(a.feats, b.feats);
        // 26 categorical features with their field in the top byte, in range.
        let cats: Vec<u64> = a
            .feats
            .iter()
            .map(|f| f.0)
            .filter(|&k| usize::from(field_of(k)) >= INTS)
            .collect();
        assert_eq!(cats.len(), CATS);
        for (c, &k) in cats.iter().enumerate() {
            assert_eq!(usize::from(field_of(k)), INTS + c);
            assert!(k & ((1 << 56) - 1) < g.cardinalities()[c]);
        }
    }

    #[test]
    fn memory_does_not_scale_with_the_id_space() {
        // 2^48 ids: a generator with any per-id table could not even be built.
        let g = CriteoSynth::new(&CriteoSynthConfig {
            ids: 1 << 48,
            zipf: 0.5,
            ..CriteoSynthConfig::default()
        })
        .unwrap();
        assert!(g.cardinalities()[0] > 1 << 46);
        let mut ex = SynthExample::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            g.example(i, &mut ex);
            seen.extend(ex.feats.iter().map(|f| f.0));
        }
        // With s = 0.5 over 10^14 ids the big fields almost never repeat.
        assert!(seen.len() > 10 * 1000, "{}", seen.len());
    }

    #[test]
    fn id_space_labels_and_bad_configs() {
        let g = CriteoSynth::new(&CriteoSynthConfig::default()).unwrap();
        let total: u64 = g.cardinalities().iter().sum();
        assert!(total >= 100_000_000, "{total}");
        assert!(g.cardinalities()[0] > 30_000_000 && g.cardinalities()[25] >= 1);
        let (raw, name) = generate(&CriteoSynthConfig {
            examples: 4000,
            ..CriteoSynthConfig::default()
        })
        .unwrap();
        assert!(
            name.starts_with("4000 examples, ") && name.contains(" ids in 26 fields"),
            "{name}"
        );
        let pos = raw.labels.iter().filter(|&&l| l == 1.0).count();
        assert!(pos > 400 && pos < 3600, "{pos}");
        for bad in [
            CriteoSynthConfig {
                ids: 3,
                ..CriteoSynthConfig::default()
            },
            CriteoSynthConfig {
                zipf: f64::NAN,
                ..CriteoSynthConfig::default()
            },
            CriteoSynthConfig {
                noise: 0.5,
                ..CriteoSynthConfig::default()
            },
            CriteoSynthConfig {
                examples: 0,
                ..CriteoSynthConfig::default()
            },
        ] {
            assert!(
                matches!(generate(&bad), Err(DataError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
