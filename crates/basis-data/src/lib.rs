//! Data sets: the embedded synthetic generator and the real-data parsers.
//!
//! Every parser produces [`RawData`]: examples as lists of `(feature key,
//! value)` with a 0/1 label and, when the format has one, a timestamp. The
//! loader then splits train / validation / test (time-ordered when there are
//! timestamps, else a seeded shuffle), builds the row vocabulary from the
//! training split only, and maps every split to dense table rows.
//!
//! Malformed lines are never dropped silently: each one is recorded in the
//! [`LoadReport`] with its file and line number. A file where no line parses,
//! or where more than half of the non-blank lines are malformed, is not in the
//! named format and is a [`DataError::NotFormat`]; with `--strict` the first
//! malformed line is an error. See `docs/DATA.md`.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod criteo;
pub mod criteo_synth;
pub mod hashing;
pub mod libsvm;
pub mod lines;
pub mod movielens;
pub mod progress;
pub mod rng;
pub mod synthetic;
pub mod text;

use crate::hashing::{KeyMap, field_of};
use crate::rng::Rng;
use core::fmt;
use serde::Serialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// A data format this crate reads (the CLI's `--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The embedded deterministic synthetic CTR data (no file).
    Synthetic,
    /// MovieLens `u.data` (`user \t item \t rating \t time`) or RecBole `.inter` (+ `.user`, `.item`).
    Movielens,
    /// Criteo TSV: label, 13 integer and 26 categorical columns.
    Criteo,
    /// Streaming synthetic Criteo-like data: 13 integer + 26 Zipf categorical fields (no file).
    CriteoSynth,
    /// libsvm / svmlight: `label idx:val idx:val ...`.
    Libsvm,
    /// A directory with one sub-directory per label; each file is one document.
    Text,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Synthetic => "synthetic",
            Self::Movielens => "movielens",
            Self::Criteo => "criteo",
            Self::CriteoSynth => "criteo-synth",
            Self::Libsvm => "libsvm",
            Self::Text => "text",
        })
    }
}

/// Why a data set could not be loaded.
#[derive(Debug)]
pub enum DataError {
    /// A file or directory could not be read.
    Io {
        /// The path.
        path: PathBuf,
        /// The operating-system error.
        error: std::io::Error,
    },
    /// The input is not in the named format (no line parses, a required header
    /// is missing, or more than half of the lines are malformed).
    NotFormat {
        /// The path.
        path: PathBuf,
        /// The format that was named.
        format: Format,
        /// The first offending line (1-based; 0 when the problem is not a line).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// [`LoadOptions::strict`] (the CLI's `--strict`): a malformed line.
    Malformed {
        /// The path.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The data set has too few examples, or a split holds one class only
    /// (AUC is undefined then).
    Unusable(String),
    /// Bad generator or split parameters.
    Config(String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            Self::NotFormat {
                path,
                format,
                line,
                reason,
            } => {
                write!(f, "{} is not a {format} file", path.display())?;
                if *line > 0 {
                    write!(f, " (line {line}: {reason})")
                } else {
                    write!(f, " ({reason})")
                }
            }
            Self::Malformed { path, line, reason } => {
                write!(f, "{}:{line}: malformed line: {reason}", path.display())
            }
            Self::Unusable(msg) => write!(f, "unusable data set: {msg}"),
            Self::Config(msg) => write!(f, "bad data options: {msg}"),
        }
    }
}

impl core::error::Error for DataError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// One malformed input line.
#[derive(Debug, Clone, Serialize)]
pub struct Malformed {
    /// The file.
    pub file: String,
    /// The line (1-based; for the text corpus, 0 = the whole file).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// How many malformed lines are kept with their reason (all are counted).
pub const KEEP_MALFORMED: usize = 1000;

/// What loading saw: lines, examples, and every malformed line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// Lines (or documents) read, blank ones included.
    pub lines: usize,
    /// Blank lines skipped (not errors).
    pub blank: usize,
    /// Examples parsed.
    pub examples: usize,
    /// Malformed lines, all counted.
    pub malformed_count: usize,
    /// The first [`KEEP_MALFORMED`] malformed lines with file, line and reason.
    pub malformed: Vec<Malformed>,
    /// Feature occurrences in validation/test whose feature never occurs in training
    /// (they have no table row and contribute nothing).
    pub unseen_features: usize,
}

impl LoadReport {
    /// Record a malformed line (or return the `--strict` error).
    pub fn malformed(
        &mut self,
        path: &Path,
        line: usize,
        reason: impl Into<String>,
        strict: bool,
    ) -> Result<(), DataError> {
        let reason = reason.into();
        if strict {
            return Err(DataError::Malformed {
                path: path.to_path_buf(),
                line,
                reason,
            });
        }
        self.malformed_count += 1;
        if self.malformed.len() < KEEP_MALFORMED {
            self.malformed.push(Malformed {
                file: path.display().to_string(),
                line,
                reason,
            });
        }
        Ok(())
    }

    /// The rule "a file is not in the named format": called after a file is
    /// parsed with the counts for that file only.
    pub fn check_format(
        path: &Path,
        format: Format,
        parsed: usize,
        malformed_here: usize,
        first_bad: Option<&Malformed>,
    ) -> Result<(), DataError> {
        if parsed == 0 || malformed_here > parsed {
            let (line, reason) = first_bad.map_or((0, "no examples".to_string()), |m| {
                (m.line, m.reason.clone())
            });
            return Err(DataError::NotFormat {
                path: path.to_path_buf(),
                format,
                line,
                reason,
            });
        }
        Ok(())
    }
}

/// Parsed examples before splitting: flat arrays (CSR).
#[derive(Debug, Default)]
pub struct RawData {
    /// Field names (for reports).
    pub fields: Vec<String>,
    offsets: Vec<usize>,
    keys: Vec<u64>,
    values: Vec<f32>,
    labels: Vec<f32>,
    times: Vec<i64>,
    /// Dense (continuous) features, `dense_width` per example (DLRM's
    /// bottom tower); only `criteo-synth` has them, others have width 0.
    dense: Vec<f32>,
    dense_width: usize,
    /// Whether `times` are real timestamps (time-ordered split) or line order.
    pub timed: bool,
}

impl RawData {
    /// Empty data with the given field names.
    pub fn new(fields: Vec<String>, timed: bool) -> Self {
        Self {
            fields,
            offsets: vec![0],
            timed,
            ..Self::default()
        }
    }

    /// Append one example.
    pub fn push(&mut self, features: &[(u64, f32)], label: f32, time: i64) {
        for &(k, v) in features {
            self.keys.push(k);
            self.values.push(v);
        }
        self.offsets.push(self.keys.len());
        self.labels.push(label);
        self.times.push(time);
    }

    /// Append one example with `dense` continuous features (every example
    /// of a data set has the same number).
    pub fn push_with_dense(
        &mut self,
        features: &[(u64, f32)],
        dense: &[f32],
        label: f32,
        time: i64,
    ) {
        self.dense_width = dense.len();
        self.dense.extend_from_slice(dense);
        self.push(features, label, time);
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Dense features of example `i` (empty without them).
    fn dense_of(&self, i: usize) -> &[f32] {
        let w = self.dense_width;
        self.dense.get(i * w..(i + 1) * w).unwrap_or(&[])
    }
}

/// Examples mapped to table rows (CSR: example `e` has rows
/// `rows[offsets[e]..offsets[e+1]]` with values and field ids, and a label).
#[derive(Debug, Clone, Default)]
pub struct Examples {
    /// Where each example's features start (`len() + 1` entries, first 0).
    pub offsets: Vec<usize>,
    /// Table row of each feature.
    pub rows: Vec<u32>,
    /// Value of each feature.
    pub values: Vec<f32>,
    /// Field of each feature (from its key, [`crate::hashing::field_of`]).
    pub fields: Vec<u8>,
    /// Label of each example, `0.0` or `1.0`.
    pub labels: Vec<f32>,
    /// Dense features, `dense_width` per example (DLRM; often width 0).
    pub dense: Vec<f32>,
    /// Dense features per example.
    pub dense_width: usize,
}

impl Examples {
    fn new() -> Self {
        Self {
            offsets: vec![0],
            ..Self::default()
        }
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Rows and values of example `e`.
    pub fn features(&self, e: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.offsets[e], self.offsets[e + 1]);
        (&self.rows[a..b], &self.values[a..b])
    }

    /// Number of fields: one more than the largest field id (at least 1).
    pub fn field_count(&self) -> usize {
        self.fields
            .iter()
            .copied()
            .max()
            .map_or(1, |f| usize::from(f) + 1)
    }

    /// Fraction of positive labels.
    pub fn positive_rate(&self) -> f64 {
        if self.labels.is_empty() {
            return 0.0;
        }
        self.labels.iter().map(|&l| f64::from(l)).sum::<f64>() / self.labels.len() as f64
    }
}

/// A loaded, split data set with dense table rows.
#[derive(Debug)]
pub struct Dataset {
    /// A short description (format and source).
    pub name: String,
    /// Field names.
    pub fields: Vec<String>,
    /// Number of table rows (distinct training features).
    pub rows: usize,
    /// Training occurrences of each row (for bucket-load reports).
    pub row_counts: Vec<u32>,
    /// Training split.
    pub train: Examples,
    /// Validation split (for tuning; never the test split).
    pub valid: Examples,
    /// Test split.
    pub test: Examples,
    /// How the split was made.
    pub split: String,
    /// What loading saw.
    pub report: LoadReport,
    /// `--format criteo-synth --stream`: the generator the sharded trainer
    /// reads from (then `train`/`valid`/`test` hold no examples).
    pub stream: Option<StreamSpec>,
}

impl Dataset {
    /// Examples in the training, validation and test splits (a stream's
    /// lengths, though it holds no examples).
    pub fn split_lens(&self) -> [usize; 3] {
        match &self.stream {
            Some(st) => [st.train, st.valid, st.test],
            None => [self.train.len(), self.valid.len(), self.test.len()],
        }
    }

    /// Positive rate of the training split (a stream's: over its first
    /// examples, see [`criteo_synth::pilot`]).
    pub fn train_positive_rate(&self) -> f64 {
        self.stream
            .as_ref()
            .map_or_else(|| self.train.positive_rate(), |st| st.positive_rate)
    }
}

/// A streamed data set (see [`criteo_synth::stream_dataset`]).
#[derive(Debug, Clone)]
pub struct StreamSpec {
    /// The generator.
    pub generator: criteo_synth::CriteoSynth,
    /// Training examples (stream indices `0..train`).
    pub train: usize,
    /// Held-out validation examples (stream indices `VALID_FIRST + j`).
    pub valid: usize,
    /// Held-out test examples (stream indices `TEST_FIRST + j`).
    pub test: usize,
    /// Positive rate of the first training examples (the pilot's).
    pub positive_rate: f64,
}

/// Options for loading.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The format.
    pub format: Format,
    /// The file or directory (ignored for `synthetic`).
    pub path: Option<PathBuf>,
    /// Any malformed line is an error.
    pub strict: bool,
    /// Fraction of the examples held out for validation.
    pub valid_frac: f64,
    /// Fraction of the examples held out for testing.
    pub test_frac: f64,
    /// Seed of the shuffle for formats without timestamps.
    pub split_seed: u64,
    /// Synthetic generator parameters.
    pub synthetic: synthetic::SynthConfig,
    /// `criteo-synth` generator parameters.
    pub criteo_synth: criteo_synth::CriteoSynthConfig,
    /// The label folder that counts as positive in a text corpus.
    pub positive: Option<String>,
    /// Text corpus: skip each document's header block.
    pub body_only: bool,
    /// Show progress bars.
    pub progress: bool,
}

/// Load, split and index a data set.
///
/// Fails with a [`DataError`] when a file cannot be read or is not in the
/// named format, on a malformed line with `strict`, or when a split would be
/// empty or one-class.
pub fn load(opts: &LoadOptions) -> Result<Dataset, DataError> {
    if !(opts.valid_frac >= 0.0 && opts.test_frac > 0.0 && opts.valid_frac + opts.test_frac < 1.0) {
        return Err(DataError::Config(format!(
            "need 0 <= valid ({}) , 0 < test ({}), valid + test < 1",
            opts.valid_frac, opts.test_frac
        )));
    }
    let mut report = LoadReport::default();
    let path = || {
        opts.path
            .clone()
            .ok_or_else(|| DataError::Config(format!("format `{}` needs --data PATH", opts.format)))
    };
    if matches!(opts.format, Format::Synthetic | Format::CriteoSynth) && opts.path.is_some() {
        return Err(DataError::Config(
            "--data needs --format (movielens, criteo, libsvm or text); synthetic data has no file"
                .into(),
        ));
    }
    let (raw, name) = match opts.format {
        Format::Synthetic => (
            synthetic::generate(&opts.synthetic)?,
            format!("synthetic ({})", opts.synthetic.describe()),
        ),
        Format::CriteoSynth if opts.criteo_synth.stream => {
            return criteo_synth::stream_dataset(
                &opts.criteo_synth,
                opts.valid_frac,
                opts.test_frac,
            );
        }
        Format::CriteoSynth => {
            let (raw, what) = criteo_synth::generate(&opts.criteo_synth)?;
            (raw, format!("criteo-synth ({what})"))
        }
        Format::Movielens => {
            let p = path()?;
            (
                movielens::load(&p, opts, &mut report)?,
                format!("movielens {}", p.display()),
            )
        }
        Format::Criteo => {
            let p = path()?;
            (
                criteo::load(&p, opts, &mut report)?,
                format!("criteo {}", p.display()),
            )
        }
        Format::Libsvm => {
            let p = path()?;
            (
                libsvm::load(&p, opts, &mut report)?,
                format!("libsvm {}", p.display()),
            )
        }
        Format::Text => {
            let p = path()?;
            let (raw, positive) = text::load(&p, opts, &mut report)?;
            (
                raw,
                format!("text {} (positive label folder `{positive}`)", p.display()),
            )
        }
    };
    report.examples = raw.len();
    index(raw, name, opts, report)
}

/// Split and map features to rows (vocabulary from the training split only).
fn index(
    raw: RawData,
    name: String,
    opts: &LoadOptions,
    mut report: LoadReport,
) -> Result<Dataset, DataError> {
    let n = raw.len();
    if n < 10 {
        return Err(DataError::Unusable(format!(
            "{n} examples; need at least 10"
        )));
    }
    let mut order: Vec<usize> = (0..n).collect();
    let split = if raw.timed {
        order.sort_by_key(|&i| (raw.times[i], i));
        "time-ordered".to_string()
    } else {
        Rng::derive(opts.split_seed, 0x5917).shuffle(&mut order);
        format!("shuffled (split seed {})", opts.split_seed)
    };
    let n_test = ((n as f64 * opts.test_frac).round() as usize).max(1);
    let n_valid = (n as f64 * opts.valid_frac).round() as usize;
    let n_train = n - n_test - n_valid;
    if n_train == 0 {
        return Err(DataError::Unusable("empty training split".into()));
    }
    let mut vocab: KeyMap<u32> = KeyMap::default();
    let mut row_counts: Vec<u32> = Vec::new();
    let mut train = Examples::new();
    train.dense_width = raw.dense_width;
    for &i in &order[..n_train] {
        for j in raw.offsets[i]..raw.offsets[i + 1] {
            let next = vocab.len() as u32;
            let row = *vocab.entry(raw.keys[j]).or_insert(next);
            if row == next {
                row_counts.push(0);
            }
            row_counts[row as usize] += 1;
            train.rows.push(row);
            train.values.push(raw.values[j]);
            train.fields.push(field_of(raw.keys[j]));
        }
        train.offsets.push(train.rows.len());
        train.labels.push(raw.labels[i]);
        train.dense.extend_from_slice(raw.dense_of(i));
    }
    let mut map = |idx: &[usize]| {
        let mut ex = Examples::new();
        ex.dense_width = raw.dense_width;
        for &i in idx {
            for j in raw.offsets[i]..raw.offsets[i + 1] {
                if let Some(&row) = vocab.get(&raw.keys[j]) {
                    ex.rows.push(row);
                    ex.values.push(raw.values[j]);
                    ex.fields.push(field_of(raw.keys[j]));
                } else {
                    report.unseen_features += 1;
                }
            }
            ex.offsets.push(ex.rows.len());
            ex.labels.push(raw.labels[i]);
            ex.dense.extend_from_slice(raw.dense_of(i));
        }
        ex
    };
    let valid = map(&order[n_train..n_train + n_valid]);
    let test = map(&order[n_train + n_valid..]);
    for (what, ex) in [("training", &train), ("test", &test)] {
        let p = ex.positive_rate();
        if p == 0.0 || p == 1.0 {
            return Err(DataError::Unusable(format!(
                "the {what} split has one class only (positive rate {p})"
            )));
        }
    }
    Ok(Dataset {
        name,
        fields: raw.fields,
        rows: vocab.len(),
        row_counts,
        train,
        valid,
        test,
        split,
        report,
        stream: None,
    })
}

/// What a line-reading loader made of one line (see [`load_lines`]).
#[derive(Debug)]
pub enum LineOutcome {
    /// An example (or a side-file entry) was parsed.
    Parsed,
    /// A blank line, skipped.
    Blank,
    /// The header line, consumed.
    Header,
    /// A malformed line, and why.
    Malformed(String),
}

/// The outcome of a `label = parse(line, &mut feats)` line parser: the
/// example is pushed with the line number as its time, or the line is
/// malformed (the reason, then an excerpt of the line).
pub fn push_example(
    raw: &mut RawData,
    feats: &[(u64, f32)],
    n: usize,
    line: &[u8],
    label: Result<f32, String>,
) -> LineOutcome {
    match label {
        Ok(label) => {
            raw.push(feats, label, n as i64);
            LineOutcome::Parsed
        }
        Err(why) => LineOutcome::Malformed(format!("{why}: {}", excerpt(line))),
    }
}

/// The skeleton every line-per-record loader shares: read `path` line by
/// line, hand each line to `each`, count blank lines, record every malformed
/// line (or stop on it with `--strict`), then apply the "not in this format"
/// rule to this file's counts. `each` fails only on a fatal problem (a bad
/// header).
pub fn load_lines(
    path: &Path,
    format: Format,
    opts: &LoadOptions,
    report: &mut LoadReport,
    mut each: impl FnMut(usize, &[u8]) -> Result<LineOutcome, DataError>,
) -> Result<(), DataError> {
    let (mut parsed, mut bad) = (0, 0);
    let first_bad = report.malformed.len();
    let lines = for_each_line(path, opts.progress, |n, line| {
        match each(n, line)? {
            LineOutcome::Parsed => parsed += 1,
            LineOutcome::Blank => report.blank += 1,
            LineOutcome::Header => {}
            LineOutcome::Malformed(why) => {
                bad += 1;
                report.malformed(path, n, why, opts.strict)?;
            }
        }
        Ok(())
    })?;
    report.lines += lines;
    LoadReport::check_format(path, format, parsed, bad, report.malformed.get(first_bad))
}

/// Read `path` line by line (bytes; `\r\n` and `\n` endings), calling
/// `f(line_number, line)`; returns the number of lines.
fn for_each_line(
    path: &Path,
    progress: bool,
    mut f: impl FnMut(usize, &[u8]) -> Result<(), DataError>,
) -> Result<usize, DataError> {
    let io = |error| DataError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let bar = crate::progress::bytes(len, &format!("reading {}", path.display()), progress);
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        let got = reader.read_until(b'\n', &mut buf).map_err(io)?;
        if got == 0 {
            break;
        }
        bar.inc(got as u64);
        line_no += 1;
        let mut line = buf.as_slice();
        if let Some(l) = line.strip_suffix(b"\n") {
            line = l;
        }
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        f(line_no, line)?;
    }
    bar.finish_and_clear();
    Ok(line_no)
}

/// Whether a line holds only whitespace.
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A short printable excerpt of a line for error messages: at most 40
/// bytes, [`escaped`].
pub fn excerpt(bytes: &[u8]) -> String {
    let s = escaped(&bytes[..bytes.len().min(40)]);
    if bytes.len() > 40 {
        format!("{s}...")
    } else {
        s
    }
}

/// `bytes` as text safe to print on a terminal: control characters (ESC,
/// BEL, NUL, C1 …) as `\u{1b}`-style escapes and bytes that are not UTF-8
/// as `\xff`. Echoed raw, binary garbage given as data could recolour or
/// retitle the user's terminal, or hide the rest of the message.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}
