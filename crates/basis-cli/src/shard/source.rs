//! Where a sharded rank's examples come from: a materialised [`Examples`]
//! split (row ids are the loader's vocabulary rows), or the `criteo-synth`
//! stream ([`CriteoSynth::example`], row ids are the feature keys), which
//! each rank generates for its own share of each batch on the fly, so the
//! training set is never held anywhere.
//!
//! The trainer asks a source for a [`Share`]: the examples at some positions
//! with their features' **u64 ids** (what the owners are keyed by) beside
//! the values, fields, labels and dense features, and renumbers the ids to
//! positions in the batch's sorted unique ids ([`Share::local`]).

use crate::data::Examples;
use crate::data::criteo_synth::{CriteoSynth, SynthExample};
use crate::hashing::field_of;

pub(crate) use crate::data::criteo_synth::{TEST_FIRST, VALID_FIRST};

/// A source of examples, addressed by position `0..len()`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    /// A loaded split.
    Memory(&'a Examples),
    /// Examples `first + i` of the generator, `i < len`.
    Stream {
        /// The generator (a pure function of `(seed, index)`).
        generator: &'a CriteoSynth,
        /// Stream index of position 0.
        first: u64,
        /// Number of positions.
        len: usize,
    },
}

/// Examples at some positions, with the u64 id of every feature.
#[derive(Debug, Clone, Default)]
pub(crate) struct Share {
    /// Per feature, the row id the owners know it by.
    pub(crate) ids: Vec<u64>,
    /// The examples; `rows` is left empty (see [`Share::local`]).
    pub(crate) ex: Examples,
}

impl Source<'_> {
    /// Number of examples.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Memory(ex) => ex.len(),
            Self::Stream { len, .. } => *len,
        }
    }

    /// Whether the order of the examples is worth shuffling (a stream's
    /// examples are i.i.d. already, and shuffling would need an `n`-long
    /// permutation in memory).
    pub(crate) fn shuffled(&self) -> bool {
        matches!(self, Self::Memory(_))
    }

    /// The examples at `positions`, in that order.
    pub(crate) fn share(&self, positions: &[usize]) -> Share {
        let mut out = Share {
            ex: Examples {
                offsets: vec![0],
                ..Examples::default()
            },
            ..Share::default()
        };
        let o = &mut out.ex;
        match self {
            Self::Memory(ex) => {
                o.dense_width = ex.dense_width;
                for &e in positions {
                    let (rows, values) = ex.features(e);
                    out.ids.extend(rows.iter().map(|&r| u64::from(r)));
                    o.values.extend_from_slice(values);
                    o.fields
                        .extend_from_slice(&ex.fields[ex.offsets[e]..ex.offsets[e + 1]]);
                    o.offsets.push(o.values.len());
                    o.labels.push(ex.labels[e]);
                    let w = ex.dense_width;
                    o.dense.extend_from_slice(&ex.dense[e * w..(e + 1) * w]);
                }
            }
            Self::Stream {
                generator, first, ..
            } => {
                let mut s = SynthExample::default();
                o.dense_width = s.dense.len();
                for &e in positions {
                    generator.example(first + e as u64, &mut s);
                    for &(key, v) in &s.feats {
                        out.ids.push(key);
                        o.values.push(v);
                        o.fields.push(field_of(key));
                    }
                    o.offsets.push(o.values.len());
                    o.labels.push(s.label);
                    o.dense.extend_from_slice(&s.dense);
                }
            }
        }
        out
    }
}

impl Share {
    /// The examples with rows renumbered to positions in the sorted `uniq`
    /// (which holds every id of the share).
    pub(crate) fn local(&self, uniq: &[u64]) -> Examples {
        let mut ex = self.ex.clone();
        ex.rows = self
            .ids
            .iter()
            .map(|id| uniq.binary_search(id).unwrap_or(0) as u32)
            .collect();
        ex
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::data::criteo_synth::CriteoSynthConfig;
    use clap::Parser;
    use std::collections::HashSet;

    #[test]
    fn a_stream_share_is_the_generator_examples_and_local_renumbers() {
        let g = CriteoSynth::new(&CriteoSynthConfig::default()).unwrap();
        let src = Source::Stream {
            generator: &g,
            first: TEST_FIRST,
            len: 10,
        };
        let positions = [7, 0, 3, 7];
        let sh = src.share(&positions);
        let mut at = 0;
        let mut ex = SynthExample::default();
        for (k, &e) in positions.iter().enumerate() {
            g.example(TEST_FIRST + e as u64, &mut ex);
            let (a, b) = (sh.ex.offsets[k], sh.ex.offsets[k + 1]);
            assert_eq!(a, at);
            let keys: Vec<u64> = ex.feats.iter().map(|f| f.0).collect();
            assert_eq!(sh.ids[a..b], keys[..]);
            assert_eq!(sh.ex.labels[k], ex.label);
            assert_eq!(sh.ex.dense[k * 13..(k + 1) * 13], ex.dense[..]);
            at = b;
        }
        // Renumbering against a linear search in the sorted unique ids.
        let mut uniq: Vec<u64> = sh.ids.clone();
        uniq.sort_unstable();
        uniq.dedup();
        let local = sh.local(&uniq);
        for (r, id) in local.rows.iter().zip(&sh.ids) {
            assert_eq!(uniq.iter().position(|u| u == id), Some(*r as usize));
        }
    }

    fn streamed(extra: &[&str]) -> (crate::run::RunResult, usize) {
        let mut argv = vec![
            "basis",
            "train",
            "--format",
            "criteo-synth",
            "--stream",
            "--synthetic-examples",
            "6000",
            "--synthetic-ids",
            "200000",
            "--opt",
            "adam",
            "--epochs",
            "1",
            "--batch",
            "512",
            "--workers",
            "2",
            "--shard",
            "rows",
        ];
        argv.extend_from_slice(extra);
        let Command::Train(a) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("a train command")
        };
        let ds = crate::data::load(&a.data.options(false)).unwrap();
        let run = crate::run::Run {
            spec: &a.opt,
            model: &a.model,
            checkpoint: None,
            resume: false,
            progress: false,
        };
        let test = ds.stream.as_ref().unwrap().test;
        (super::super::train(&ds, &run).unwrap(), test)
    }

    #[test]
    fn a_streamed_run_touches_exactly_the_stream_rows_and_repeats_bit_for_bit() {
        let (a, test) = streamed(&[]);
        let (b, _) = streamed(&[]);
        assert_eq!(a.model_crc32, b.model_crc32);
        // The slow reference: every distinct key of training examples
        // 0..6000 — not of the held-out slice: evaluation reads rows (an
        // unseen key gets its initial row) and creates none.
        let g = CriteoSynth::new(&CriteoSynthConfig {
            ids: 200_000,
            ..CriteoSynthConfig::default()
        })
        .unwrap();
        let mut ex = SynthExample::default();
        let mut keys = HashSet::new();
        assert!(test > 0);
        for i in 0..6000 {
            g.example(i, &mut ex);
            keys.extend(ex.feats.iter().map(|f| f.0));
        }
        let mut unseen = 0;
        for i in TEST_FIRST..TEST_FIRST + test as u64 {
            g.example(i, &mut ex);
            unseen += ex.feats.iter().filter(|f| !keys.contains(&f.0)).count();
        }
        assert!(unseen > 0, "the check needs keys seen only in evaluation");
        let shard = a.sharded.as_ref().unwrap();
        assert_eq!(shard.rows, keys.len() as u64);
        assert!(shard.examples_per_sec > 0.0);
        // It learns: both held-out slices score well above chance (the
        // validation slice is real: 600 examples, not the empty 0.5).
        let f = &a.final_metrics;
        assert!(f.test_auc > 0.6, "{}", f.test_auc);
        assert!(f.valid_auc > 0.6, "{}", f.valid_auc);
        assert_ne!(f.valid_auc.to_bits(), f.test_auc.to_bits());
    }

    #[test]
    fn a_stream_has_disjoint_held_out_validation_and_test_slices() {
        use crate::data::criteo_synth::stream_dataset;
        let cfg = CriteoSynthConfig {
            examples: 5000,
            ids: 100_000,
            stream: true,
            ..CriteoSynthConfig::default()
        };
        let ds = stream_dataset(&cfg, 0.1, 0.2).unwrap();
        assert_eq!(ds.split_lens(), [5000, 500, 1000]);
        let (train, valid, test) = super::super::sources(&ds);
        let range = |s: &Source<'_>| match s {
            Source::Stream { first, len, .. } => *first..*first + *len as u64,
            Source::Memory(_) => unreachable!("a stream"),
        };
        let (a, v, t) = (range(&train), range(&valid), range(&test));
        assert_eq!(
            (a.start, a.end, v.start, t.start),
            (0, 5000, VALID_FIRST, TEST_FIRST)
        );
        assert!(a.end <= t.start && t.end <= v.start, "{a:?} {t:?} {v:?}");
        // Validation position j is generator example VALID_FIRST + j.
        let g = CriteoSynth::new(&cfg).unwrap();
        let sh = valid.share(&[0, 499]);
        let mut ex = SynthExample::default();
        for (k, j) in [0u64, 499].into_iter().enumerate() {
            g.example(VALID_FIRST + j, &mut ex);
            let keys: Vec<u64> = ex.feats.iter().map(|f| f.0).collect();
            assert_eq!(sh.ids[sh.ex.offsets[k]..sh.ex.offsets[k + 1]], keys[..]);
            assert_eq!(sh.ex.labels[k], ex.label);
        }
        // The data line's positive rate: the first 5000 training examples'
        // (the pilot reads min(n, 2^17)), counted here one by one.
        let pos = (0..5000)
            .filter(|&i| {
                g.example(i, &mut ex);
                ex.label > 0.5
            })
            .count();
        let rate = ds.train_positive_rate();
        assert_eq!(rate, pos as f64 / 5000.0);
        assert!(rate > 0.0 && rate < 1.0, "{rate}");
        let line = crate::compare::describe(&ds);
        assert!(line.contains("train/valid/test = 5000/500/1000"), "{line}");
        assert!(line.contains(&format!("positive rate {rate:.3}")), "{line}");
        // No validation slice when asked for none; a stream longer than
        // the held-out offset is refused, not silently overlapped.
        assert_eq!(stream_dataset(&cfg, 0.0, 0.2).unwrap().split_lens()[1], 0);
        let big = CriteoSynthConfig {
            examples: (1usize << 40) + 1,
            ..cfg
        };
        let e = stream_dataset(&big, 0.1, 0.1).unwrap_err().to_string();
        assert!(e.contains("2^40"), "{e}");
    }
}
