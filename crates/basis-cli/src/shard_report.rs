//! The record of a row-sharded run (`--shard rows`), part of every
//! `RunResult`: the table's group report (`basis_shard::GroupReport`:
//! per-rank figures, their summary and the skew warning), with the run's
//! training time and rate filled in by `shard::Sharded::finish`.

pub(crate) use basis_shard::GroupReport as ShardReport;
