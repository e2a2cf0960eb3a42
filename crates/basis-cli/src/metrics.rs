//! Evaluation metrics: ROC AUC (ties averaged) and mean log-loss.

/// Area under the ROC curve of `scores` against 0/1 `labels`
/// (Mann–Whitney U with tied scores given their average rank).
/// `None` when one class is missing.
pub(crate) fn auc(scores: &[f32], labels: &[f32]) -> Option<f64> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut rank_sum, mut pos) = (0.0f64, 0u64);
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean.
        let mean_rank = (i + j + 2) as f64 / 2.0;
        for &k in &idx[i..=j] {
            if labels[k] > 0.5 {
                rank_sum += mean_rank;
                pos += 1;
            }
        }
        i = j + 1;
    }
    let neg = scores.len() as u64 - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let (p, n) = (pos as f64, neg as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// Mean binary cross-entropy of logits against 0/1 labels (numerically stable form).
pub(crate) fn log_loss(logits: &[f32], labels: &[f32]) -> f64 {
    if logits.is_empty() {
        return 0.0;
    }
    let sum: f64 = logits
        .iter()
        .zip(labels)
        .map(|(&z, &y)| {
            let z = f64::from(z);
            // log(1 + e^z) - y z
            z.max(0.0) + (-z.abs()).exp().ln_1p() - f64::from(y) * z
        })
        .sum();
    sum / logits.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: fraction of (positive, negative) pairs ordered right, ties half.
    fn auc_pairs(s: &[f32], y: &[f32]) -> f64 {
        let (mut good, mut total) = (0.0, 0.0);
        for i in 0..s.len() {
            for j in 0..s.len() {
                if y[i] > 0.5 && y[j] < 0.5 {
                    total += 1.0;
                    if s[i] > s[j] {
                        good += 1.0;
                    } else if s[i] == s[j] {
                        good += 0.5;
                    }
                }
            }
        }
        good / total
    }

    #[test]
    fn auc_matches_pair_counting_with_ties() {
        let mut rng = crate::rng::Rng::new(5);
        for _ in 0..50 {
            let n = 2 + rng.below(40);
            let s: Vec<f32> = (0..n).map(|_| rng.below(5) as f32).collect();
            let mut y: Vec<f32> = (0..n).map(|_| rng.below(2) as f32).collect();
            y[0] = 0.0;
            y[1] = 1.0;
            let fast = auc(&s, &y).unwrap();
            assert!((fast - auc_pairs(&s, &y)).abs() < 1e-12);
        }
        assert_eq!(auc(&[0.1, 0.2], &[1.0, 1.0]), None);
    }

    #[test]
    fn log_loss_matches_the_naive_formula() {
        let z = [-3.0f32, 0.0, 2.5];
        let y = [0.0f32, 1.0, 1.0];
        let naive: f64 = z
            .iter()
            .zip(&y)
            .map(|(&z, &y)| {
                let p = 1.0 / (1.0 + (-f64::from(z)).exp());
                -(f64::from(y) * p.ln() + (1.0 - f64::from(y)) * (1.0 - p).ln())
            })
            .sum::<f64>()
            / 3.0;
        assert!((log_loss(&z, &y) - naive).abs() < 1e-12);
    }
}
