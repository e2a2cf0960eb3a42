#![doc = include_str!("README.md")]
// The facade's own page (above): the repository's README.md speaks of
// files and commands a crates.io user does not get.
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "hash")]
pub use balanced_hash as hash;
#[cfg(feature = "core")]
pub use basis_core as core;
#[cfg(feature = "data")]
pub use basis_data as data;
#[cfg(feature = "rayon")]
pub use basis_rayon as rayon;
#[cfg(feature = "shard")]
pub use basis_shard as shard;
#[cfg(feature = "std")]
pub use basis_std as std;
#[cfg(feature = "mpi")]
pub use comm_mpi as mpi;
#[cfg(feature = "comm")]
pub use comm_traits as comm;
#[cfg(feature = "adam")]
pub use onebit_adam as adam;
#[cfg(feature = "codec")]
pub use onebit_codec as codec;
