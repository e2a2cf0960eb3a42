//! The comparison protocol of `basis compare`: each optimizer's learning-rate
//! grid (`--tune-lr auto` or a list), the edge rule, and the overall progress
//! line.
//!
//! Why per-optimizer grids: useful rates differ by orders of magnitude
//! between families (SGD's best is 100–10,000× Adam's), so one shared list
//! either misses some optimizer's optimum or wastes runs on hopeless rates.
//! `auto` starts from five points of a half-decade ladder (…, 0.001, 0.003,
//! 0.01, …) centred on the family's default rate and, when the best
//! validation AUC sits at an end of what was tried, tries the next ladder
//! point beyond it, until the best is inside (at most [`MAX_EXTENSIONS`]
//! times, then it warns). A given list is used as is, with a warning when the
//! best is at its edge.

use crate::spec::OptSpec;
use core::fmt;
use std::time::Instant;

/// Points of the first `auto` grid.
const AUTO_POINTS: usize = 5;
/// Ladder points `auto` may add beyond its first grid, per optimizer.
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
    extensions: usize,
}

impl Search {
    /// The search for `spec` under `tune`.
    pub(crate) fn new(tune: &TuneLr, spec: &OptSpec) -> Self {
        match tune {
            TuneLr::Auto => {
                let c = ladder_index(spec.default_lr());
                let half = (AUTO_POINTS / 2) as i32;
                let (lo, hi) = (c - half, c + half);
                Self {
                    auto: Some((lo, hi)),
                    list: Vec::new(),
                    queue: (lo..=hi).map(ladder).collect(),
                    tried: Vec::new(),
                    extensions: 0,
                }
            }
            TuneLr::List(l) => Self {
                auto: None,
                list: l.clone(),
                queue: l.clone(),
                tried: Vec::new(),
                extensions: 0,
            },
        }
    }

    /// Runs still known to be needed (more may follow an extension).
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

    fn extend(&mut self) {
        let (Some((lo, hi)), Some((best, _))) = (self.auto, self.best()) else {
            return;
        };
        if self.extensions >= MAX_EXTENSIONS {
            return;
        }
        if best == ladder(lo) {
            self.auto = Some((lo - 1, hi));
            self.queue.push(ladder(lo - 1));
        } else if best == ladder(hi) {
            self.auto = Some((lo, hi + 1));
            self.queue.push(ladder(hi + 1));
        } else {
            return;
        }
        self.extensions += 1;
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
        // Adam's grid is 1e-4..1e-2; a peak at 0.1 needs two extensions, then 0.3 shows it is inside.
        let q = drive(&TuneLr::Auto, 0.1);
        assert_eq!(q.best().unwrap().0, 0.1);
        assert_eq!(q.tried.len(), AUTO_POINTS + 3);
        assert!(!q.at_edge());
        // An interior peak: the first grid only.
        let q = drive(&TuneLr::Auto, 0.001);
        assert_eq!((q.tried.len(), q.at_edge()), (AUTO_POINTS, false));
        // Beyond the extension budget: stops and says so.
        let q = drive(&TuneLr::Auto, 1e4);
        assert_eq!(q.tried.len(), AUTO_POINTS + MAX_EXTENSIONS);
        assert!(q.at_edge());
        // A list is not extended; its edge is reported.
        let q = drive(&TuneLr::List(vec![0.001, 0.01]), 0.1);
        assert_eq!(
            (q.tried.len(), q.best().unwrap().0, q.at_edge()),
            (2, 0.01, true)
        );
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
