//! std adapters for the `no_std` crates: in-process ranks ([`local`]) and
//! crash-safe checkpoint files ([`checkpoint`]).
#![doc = include_str!("../README.md")]

pub mod checkpoint;
pub mod local;
