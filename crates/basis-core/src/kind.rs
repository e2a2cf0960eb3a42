//! The optimizer kind tags of state blobs (`state.rs`'s envelope), in a
//! file of their own so that `error.rs` can name a blob's kind without
//! importing `state.rs`, which imports `error.rs`.

pub(crate) const BASIS: u8 = 1;
pub(crate) const ADAM: u8 = 2;
pub(crate) const ADAGRAD: u8 = 3;
pub(crate) const SGD: u8 = 4;
pub(crate) const PARTIAL_ROWWISE_ADAM: u8 = 5;
pub(crate) const ROWSTEP_ADAM: u8 = 6;
pub(crate) const FTRL: u8 = 7;
pub(crate) const ADAM8BIT: u8 = 8;
/// Flag on an optimizer's tag: a blob of single rows' state
/// ([`SparseOptimizer::export_rows`](crate::SparseOptimizer::export_rows)).
pub(crate) const ROWS: u8 = 0x40;
/// Flag on an optimizer's tag: a blob of single buckets' state
/// ([`SparseOptimizer::export_buckets`](crate::SparseOptimizer::export_buckets)).
pub(crate) const BUCKETS: u8 = 0x80;
