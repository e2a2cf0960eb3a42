//! The embedded synthetic click-through data set (no download needed).
//!
//! `F` categorical fields; field `f` has `cardinality[f]` values drawn from a
//! Zipf law `P(rank r) ∝ 1/(r+1)^s`, so a few ids are frequent and most are
//! rare — the shape of real CTR data and of the collisions BASIS must survive.
//! Labels come from a planted factorization machine:
//!
//! ```text
//! logit = b + Σ_f w(f, id_f) + Σ_{f<g} ⟨v(f, id_f), v(g, id_g)⟩
//! y ~ Bernoulli(sigmoid(logit)), then flipped with probability `noise`
//! ```
//!
//! `w ~ N(0, 0.4²)` and `v ~ N(0, σ_v² I_k)` with `k = 4` and `σ_v` chosen so
//! the interaction part has about unit variance. Every planted parameter is a
//! pure function of `(seed, field, id)` (a hash seeds a private RNG), so the
//! generator needs no tables beyond the Zipf CDFs and the data is identical
//! on every machine for the same seed. Examples are i.i.d.; their index is
//! their "time", so the split is the generation order.

use super::{DataError, RawData};
use crate::hashing::feature_key_u64;
use crate::rng::{Rng, mix64};

/// Rank of the planted interaction vectors.
const TRUE_RANK: usize = 4;

/// Generator parameters (`Default` = the CLI's embedded data set).
#[derive(Debug, Clone, PartialEq)]
pub struct SynthConfig {
    /// Number of examples. Default 200 000.
    pub examples: usize,
    /// Values per field (one entry per field). Default eight fields:
    /// 200 000, 50 000, 20 000, 10 000, 2 000, 500, 100, 20.
    pub cardinalities: Vec<usize>,
    /// Zipf exponent `s`. Default 1.1.
    pub zipf: f64,
    /// Probability that a label is flipped. Default 0.05.
    pub noise: f64,
    /// Global bias of the planted model. Default −0.5.
    pub bias: f64,
    /// Seed of the planted model and of the sampled examples. Default 1.
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            examples: 200_000,
            cardinalities: vec![200_000, 50_000, 20_000, 10_000, 2_000, 500, 100, 20],
            zipf: 1.1,
            noise: 0.05,
            bias: -0.5,
            seed: 1,
        }
    }
}

impl SynthConfig {
    /// One-line description for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} examples, {} fields {:?}, zipf {}, noise {}, seed {}",
            self.examples,
            self.cardinalities.len(),
            self.cardinalities,
            self.zipf,
            self.noise,
            self.seed
        )
    }
}

/// A planted normal parameter, a pure function of its coordinates.
fn planted(seed: u64, field: usize, id: usize, slot: usize) -> f64 {
    let h = mix64(seed ^ mix64((field as u64) << 40 ^ (id as u64) << 8 ^ slot as u64));
    Rng::new(h).normal()
}

/// Generate the data set.
///
/// Fails with [`DataError::Config`] on zero examples, no fields, a zero
/// cardinality, or a noise rate outside `[0, 0.5)`.
pub fn generate(cfg: &SynthConfig) -> Result<RawData, DataError> {
    if cfg.examples == 0 || cfg.cardinalities.is_empty() || cfg.cardinalities.contains(&0) {
        return Err(DataError::Config(
            "synthetic data needs examples > 0 and fields with cardinality > 0".into(),
        ));
    }
    if !((0.0..0.5).contains(&cfg.noise) && cfg.zipf.is_finite() && cfg.zipf >= 0.0) {
        return Err(DataError::Config(
            "synthetic noise must be in [0, 0.5) and zipf finite and >= 0".into(),
        ));
    }
    let fields = cfg.cardinalities.len();
    let cdfs: Vec<Vec<f64>> = cfg
        .cardinalities
        .iter()
        .map(|&n| {
            let mut acc = 0.0;
            let mut cdf: Vec<f64> = (0..n)
                .map(|r| {
                    acc += 1.0 / ((r + 1) as f64).powf(cfg.zipf);
                    acc
                })
                .collect();
            for c in &mut cdf {
                *c /= acc;
            }
            cdf
        })
        .collect();
    let pairs = (fields * (fields - 1) / 2).max(1) as f64;
    // Var⟨v, v'⟩ = k σ⁴ per pair: total interaction variance 1.
    let sigma_v = (1.0 / (pairs * TRUE_RANK as f64)).powf(0.25);
    let sigma_w = 0.4;
    let names = (0..fields).map(|f| format!("c{f}")).collect();
    let mut raw = RawData::new(names, true);
    let mut rng = Rng::derive(cfg.seed, 0xDA7A);
    let mut ids = vec![0usize; fields];
    let mut feats = Vec::with_capacity(fields);
    let mut vs = vec![[0.0f64; TRUE_RANK]; fields];
    for e in 0..cfg.examples {
        feats.clear();
        for f in 0..fields {
            let u = rng.uniform();
            let cdf = &cdfs[f];
            let rank = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1);
            ids[f] = rank;
            feats.push((feature_key_u64(f as u32, rank as u64), 1.0));
        }
        let mut logit = cfg.bias;
        for f in 0..fields {
            logit += sigma_w * planted(cfg.seed, f, ids[f], 0);
            for (k, v) in vs[f].iter_mut().enumerate() {
                *v = sigma_v * planted(cfg.seed, f, ids[f], k + 1);
            }
        }
        for f in 0..fields {
            for g in f + 1..fields {
                logit += (0..TRUE_RANK).map(|k| vs[f][k] * vs[g][k]).sum::<f64>();
            }
        }
        let p = 1.0 / (1.0 + (-logit).exp());
        let mut y = rng.uniform() < p;
        if rng.uniform() < cfg.noise {
            y = !y;
        }
        raw.push(&feats, f32::from(u8::from(y)), e as i64);
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SynthConfig {
        SynthConfig {
            examples: 2000,
            cardinalities: vec![100, 10, 5],
            ..SynthConfig::default()
        }
    }

    #[test]
    fn same_seed_same_data_other_seed_other_data() {
        let a = generate(&small()).unwrap();
        let b = generate(&small()).unwrap();
        assert_eq!(a.keys, b.keys);
        assert_eq!(a.labels, b.labels);
        let c = generate(&SynthConfig { seed: 2, ..small() }).unwrap();
        assert_ne!(a.labels, c.labels);
    }

    #[test]
    fn zipf_makes_the_first_rank_most_frequent() {
        let raw = generate(&small()).unwrap();
        let top = feature_key_u64(0, 0);
        let rare = feature_key_u64(0, 99);
        let count = |k: u64| raw.keys.iter().filter(|&&x| x == k).count();
        assert!(
            count(top) > 10 * count(rare).max(1),
            "{} vs {}",
            count(top),
            count(rare)
        );
    }

    #[test]
    fn labels_are_mixed_and_bad_configs_are_errors() {
        let raw = generate(&small()).unwrap();
        let pos = raw.labels.iter().filter(|&&l| l == 1.0).count();
        assert!(pos > 200 && pos < 1800, "{pos}");
        let bad = SynthConfig {
            noise: 0.7,
            ..small()
        };
        assert!(matches!(generate(&bad), Err(DataError::Config(_))));
        let bad = SynthConfig {
            cardinalities: vec![],
            ..small()
        };
        assert!(matches!(generate(&bad), Err(DataError::Config(_))));
    }
}
