#![doc = include_str!("../README.md")]
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![forbid(unsafe_code)]

extern crate alloc;

mod admission;
mod agree;
mod boxed;
mod checkpoint;
mod error;
mod eviction;
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod init;
mod owner;
mod report;
mod reshard;
pub mod route;
mod rows;
mod snapshot;
mod table;

pub use admission::Admission;
pub use agree::{AgreeError, MESSAGE_BYTES, agree_outcome, agree_values};
pub use boxed::BoxedOptimizer;
pub use checkpoint::rank_path;
pub use error::ShardError;
pub use eviction::Eviction;
pub use index::IndexKind;
pub use init::RowInit;
pub use owner::{OwnerRule, PartitionedBuckets};
pub use report::{GroupReport, RankReport, SKEW_WARNING, process_memory};
pub use rows::{ParsePrecisionError, RowPrecision};
pub use snapshot::{SHARD_FORMAT, TableSnapshot, decode as decode_checkpoint};
pub use table::{Batch, MemoryUse, ShardedTable, TableConfig, TableStats};
