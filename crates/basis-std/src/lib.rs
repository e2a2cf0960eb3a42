//! std adapters for the `no_std` crates: in-process ranks ([`local`]),
//! crash-safe checkpoint files ([`checkpoint`]), and non-blocking collectives
//! for any communicator on a communication thread ([`overlap`]).
#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]

pub mod checkpoint;
pub mod fault;
pub mod local;
pub mod overlap;

// What a `LocalComm` user calls (`comm.rank()`, `comm.all_reduce_sum(..)`
// are `Communicator` methods: the trait must be in scope), without a
// separate `comm-traits` dependency.
pub use comm_traits::{self, Collective, CommError, CommStats, Communicator, NonBlocking};
pub use local::LocalComm;
pub use overlap::Overlapped;
