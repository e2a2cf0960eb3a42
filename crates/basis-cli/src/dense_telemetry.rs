//! Per-group telemetry of the dense 1-bit Adam for `--json`
//! (`dense_groups`): what each `--dense-policy` group sent and how its
//! error feedback behaved, folded from every step's
//! [`onebit_adam::StepReport::groups`] on this rank.

use onebit_adam::StepReport;

/// One dense group over a run (this rank).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub(crate) struct DenseGroup {
    /// `1bit`, `2bit`, `bf16` or `full`.
    pub(crate) policy: &'static str,
    /// Bytes this rank sent for the group over the run.
    pub(crate) bytes_sent: u64,
    /// Steps in which the group was compressed.
    pub(crate) compressed_steps: u64,
    /// Bytes of the group's last step (a compressed step once the warm-up
    /// is over: the per-step cost that the policy sets).
    pub(crate) last_step_bytes: u64,
    /// `‖e_w‖₂`, `‖e_s‖₂` after the last step.
    pub(crate) worker_error_norm: f32,
    /// See `worker_error_norm`.
    pub(crate) server_error_norm: f32,
    /// The last step's worker and server scales.
    pub(crate) worker_scale: f32,
    /// See `worker_scale`.
    pub(crate) server_scale: f32,
    /// Mean fraction of coordinates whose momentum sign flipped per step,
    /// over the compressed steps (0 when none).
    pub(crate) mean_sign_flips: f64,
}

/// The groups of one run, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct DenseGroups(pub(crate) Vec<DenseGroup>);

impl DenseGroups {
    /// Fold one step's report in.
    pub(crate) fn observe(&mut self, report: &StepReport) {
        if self.0.len() != report.groups.len() {
            self.0 = report
                .groups
                .iter()
                .map(|g| DenseGroup {
                    policy: g.policy.name(),
                    ..DenseGroup::default()
                })
                .collect();
        }
        for (acc, g) in self.0.iter_mut().zip(&report.groups) {
            acc.bytes_sent += g.bytes.bytes_sent;
            acc.last_step_bytes = g.bytes.bytes_sent;
            acc.worker_scale = g.worker_scale;
            acc.server_scale = g.server_scale;
            if let Some(n) = g.error_norms {
                acc.worker_error_norm = n.worker;
                acc.server_error_norm = n.server;
            }
            if g.compressed {
                acc.compressed_steps += 1;
                let k = acc.compressed_steps as f64;
                let f = g.sign_flips.unwrap_or(0.0);
                acc.mean_sign_flips += (f - acc.mean_sign_flips) / k;
            }
        }
    }
}

/// The progress-line field of one step: per group `policy e=‖e_w‖
/// f=flips% bytes`, groups separated by ` | ` (`-` for a value the step
/// did not produce).
pub(crate) fn progress_field(report: &StepReport) -> String {
    let mut out = String::new();
    for (i, g) in report.groups.iter().enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        let e = g
            .error_norms
            .map_or_else(|| "-".into(), |n| format!("{:.3}", n.worker));
        let f = g
            .sign_flips
            .map_or_else(|| "-".into(), |f| format!("{:.0}%", 100.0 * f));
        out.push_str(&format!(
            "{} e={e} f={f} {}B",
            g.policy.name(),
            g.bytes.bytes_sent
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{DenseGroups, progress_field};
    use onebit_adam::comm_traits::SingleRank;
    use onebit_adam::{Config, Grade, GroupSpec, OneBitAdam, Policy};

    /// The fold against the reports it saw: byte sums, last values, the
    /// mean of the compressed steps' flip fractions.
    #[test]
    fn folds_the_step_reports() {
        let specs = [
            GroupSpec::one_bit(6).with_policy(Policy::Graded(Grade::TwoBit)),
            GroupSpec::full_precision(3),
        ];
        let config = Config::default().with_freeze_step(2).with_telemetry(true);
        let mut opt = OneBitAdam::with_groups(&specs, config).unwrap();
        let mut comm = SingleRank::default();
        let mut x = [0.5f32; 9];
        let mut folded = DenseGroups::default();
        let mut reports = Vec::new();
        for t in 0..5 {
            let g: Vec<f32> = (0..9).map(|i| ((i * 7 + t * 3) % 5) as f32 - 2.0).collect();
            let r = opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
            folded.observe(&r);
            reports.push(r);
        }
        let g0 = &folded.0[0];
        assert_eq!((g0.policy, folded.0[1].policy), ("2bit", "full"));
        assert_eq!(g0.compressed_steps, 3);
        let flips: Vec<f64> = reports[2..]
            .iter()
            .map(|r| r.groups[0].sign_flips.unwrap())
            .collect();
        let mean = flips.iter().sum::<f64>() / 3.0;
        assert!((g0.mean_sign_flips - mean).abs() < 1e-12);
        let last = reports[4].groups[0];
        assert_eq!(g0.worker_scale, last.worker_scale);
        assert_eq!(g0.worker_error_norm, last.error_norms.unwrap().worker);
        assert!(g0.worker_scale > 0.0);
        let line = progress_field(&reports[4]);
        let n = last.error_norms.unwrap().worker;
        let f = 100.0 * last.sign_flips.unwrap();
        let want = format!("2bit e={n:.3} f={f:.0}% 0B | full e=0.000 f=");
        assert!(line.starts_with(&want), "{line} vs {want}");
    }
}
