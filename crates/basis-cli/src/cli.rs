//! Command-line arguments (clap derive).

use crate::data::criteo_synth::CriteoSynthConfig;
use crate::data::{Format, LoadOptions, synthetic::SynthConfig};
use crate::deep::{DenseOpt, DensePolicy, DenseWarmup, ModelKind};
use crate::dense_opt::{DenseGroups, DenseOverlap, DenseWarmupReduce};
use crate::spec::OptSpec;
use crate::validate;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Train and compare sparse-embedding optimizers (BASIS, Adam, row-wise
/// AdaGrad, count-sketch, SGD) on a factorization machine.
#[derive(Debug, Parser)]
#[command(name = "basis", version, about, long_about = None)]
pub(crate) struct Cli {
    /// No progress bars (for scripts); results are still printed.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Train one optimizer and report per-epoch metrics.
    Train(TrainArgs),
    /// Train several optimizers on the same data and print one table.
    Compare(CompareArgs),
    /// Bucket-load statistics of a data set under one- and multi-choice hashing.
    Inspect(InspectArgs),
}

/// Where the data comes from.
#[derive(Debug, Clone, Args)]
pub(crate) struct DataArgs {
    /// Data format.
    #[arg(long, value_enum, default_value_t = Format::Synthetic)]
    pub(crate) format: Format,
    /// File or directory to read (not used by `synthetic`).
    #[arg(long, value_name = "PATH")]
    pub(crate) data: Option<PathBuf>,
    /// Treat any malformed line as an error instead of counting it.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Fraction of examples held out for validation (learning-rate tuning).
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true, value_parser = validate::fraction)]
    pub(crate) valid_frac: f64,
    /// Fraction of examples held out for the test metrics.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true, value_parser = validate::fraction)]
    pub(crate) test_frac: f64,
    /// Seed of the shuffle that splits formats without timestamps.
    #[arg(long, default_value_t = 0)]
    pub(crate) split_seed: u64,
    /// Text corpus: the label folder that is positive (default `spam`).
    #[arg(long, value_name = "NAME")]
    pub(crate) positive: Option<String>,
    /// Text corpus: skip each document's header block (up to the first empty line).
    #[arg(long)]
    pub(crate) body_only: bool,
    /// Synthetic data: number of examples.
    #[arg(long, default_value_t = SynthConfig::default().examples)]
    pub(crate) synthetic_examples: usize,
    /// Synthetic data: seed of the planted model and the samples.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    pub(crate) synthetic_seed: u64,
    /// Synthetic data: label-flip probability.
    #[arg(long, default_value_t = SynthConfig::default().noise)]
    pub(crate) synthetic_noise: f64,
    /// Synthetic data: Zipf exponent of the ids.
    #[arg(long, default_value_t = SynthConfig::default().zipf)]
    pub(crate) synthetic_zipf: f64,
    /// `criteo-synth`: total categorical id space (over the 26 fields).
    #[arg(long, default_value_t = CriteoSynthConfig::default().ids)]
    pub(crate) synthetic_ids: u64,
    /// `criteo-synth` with `--shard rows`: never materialise the data; each
    /// rank generates its share of every batch on the fly
    /// (`--synthetic-examples` training examples, a held-out test slice).
    #[arg(long)]
    pub(crate) stream: bool,
}

impl DataArgs {
    /// Loader options.
    pub(crate) fn options(&self, progress: bool) -> LoadOptions {
        LoadOptions {
            format: self.format,
            path: self.data.clone(),
            strict: self.strict,
            valid_frac: self.valid_frac,
            test_frac: self.test_frac,
            split_seed: self.split_seed,
            synthetic: SynthConfig {
                examples: self.synthetic_examples,
                seed: self.synthetic_seed,
                noise: self.synthetic_noise,
                zipf: self.synthetic_zipf,
                ..SynthConfig::default()
            },
            criteo_synth: CriteoSynthConfig {
                examples: self.synthetic_examples,
                ids: self.synthetic_ids,
                zipf: self.synthetic_zipf,
                noise: self.synthetic_noise,
                seed: self.synthetic_seed,
                stream: self.stream,
            },
            positive: self.positive.clone(),
            body_only: self.body_only,
            progress,
        }
    }
}

/// Model and training loop.
#[derive(Debug, Clone, Args)]
pub(crate) struct ModelArgs {
    /// Passes over the training split.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = validate::count_u32)]
    pub(crate) epochs: u32,
    /// Examples per mini-batch.
    #[arg(long, default_value_t = 256, allow_negative_numbers = true, value_parser = validate::count_usize)]
    pub(crate) batch: usize,
    /// Embedding size k (table rows hold k + 1 values: linear weight + embedding).
    #[arg(long, default_value_t = 16, allow_negative_numbers = true, value_parser = validate::count_usize)]
    pub(crate) dim: usize,
    /// Standard deviation of the initial embeddings (0 to 1).
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true, value_parser = validate::init_std)]
    pub(crate) init_std: f32,
    /// L2 penalty on the rows a batch touches (added to their gradient).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = validate::non_negative_f32)]
    pub(crate) l2: f32,
    /// Adam learning rate of the dense parameters (the global bias; with
    /// DeepFM/DLRM also the tower) [default: fm: 0.01, deepfm/dlrm: 0.001].
    /// 0.01 for `fm` (one bias float), 0.001 with a tower (Adam's and
    /// DeepSpeed 1-bit Adam's reference value; at 0.01 f32 Adam already
    /// scores lower on the synthetic set and 1-bit Adam diverges, see
    /// docs/DISTRIBUTED.md).
    // The default depends on `--model`: clap would print only the `fm` one,
    // so the help names both (tested in `dense_lr_default_is_per_model`).
    #[arg(
        long,
        default_value_t = 0.01,
        hide_default_value = true,
        default_value_ifs = [("model", "deepfm", "0.001"), ("model", "dlrm", "0.001")],
        allow_negative_numbers = true,
        value_parser = validate::positive_f32
    )]
    pub(crate) dense_lr: f32,
    /// Seed of initialisation, data order and optimizer randomness.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Data-parallel ranks (threads over LocalComm, or MPI processes under
    /// mpirun with the `mpi` feature): sparse row gradients are all-gathered,
    /// the dense parameters use 1-bit Adam.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = validate::count_usize)]
    pub(crate) workers: usize,
    /// Threads inside each process's training step (the tower's products
    /// split by rows; the batch's per-example and per-row passes, the
    /// BASIS sparse step, prediction); default: the machine's cores
    /// divided by `--workers` (ranks share the machine). Results are the
    /// same bits at any count.
    #[arg(long, allow_negative_numbers = true, value_parser = validate::count_usize)]
    pub(crate) threads: Option<usize>,
    /// Model: `fm`, `deepfm` (FM + an MLP over the per-field embeddings) or
    /// `dlrm` (bottom MLP on dense features, pairwise dots, top MLP; needs
    /// `--format criteo-synth`).
    #[arg(long, value_enum, default_value_t = ModelKind::Fm)]
    pub(crate) model: ModelKind,
    /// DeepFM tower (DLRM: top tower) widths, comma-separated; the last must
    /// be 1 (the logit).
    #[arg(
        long,
        value_name = "W,W,...,1",
        value_delimiter = ',',
        default_value = "512,256,1"
    )]
    pub(crate) mlp: Vec<usize>,
    /// DLRM bottom tower hidden widths (its output, `--dim`, is appended).
    #[arg(
        long,
        value_name = "W,W,...",
        value_delimiter = ',',
        default_value = "64"
    )]
    pub(crate) bottom_mlp: Vec<usize>,
    /// Dense-parameter optimizer of data-parallel runs (`--workers P`).
    /// Default `zero-one-adam`: within 0.0001 of f32 Adam's mean test AUC
    /// on the harness's 200-step DeepFM and DLRM jobs (3 seeds) at 1.8× /
    /// 1.2× fewer dense bytes than `onebit-adam`, and 0.001 below f32 Adam
    /// on a 39 063-step DeepFM stream where `onebit-adam` is 0.014 below
    /// (seeds 1–2; docs/DISTRIBUTED.md, session 23); `onebit-adam` was the default
    /// before, and keeps the overlapped step (`--dense-overlap`), graded
    /// policies (`--dense-policy`) and per-group telemetry.
    #[arg(long, value_enum, default_value_t = DenseOpt::ZeroOneAdam)]
    pub(crate) dense_opt: DenseOpt,
    /// 1-bit Adam's (and 1-bit LAMB's) full-precision warm-up: `auto` ends
    /// it when the second moment has settled (at the latest after a
    /// quarter of the run; the step is reported), a fraction fixes it to
    /// that share of the run's steps (at least one; DeepSpeed's guidance is
    /// 15–25 %); `share` ends it once the last 5 steps bring under 5 % of
    /// the accumulated gradient energy (an early burst is over), not
    /// before step 20 (same cap). Default: `onebit-adam`'s own rule
    /// (`FreezePolicy::default()`), `share`: within 0.001 test AUC of f32
    /// Adam on DeepFM and DLRM, 3 seeds, and earlier than `auto` on every
    /// run measured (docs/ONEBIT_ADAM.md); `auto` was the default before.
    /// Those runs were 200–600 steps long: on a 39 063-step DeepFM stream
    /// it froze at step 35 and cost 0.014 test AUC against f32 Adam, 0.2
    /// cost 0.011 (docs/RESULTS.md, session 20), which is why
    /// `zero-one-adam` (it refreshes the second moment) is the default
    /// `--dense-opt`. Under `zero-one-adam` this is the step after which
    /// `v` stays frozen and local steps may begin (`auto` and `share`: a
    /// quarter of the run).
    #[arg(long, value_name = "auto|share|FRACTION", default_value_t = crate::dense_opt::default_warmup(), value_parser = DenseWarmup::parse)]
    pub(crate) dense_warmup: DenseWarmup,
    /// Communication policy per tower layer under `--dense-opt
    /// onebit-adam`, after the warm-up: `1bit`, `2bit` (sign + magnitude
    /// bit, a scale per chunk), `bf16` or `full` for every layer, or
    /// `first=P,last=P,rest=P` (first: the embedding-adjacent layer; last:
    /// the output layer; unnamed: 1bit), e.g. `first=2bit,last=full`.
    #[arg(long, value_name = "POLICY|first=P,last=P,rest=P", default_value_t = DensePolicy::default(), value_parser = DensePolicy::parse)]
    pub(crate) dense_policy: DensePolicy,
    /// Groups of `--dense-opt adam|onebit-adam` (each compressed with its
    /// own scale): `tower` (one group, adjacent layers of one
    /// `--dense-policy` merged; default) or `layer` (one per tower layer:
    /// different results once compressed).
    #[arg(long, value_enum, default_value_t = DenseGroups::Tower)]
    pub(crate) dense_groups: DenseGroups,
    /// `--workers P`: `on` starts the dense step's collectives (1-bit
    /// Adam's split step, on a communication thread) before the step's
    /// sparse work and completes them after it; `off` (default) waits for
    /// them in place. Same bits either way.
    #[arg(long, value_enum, default_value_t = DenseOverlap::Off)]
    pub(crate) dense_overlap: DenseOverlap,
    /// How `--dense-opt onebit-adam`'s warm-up and `zero-one-adam`'s
    /// variance steps all-reduce the gradients: `bf16` (default: each
    /// rank's gradient and the mean rounded to bfloat16, sums in f32, half
    /// the bytes of `f32`) or `f32` (DeepSpeed's full-precision stage
    /// exactly). The other dense optimizers reduce in f32.
    #[arg(long, value_enum, default_value_t = DenseWarmupReduce::Bf16)]
    pub(crate) dense_warmup_reduce: DenseWarmupReduce,
    /// Show each dense group's telemetry on the progress line (policy,
    /// ‖worker error‖, share of momentum signs flipped, bytes of the step).
    #[arg(long)]
    pub(crate) progress_dense: bool,
    /// Shard the embedding table by row over the `--workers` ranks (each
    /// rank holds only its rows and their optimizer state; ids and rows move
    /// by all-to-all). Without it every rank holds a full replica.
    #[arg(long, value_enum)]
    pub(crate) shard: Option<ShardMode>,
    /// `--shard rows`: give an id a row only in the training step in which
    /// it has been seen in N steps (2 to 255; counted in a fixed count-min
    /// sketch of 4 × 2^20 one-byte counters per rank). Until then it reads
    /// as its initial row and its gradients are dropped.
    #[arg(long, value_name = "N", requires = "shard", conflicts_with = "admit_prob",
          value_parser = clap::value_parser!(u8).range(2..))]
    pub(crate) admit_min_count: Option<u8>,
    /// `--shard rows`: give an id a row with probability P (0 < P ≤ 1) at
    /// each training step in which it is seen (a hash of seed, id and step:
    /// every rank agrees, runs repeat).
    #[arg(long, value_name = "P", requires = "shard", value_parser = probability)]
    pub(crate) admit_prob: Option<f64>,
    /// `--shard rows`: free the rows not looked up in the last STEPS
    /// training steps (row and optimizer row state; BASIS keeps its buckets).
    #[arg(long, value_name = "STEPS", requires = "shard",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) evict_ttl: Option<u64>,
    /// `--shard rows`: hold at most ROWS rows per rank, freeing the least
    /// recently seen ones (after `--evict-ttl`, checked every step).
    #[arg(long, value_name = "ROWS", requires = "shard",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) evict_capacity: Option<u64>,
    /// `--shard rows`: store the rows as f32 (the default), or as bf16 /
    /// f16 (half the bytes) updated in f32 and stored with stochastic
    /// rounding keyed by `--seed` (runs repeat, sharded == one rank).
    #[arg(long, value_name = "f32|bf16|f16", requires = "shard",
          default_value_t = basis_shard::RowPrecision::F32, value_parser = row_precision)]
    pub(crate) row_precision: basis_shard::RowPrecision,
    /// `--shard rows`: each rank's id → row index: `compact` (basis-core's
    /// `SlotIndex`, ≈ 9–10 B per row) or `fast` (hashbrown, ≈ 21–36 B per
    /// row). Unset: the library's default (`basis_shard::IndexKind`). The
    /// layout changes neither results nor checkpoints: a run resumes under
    /// either.
    #[arg(long, value_name = "compact|fast", requires = "shard", value_parser = row_index)]
    pub(crate) row_index: Option<basis_shard::IndexKind>,
}

/// An index layout: `compact` or `fast`.
fn row_index(text: &str) -> Result<basis_shard::IndexKind, String> {
    match text {
        "compact" => Ok(basis_shard::IndexKind::Compact),
        "fast" => Ok(basis_shard::IndexKind::Fast),
        _ => Err("compact or fast".into()),
    }
}

/// A row precision: `f32`, `bf16` or `f16`.
fn row_precision(text: &str) -> Result<basis_shard::RowPrecision, String> {
    text.parse().map_err(|e| format!("{e}"))
}

/// An admission probability in `(0, 1]`.
fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if p > 0.0 && p <= 1.0 {
        Ok(p)
    } else {
        Err("must be in (0, 1]".into())
    }
}

impl ModelArgs {
    /// Whether the sharded table admits or evicts rows (the run then
    /// reports the rows held, evicted and dropped).
    pub(crate) fn admits_or_evicts(&self) -> bool {
        self.admit_min_count.is_some()
            || self.admit_prob.is_some()
            || self.evict_ttl.is_some()
            || self.evict_capacity.is_some()
    }
}

/// How the embedding table is laid out over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ShardMode {
    /// Row-sharded: row id → owner rank by a balanced-hash hash.
    Rows,
}

/// Outputs.
#[derive(Debug, Clone, Args)]
pub(crate) struct OutputArgs {
    /// Write machine-readable results to this file (`-` = stdout, table suppressed).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw loss and AUC curves per optimizer into this PNG.
    #[arg(long, value_name = "OUT.png")]
    pub(crate) plot: Option<PathBuf>,
}

/// `basis train`.
#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    #[command(flatten)]
    pub(crate) data: DataArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) out: OutputArgs,
    /// Optimizer: NAME[:key=value,...] (see `docs/CLI.md`), e.g. `basis:mode=rowscaled,storage=u8`.
    #[arg(long = "opt", default_value = "basis")]
    pub(crate) opt: OptSpec,
    /// Save a checkpoint into DIR after every epoch (atomic, checksummed).
    #[arg(long, value_name = "DIR")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Continue from the checkpoint in `--checkpoint DIR`.
    #[arg(long, requires = "checkpoint")]
    pub(crate) resume: bool,
}

/// `basis compare`.
#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    #[command(flatten)]
    pub(crate) data: DataArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) out: OutputArgs,
    /// Optimizers to run (repeat the flag); default: adam, rowwise-adagrad,
    /// sgd, basis (rowscaled, u8), basis:mode=own, basis:mode=shared, countsketch.
    #[arg(long = "opt", value_name = "SPEC")]
    pub(crate) opts: Vec<OptSpec>,
    /// Seeds per optimizer (seed, seed+1, ...): the table shows mean ± std.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = validate::count_u32)]
    pub(crate) seeds: u32,
    /// Learning rates to try per optimizer: `auto` (a grid per optimizer
    /// around its default rate, extended while the best is at an end) or a
    /// comma-separated list. The rate with the best validation AUC (first
    /// seed) is kept and only its test metrics are reported.
    #[arg(long, value_name = "auto|LR,LR,...")]
    pub(crate) tune_lr: Option<crate::tune::TuneLr>,
    /// What `--tune-lr` compares rates on: `first` (the first seed's
    /// validation AUC; the other seeds run only at the chosen rate) or
    /// `mean` (every rate runs every seed; the mean validation AUC decides,
    /// `--seeds`× the tuning runs and none after them). Default: first.
    #[arg(
        long,
        value_name = "first|mean",
        default_value = "first",
        requires = "tune_lr"
    )]
    pub(crate) tune_on: crate::tune::TuneOn,
    /// Save/resume one checkpoint per optimizer, learning rate and seed under DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Continue runs from `--checkpoint DIR`.
    #[arg(long, requires = "checkpoint")]
    pub(crate) resume: bool,
}

/// `basis inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) data: DataArgs,
    /// Buckets B (default: rows / ratio).
    #[arg(long)]
    pub(crate) buckets: Option<u32>,
    /// Rows per bucket N/B when `--buckets` is not given.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) ratio: f64,
    /// Largest number of hash choices to compare (1 ..= this).
    #[arg(long, default_value_t = 2)]
    pub(crate) choices: u8,
    /// Write the statistics as JSON (`-` = stdout).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    fn dense_lr(argv: &[&str]) -> f32 {
        let argv = [&["basis", "train"][..], argv].concat();
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Train(a) => a.model.dense_lr,
            _ => unreachable!("a train command"),
        }
    }

    /// `--dense-lr`'s default depends on `--model`, and `train --help`
    /// says so rather than printing the `fm` value as the only default.
    #[test]
    fn dense_lr_default_is_per_model() {
        assert_eq!(dense_lr(&[]), 0.01);
        assert_eq!(dense_lr(&["--model", "fm"]), 0.01);
        assert_eq!(dense_lr(&["--model", "deepfm"]), 0.001);
        assert_eq!(dense_lr(&["--model", "dlrm"]), 0.001);
        assert_eq!(dense_lr(&["--model", "deepfm", "--dense-lr", "0.02"]), 0.02);
        let mut cmd = Cli::command();
        let train = cmd.find_subcommand_mut("train").unwrap();
        for help in [train.render_long_help(), train.render_help()] {
            let help = help.to_string();
            let at = help.find("--dense-lr").unwrap();
            let next = help[at + 2..]
                .find("\n      --")
                .map_or(help.len(), |i| at + 2 + i);
            // Whitespace-normalised: clap may wrap the help.
            let text = help[at..next]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            assert!(text.contains("fm: 0.01, deepfm/dlrm: 0.001"), "{text}");
            assert!(!text.contains("[default: 0.01]"), "{text}");
        }
    }
}
