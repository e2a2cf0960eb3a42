//! The comparison protocol of `basis compare`: each optimizer's learning-rate
//! grid (`--tune-lr auto` or a list), the edge rule, the refinement around
//! every local maximum, and the overall progress line.
//!
//! Why per-optimizer grids: useful rates differ by orders of magnitude
//! between families (SGD's best is 100–10,000× Adam's), so one shared list
//! either misses some optimizer's optimum or wastes runs on hopeless rates.
//! `auto` starts from five points of a half-decade ladder (…, 0.001, 0.003,
//! 0.01, …) centred on the family's default rate.
//!
//! Why every local maximum, not only the best: on deep models the validation
//! AUC over the rate can have two modes (DeepFM, docs/RESULTS.md: row-wise
//! AdaGrad's grid 0.003–0.3 peaked inside at 0.1 while a higher mode sat at
//! 0.0003, below the grid). So, on the coarse ladder, each end of the first
//! grid gets one guard point beyond it, and every *local* maximum at an end
//! of what was tried gets the next ladder point beyond it (at most
//! [`MAX_EXTENSIONS`] per side, guard included, then it warns): a mode
//! beyond an end that is a little below its neighbour is found through the
//! guard (issue 26: BASIS `decay` on DeepFM). Once no end is a local
//! maximum any more, every interior local maximum is refined once with the
//! two log-midpoints to its neighbours (quarter-decade spacing). The chosen
//! rate is the best of everything tried. A given list is used as is, with a
//! warning when the best is at its edge.
use crate::spec::OptSpec;
use core::fmt;
use std::time::Instant;

/// Points of the first `auto` grid.
const AUTO_POINTS: usize = 5;
/// Ladder points `auto` may add beyond each end of its first grid, per optimizer.
pub(crate) const MAX_EXTENSIONS: usize = 4;

/// What `--tune-lr` asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TuneLr {
    /// Per-optimizer grid around the family default, extended at the edges.
    Auto,
    /// These rates for every optimizer.
    List(Vec<f32>),
}

/// A bad `--tune-lr` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TuneError(String);

impl fmt::Display for TuneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for TuneError {}

impl core::str::FromStr for TuneLr {
    type Err = TuneError;

    fn from_str(s: &str) -> Result<Self, TuneError> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        let rates = s
            .split(',')
            .map(|x| match x.trim().parse::<f32>() {
                Ok(lr) if lr.is_finite() && lr > 0.0 => Ok(lr),
                _ => Err(TuneError(format!(
                    "`{x}`: learning rates must be numbers > 0 (or `auto`)"
                ))),
            })
            .collect::<Result<Vec<f32>, _>>()?;
        Ok(Self::List(rates))
    }
}

/// The half-decade ladder point `k`: `1·10^(k/2)` for even `k`, `3·10^…` for odd.
fn ladder(k: i32) -> f32 {
    let decade = 10f64.powi(k.div_euclid(2));
    let m = if k.rem_euclid(2) == 0 { 1.0 } else { 3.0 };
    (m * decade) as f32
}

/// The ladder index nearest to `lr` (on a log scale).
fn ladder_index(lr: f32) -> i32 {
    let x = 2.0 * f64::from(lr).log10();
    // 3 sits at log10(3)·2 ≈ 0.954 half-decades above 1: round in that space.
    let base = x.floor() as i32;
    let candidates = [base - 1, base, base + 1, base + 2];
    candidates
        .into_iter()
        .min_by(|&a, &b| {
            let da = (f64::from(ladder(a)).ln() - f64::from(lr).ln()).abs();
            let db = (f64::from(ladder(b)).ln() - f64::from(lr).ln()).abs();
            da.total_cmp(&db)
        })
        .unwrap_or(base)
}

/// Learning-rate search of one optimizer: proposes rates, takes their
/// validation AUCs, and says when it is done.
#[derive(Debug)]
pub(crate) struct Search {
    /// `auto`: ladder indices tried so far span `lo..=hi`.
    auto: Option<(i32, i32)>,
    /// The given list (`List`).
    list: Vec<f32>,
    /// Rates still to try.
    queue: Vec<f32>,
    /// `(lr, validation AUC)` in the order tried.
    pub(crate) tried: Vec<(f32, f64)>,
    /// Ladder points added below / above the first grid.
    extensions: (usize, usize),
    /// The refinement round has been queued (it runs once).
    refined: bool,
    /// The first grid's ends have had their guard points queued.
    guarded: bool,
}

impl Search {
    /// The search for `spec` under `tune`.
    pub(crate) fn new(tune: &TuneLr, spec: &OptSpec) -> Self {
        let (auto, list, queue) = match tune {
            TuneLr::Auto => {
                let c = ladder_index(spec.default_lr());
                let half = (AUTO_POINTS / 2) as i32;
                let (lo, hi) = (c - half, c + half);
                (Some((lo, hi)), Vec::new(), (lo..=hi).map(ladder).collect())
            }
            TuneLr::List(l) => (None, l.clone(), l.clone()),
        };
        Self {
            auto,
            list,
            queue,
            tried: Vec::new(),
            extensions: (0, 0),
            refined: false,
            guarded: false,
        }
    }

    /// Runs still known to be needed (more may follow an extension or a
    /// refinement).
    pub(crate) fn pending(&self) -> usize {
        self.queue.len()
    }

    /// The next rate to try, or `None` when the search is over.
    pub(crate) fn next(&mut self) -> Option<f32> {
        if self.queue.is_empty() {
            self.extend();
        }
        if self.queue.is_empty() {
            None
        } else {
            Some(self.queue.remove(0))
        }
    }

    /// Records the validation AUC of `lr`.
    pub(crate) fn record(&mut self, lr: f32, valid_auc: f64) {
        self.tried.push((lr, valid_auc));
    }

    /// The best `(lr, validation AUC)` so far (the first of equals).
    pub(crate) fn best(&self) -> Option<(f32, f64)> {
        self.tried
            .iter()
            .copied()
            .fold(None, |b: Option<(f32, f64)>, (lr, v)| match b {
                Some((_, bv)) if bv >= v => b,
                _ => Some((lr, v)),
            })
    }

    /// The validation AUC recorded for `lr` (the first, if tried twice).
    fn value(&self, lr: f32) -> Option<f64> {
        self.tried.iter().find(|t| t.0 == lr).map(|t| t.1)
    }

    /// `auto` only: queue the next rates, or nothing when the search is over.
    /// First the ends of the ladder span that are local maxima extend
    /// outwards (one ladder point per side and call); when neither does,
    /// the interior local maxima of everything tried are refined, once.
    fn extend(&mut self) {
        let Some((lo, hi)) = self.auto else {
            return;
        };
        let coarse: Vec<(f32, f64)> = (lo..=hi)
            .filter_map(|k| self.value(ladder(k)).map(|v| (ladder(k), v)))
            .collect();
        let maxima = local_maxima(&coarse);
        let (mut new_lo, mut new_hi) = (lo, hi);
        // Every end gets one ladder point beyond it even when it is not a
        // local maximum (the guard): a higher mode can sit beyond an end that
        // is a little below its neighbour (BASIS `decay` on DeepFM: 0.003
        // was 0.0009 below 0.01, the best rates were 3e-4..5.5e-4).
        let unguarded = self.extensions == (0, 0) && !self.guarded;
        self.guarded = true;
        if (maxima.contains(&0) || unguarded) && self.extensions.0 < MAX_EXTENSIONS {
            new_lo -= 1;
            self.extensions.0 += 1;
            self.queue.push(ladder(new_lo));
        }
        if coarse.len() > 1
            && (maxima.contains(&(coarse.len() - 1)) || unguarded)
            && self.extensions.1 < MAX_EXTENSIONS
        {
            new_hi += 1;
            self.extensions.1 += 1;
            self.queue.push(ladder(new_hi));
        }
        self.auto = Some((new_lo, new_hi));
        if !self.queue.is_empty() || self.refined {
            return;
        }
        self.refined = true;
        let mut all = self.tried.clone();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all.dedup_by(|a, b| a.0 == b.0);
        for i in local_maxima(&all) {
            for j in [i.wrapping_sub(1), i + 1] {
                if let Some(&(n, _)) = all.get(j) {
                    let mid = (f64::from(all[i].0) * f64::from(n)).sqrt() as f32;
                    if self.value(mid).is_none() && !self.queue.contains(&mid) {
                        self.queue.push(mid);
                    }
                }
            }
        }
    }

    /// Whether the chosen rate is the smallest or largest one tried (its
    /// optimum may lie outside the grid).
    pub(crate) fn at_edge(&self) -> bool {
        let Some((best, _)) = self.best() else {
            return false;
        };
        let rates: Vec<f32> = if self.auto.is_some() {
            self.tried.iter().map(|t| t.0).collect()
        } else {
            self.list.clone()
        };
        let min = rates.iter().copied().fold(f32::INFINITY, f32::min);
        let max = rates.iter().copied().fold(0.0, f32::max);
        rates.len() > 1 && (best == min || best == max)
    }
}

/// Indices of the local maxima of `points` (sorted by rate): a point at
/// least as high as each neighbour and higher than one of them (a flat
/// curve has none; an end has one neighbour).
fn local_maxima(points: &[(f32, f64)]) -> Vec<usize> {
    (0..points.len())
        .filter(|&i| {
            let v = points[i].1;
            let nb: Vec<f64> = [i.checked_sub(1), Some(i + 1)]
                .into_iter()
                .flatten()
                .filter_map(|j| points.get(j).map(|p| p.1))
                .collect();
            !nb.is_empty() && nb.iter().all(|&n| v >= n) && nb.iter().any(|&n| v > n)
        })
        .collect()
}

/// The overall progress line: run `i` of `N` (N grows when a grid extends),
/// optimizer, rate, seed, elapsed time and an ETA from the mean run time.
#[derive(Debug)]
pub(crate) struct Progress {
    start: Instant,
    done: usize,
    show: bool,
}

fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

impl Progress {
    /// A progress line printer (silent when `show` is false).
    pub(crate) fn new(show: bool) -> Self {
        Self {
            start: Instant::now(),
            done: 0,
            show,
        }
    }

    /// Announces the next run; `total` is the runs known so far, this one included.
    pub(crate) fn begin(&self, total: usize, label: &str, lr: f32, seed: u64, what: &str) {
        if !self.show {
            return;
        }
        let elapsed = self.start.elapsed().as_secs_f64();
        let eta = if self.done == 0 {
            "?".to_string()
        } else {
            clock(elapsed / self.done as f64 * (total - self.done) as f64)
        };
        eprintln!(
            "run {}/{total} · {label} · lr {lr} · seed {seed} ({what}) · elapsed {} · ETA {eta}",
            self.done + 1,
            clock(elapsed)
        );
    }

    /// Marks the announced run as done.
    pub(crate) fn end(&mut self) {
        self.done += 1;
    }

    /// Runs done.
    pub(crate) fn done(&self) -> usize {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_is_one_three_half_decades_and_indexes_round_trip() {
        assert_eq!(
            (-6..=2).map(ladder).collect::<Vec<_>>(),
            [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
        );
        for k in -10..10 {
            assert_eq!(ladder_index(ladder(k)), k);
        }
    }

    fn spec(s: &str) -> OptSpec {
        s.parse().unwrap()
    }

    #[test]
    fn auto_grids_are_per_optimizer_and_sgd_sits_far_above_adam() {
        let first = |s: &str| {
            let mut q = Search::new(&TuneLr::Auto, &spec(s));
            let mut v = Vec::new();
            while let Some(lr) = q.next() {
                v.push(lr);
                q.record(lr, 0.5 + v.len() as f64 * 0.0); // flat: no extension past the first grid
                if v.len() == AUTO_POINTS {
                    break;
                }
            }
            v
        };
        assert_eq!(first("adam"), [0.0001, 0.0003, 0.001, 0.003, 0.01]);
        assert_eq!(first("sgd"), [0.3, 1.0, 3.0, 10.0, 30.0]);
        assert_eq!(first("basis"), [0.003, 0.01, 0.03, 0.1, 0.3]);
        assert_eq!(first("basis:lead=0"), [0.001, 0.003, 0.01, 0.03, 0.1]);
    }

    /// Drives a search whose validation AUC peaks at `peak`.
    fn drive(tune: &TuneLr, peak: f32) -> Search {
        let mut q = Search::new(tune, &spec("adam"));
        while let Some(lr) = q.next() {
            let v = -(f64::from(lr).ln() - f64::from(peak).ln()).abs();
            q.record(lr, v);
        }
        q
    }

    #[test]
    fn auto_extends_until_the_best_is_inside_and_lists_only_warn() {
        // Adam's grid is 1e-4..1e-2; a peak at 0.1 needs two extensions, then
        // 0.3 shows it is inside; the refinement adds its two log-midpoints;
        // the lower end's guard (3e-5) is tried once.
        let q = drive(&TuneLr::Auto, 0.1);
        assert_eq!(q.best().unwrap().0, 0.1);
        assert_eq!(q.tried.len(), AUTO_POINTS + 1 + 3 + 2);
        assert!(!q.at_edge());
        // An interior peak: the first grid, its two guards and the refinement.
        let q = drive(&TuneLr::Auto, 0.001);
        assert_eq!((q.tried.len(), q.at_edge()), (AUTO_POINTS + 2 + 2, false));
        let guards: Vec<f32> = q.tried[AUTO_POINTS..AUTO_POINTS + 2]
            .iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(guards, [ladder(-9), ladder(-3)]);
        let mids: Vec<f64> = q.tried[AUTO_POINTS + 2..]
            .iter()
            .map(|t| f64::from(t.0))
            .collect();
        let want = [(3e-4f64 * 1e-3).sqrt(), (1e-3f64 * 3e-3).sqrt()];
        assert!(
            mids.iter()
                .zip(want)
                .all(|(m, w)| (m / w - 1.0).abs() < 1e-6),
            "{mids:?}"
        );
        // Beyond the extension budget: stops (the low guard, one inner
        // midpoint) and says so.
        let q = drive(&TuneLr::Auto, 1e4);
        assert_eq!(q.tried.len(), AUTO_POINTS + 1 + MAX_EXTENSIONS + 1);
        assert!(q.at_edge());
        // A list is neither extended nor refined; its edge is reported.
        let q = drive(&TuneLr::List(vec![0.001, 0.01]), 0.1);
        assert_eq!(
            (q.tried.len(), q.best().unwrap().0, q.at_edge()),
            (2, 0.01, true)
        );
    }

    /// Runs `auto` for `spec` against a fake evaluator; returns the search.
    fn drive_with(spec_text: &str, eval: impl Fn(f32) -> f64) -> Search {
        let mut q = Search::new(&TuneLr::Auto, &spec(spec_text));
        while let Some(lr) = q.next() {
            q.record(lr, eval(lr));
            assert!(q.tried.len() < 40, "the search must end");
        }
        q
    }

    /// The global best of the first `auto` grid (what a search that only
    /// extends at the edges and never refines would have kept from it).
    fn coarse_best(q: &Search) -> f32 {
        let first = &q.tried[..AUTO_POINTS];
        first
            .iter()
            .fold(first[0], |b, &t| if t.1 > b.1 { t } else { b })
            .0
    }

    #[test]
    fn a_narrow_mode_between_ladder_points_beats_the_coarse_best() {
        // Two modes over log10(lr): a broad one peaking on the ladder at
        // 0.003 (0.70) and a narrow, higher one at 4.5e-4 (0.72), between the
        // ladder points 3e-4 and 1e-3, with a valley (0.5) at 1e-3. Adam's
        // coarse grid 1e-4..1e-2 sees 0.70 at 0.003 as its best; 3e-4 (0.658)
        // is a lesser local maximum, and its refinement finds the higher mode.
        let eval = |lr: f32| {
            let x = f64::from(lr).log10();
            let broad = 0.70 - (x - 0.003f64.log10()).powi(2);
            let sharp = 0.72 - 2.0 * (x - 0.00045f64.log10()).powi(2);
            broad.max(sharp).max(0.5)
        };
        let q = drive_with("adam", eval);
        assert_eq!(coarse_best(&q), 0.003, "the coarse grid is fooled");
        let (lr, v) = q.best().unwrap();
        let mid = (0.0003f64 * 0.001).sqrt();
        assert!((f64::from(lr) / mid - 1.0).abs() < 1e-6, "{lr}");
        assert!(v > 0.70, "{v}");
        assert!(!q.at_edge());
    }

    /// The validation AUC at `lr` on a measured `curve` of `(rate, AUC)`
    /// points sorted by rate, interpolated linearly in log(rate) and held
    /// flat beyond its ends.
    fn log_interpolated(curve: &[(f64, f64)], lr: f32) -> f64 {
        let x = f64::from(lr).ln();
        let k = curve
            .windows(2)
            .position(|w| x <= w[1].0.ln())
            .unwrap_or(curve.len() - 2);
        let ((a, va), (b, vb)) = (curve[k], curve[k + 1]);
        let t = ((x - a.ln()) / (b.ln() - a.ln())).clamp(0.0, 1.0);
        va + t * (vb - va)
    }

    #[test]
    fn a_mode_below_the_grid_is_reached_through_a_local_maximum_at_its_end() {
        // Row-wise BASIS on DeepFM, the validation AUCs measured in
        // docs/RESULTS.md (rates 1e-4..0.3), interpolated linearly in log(lr)
        // between them: the `auto` grid 0.003..0.3 peaks inside at 0.1, but
        // its lower end 0.003 is a local maximum too; following it down finds
        // the higher mode at 3e-4.
        const CURVE: [(f64, f64); 8] = [
            (0.0001, 0.6601),
            (0.0003, 0.6740),
            (0.001, 0.6590),
            (0.003, 0.6311),
            (0.01, 0.6261),
            (0.03, 0.6321),
            (0.1, 0.6482),
            (0.3, 0.6213),
        ];
        let q = drive_with("basis", |lr| log_interpolated(&CURVE, lr));
        assert_eq!(coarse_best(&q), 0.1, "the coarse grid is fooled");
        assert_eq!(q.best().unwrap().0, 0.0003);
        assert!(!q.at_edge());
        // Both modes were refined: a midpoint beside 0.1 was tried too.
        assert!(
            q.tried.iter().any(|t| t.0 > 0.1 && t.0 < 0.3),
            "{:?}",
            q.tried
        );
    }

    #[test]
    fn a_mode_beyond_an_end_that_is_not_a_local_maximum_is_found_by_the_guard() {
        // BASIS `accumulate=decay` on DeepFM (docs/BASIS.md): the `auto` grid
        // 0.003..0.3 peaks at 0.01, and its lower end 0.003 is a little below
        // it (not a local maximum), while the best rates lie lower, around
        // 3e-4. Without the guard at 0.001 the search stops at 0.01.
        const CURVE: [(f64, f64); 7] = [
            (0.0001, 0.6690),
            (0.0003, 0.6720),
            (0.001, 0.6680),
            (0.003, 0.6641),
            (0.01, 0.6650),
            (0.03, 0.6640),
            (0.3, 0.6500),
        ];
        let q = drive_with("basis", |lr| log_interpolated(&CURVE, lr));
        assert_eq!(coarse_best(&q), 0.01, "the coarse grid is fooled");
        assert_eq!(q.best().unwrap().0, 0.0003, "{:?}", q.tried);
        assert!(!q.at_edge());
    }

    #[test]
    fn tune_values_parse_and_nonsense_is_refused() {
        assert_eq!("auto".parse::<TuneLr>().unwrap(), TuneLr::Auto);
        assert_eq!(
            "0.1,1".parse::<TuneLr>().unwrap(),
            TuneLr::List(vec![0.1, 1.0])
        );
        for bad in ["", "0", "-1", "a,b", "0.1,,1", "inf"] {
            assert!(bad.parse::<TuneLr>().is_err(), "{bad}");
        }
    }
}
