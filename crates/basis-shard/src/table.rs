//! [`ShardedTable`]: one rank's part of a row-sharded embedding table, and
//! the collective calls of a training step (`lookup`, `apply`) and of
//! evaluation (`lookup_eval`); admission and eviction of rows (the rules
//! in `admission` and `eviction`, the bookkeeping here).

use alloc::vec::Vec;
use basis_core::{RowStateError, SparseOptimizer, StepReport};
use comm_traits::Communicator;

use crate::admission::Admitter;
use crate::index::{IdSlots, IndexKind};
use crate::route::{self, Request, Wire};
use crate::rows::Rows;
use crate::{Admission, Eviction, OwnerRule, RowInit, RowPrecision, ShardError};

/// The slot of an id that has no row (not admitted): its gradients are
/// dropped.
const NONE: u32 = u32::MAX;

/// What a table is, independent of any communicator: its row dimension,
/// owner rule, this rank, how rows start, and the L2 term owners add.
#[derive(Debug, Clone)]
pub struct TableConfig {
    /// Values per row.
    pub dim: usize,
    /// Which rank owns each id (also fixes the group size).
    pub owner: OwnerRule,
    /// This rank, in `0..owner.ranks()`.
    pub rank: usize,
    /// The value a new row starts as.
    pub init: RowInit,
    /// `l2`: owners add `l2 · θ` once per row to the rank-summed gradient
    /// of a step (as a single process adds it once per row of a batch); 0
    /// adds nothing.
    pub l2: f32,
    /// When a seen id gets a row ([`Admission::Always`] by default).
    pub admission: Admission,
    /// Which rows are freed, if any (none by default).
    pub eviction: Option<Eviction>,
    /// How row values are stored ([`RowPrecision::F32`] by default; bf16
    /// and f16 halve the row bytes and round each update stochastically).
    pub precision: RowPrecision,
    /// Keys the stochastic rounding of bf16 / f16 rows (0 by default;
    /// unused with f32 rows). Every rank of a group must use the same seed
    /// (a restore checks it), as a single process would.
    pub rounding_seed: u64,
    /// The id → slot index's layout ([`IndexKind::Fast`] by default;
    /// [`IndexKind::Compact`] trades step speed for ≈ 9–10 instead of
    /// ≈ 21–36 B per row).
    pub index: IndexKind,
}

impl TableConfig {
    /// Rows of `dim` values owned by `owner`, this table being rank `rank`;
    /// zero initial rows, no L2.
    pub fn new(dim: usize, owner: OwnerRule, rank: usize) -> Self {
        Self {
            dim,
            owner,
            rank,
            init: RowInit::zeros(),
            l2: 0.0,
            admission: Admission::Always,
            eviction: None,
            precision: RowPrecision::F32,
            rounding_seed: 0,
            index: IndexKind::default(),
        }
    }

    /// With rows stored at `precision`, their stochastic rounding keyed by
    /// `rounding_seed`.
    #[must_use]
    pub fn with_precision(mut self, precision: RowPrecision, rounding_seed: u64) -> Self {
        self.precision = precision;
        self.rounding_seed = rounding_seed;
        self
    }

    /// With the id → slot index `index`.
    #[must_use]
    pub fn with_index(mut self, index: IndexKind) -> Self {
        self.index = index;
        self
    }

    /// With the admission rule `admission`.
    #[must_use]
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// With rows evicted by `eviction`.
    #[must_use]
    pub fn with_eviction(mut self, eviction: Eviction) -> Self {
        self.eviction = Some(eviction);
        self
    }

    /// With `init` for new rows.
    #[must_use]
    pub fn with_init(mut self, init: RowInit) -> Self {
        self.init = init;
        self
    }

    /// With the L2 term `l2`.
    #[must_use]
    pub fn with_l2(mut self, l2: f32) -> Self {
        self.l2 = l2;
        self
    }
}

/// Rows fetched by [`ShardedTable::lookup`] / [`lookup_eval`](ShardedTable::lookup_eval):
/// the sorted unique ids asked for and their rows, in that order.
///
/// [`Batch::default`] is an empty batch that cannot be applied: the buffer
/// [`lookup_into`](ShardedTable::lookup_into) fills step after step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// Sorted unique ids.
    pub ids: Vec<u64>,
    /// `ids.len() × dim` values: row `k` belongs to `ids[k]`.
    pub rows: Vec<f32>,
    /// The training lookup this is (0: an evaluation lookup).
    generation: u64,
}

impl Batch {
    /// Row of `ids[k]`.
    pub fn row(&self, k: usize) -> &[f32] {
        let d = self.rows.len() / self.ids.len().max(1);
        &self.rows[k * d..(k + 1) * d]
    }

    /// Position of `id` in [`ids`](Self::ids), if asked for.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }
}

/// Bytes one rank holds, split by what holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUse {
    /// Rows held.
    pub rows: u64,
    /// The id → slot index (its allocation, slack included).
    pub index_bytes: usize,
    /// Row values (`capacity ×` [`RowPrecision::bytes`]).
    pub row_bytes: usize,
    /// Sparse optimizer state, scratch buffers excluded (they are in
    /// [`scratch_bytes`](Self::scratch_bytes)).
    pub state_bytes: usize,
    /// Admission and eviction bookkeeping: the admission sketch, and with
    /// eviction on, each row's last-seen step and optimizer slot (8 B/row).
    pub bookkeeping_bytes: usize,
    /// Buffers kept across steps: the table's routing, row and gradient
    /// buffers (their capacity, i.e. the largest step's needs; they are
    /// cleared, never shrunk) plus the optimizer's scratch. Independent of
    /// the rows held: about `20 · dim + 80` bytes per id of the largest
    /// step (5.6 MiB at 8192 ids and `dim = 32`).
    pub scratch_bytes: usize,
}

/// Counters of one rank's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Ids this rank served as an owner in training lookups (every rank's
    /// requests summed): the load a skewed id stream puts on it.
    pub ids_served: u64,
    /// Bytes this rank sent in the table's exchanges (ids, rows, gradients;
    /// training and evaluation).
    pub bytes_sent: u64,
    /// Rows this rank freed by [`Eviction`].
    pub rows_evicted: u64,
    /// Gradient rows this rank dropped because their id had no row (not
    /// admitted yet), one per requesting rank and step.
    pub grads_dropped: u64,
}

/// The latest training lookup, awaiting its `apply` (its routing is
/// [`Scratch::req`] and [`Scratch::slots`]).
#[derive(Debug)]
pub(crate) struct Pending {
    generation: u64,
}

/// A step's buffers, kept across steps so that a step allocates nothing
/// once they have grown (with [`ShardedTable::lookup_into`]; `lookup`
/// allocates the [`Batch`] it returns): fresh ~1 MB buffers every step cost
/// a fresh `mmap` and its page faults each time (glibc serves blocks that
/// large with `mmap`, and trims its heap when they are freed). Cleared,
/// never shrunk; counted in [`MemoryUse::scratch_bytes`].
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    wire: Wire,
    /// The latest training lookup's routing (read by its `apply`).
    req: Request,
    /// Slot of every id of `req.received` ([`NONE`]: no row).
    slots: Vec<u32>,
    /// The routing of an evaluation lookup (apart from `req`: evaluation
    /// may run between a lookup and its apply).
    eval: Request,
    /// Distinct ids of a step that have no row yet.
    missing: Vec<u64>,
    /// The slot given to each of `missing` in this step ([`NONE`]: not
    /// yet), so that an id asked twice is inserted once, as known absent.
    new_slots: Vec<u32>,
    /// Rows served (owner side), or gradients sent.
    out: Vec<f32>,
    /// Rows or gradients received.
    got: Vec<f32>,
    /// One row.
    row: Vec<f32>,
    /// `apply`: received gradients in slot order, and the summed ones.
    order: Vec<u64>,
    keys: Vec<u64>,
    slot_ids: Vec<u64>,
    sums: Vec<f32>,
}

impl Scratch {
    /// Bytes held (capacity).
    fn bytes(&self) -> usize {
        self.wire.bytes()
            + self.req.bytes()
            + self.eval.bytes()
            + (self.slots.capacity() + self.new_slots.capacity()) * 4
            + (self.missing.capacity()
                + self.keys.capacity()
                + self.slot_ids.capacity()
                + self.order.capacity())
                * 8
            + (self.out.capacity()
                + self.got.capacity()
                + self.row.capacity()
                + self.sums.capacity())
                * 4
    }
}

/// One rank's part of a row-sharded embedding table: the rows this rank
/// owns (by the [`OwnerRule`]), their sparse optimizer's state, and the
/// exchanges that bring rows to the ranks that need them and gradients back.
///
/// See the [crate documentation](crate) for the data flow and an example.
#[derive(Debug)]
pub struct ShardedTable<O> {
    pub(crate) dim: usize,
    pub(crate) rank: usize,
    pub(crate) owner: OwnerRule,
    pub(crate) init: RowInit,
    pub(crate) l2: f32,
    pub(crate) index: IdSlots,
    pub(crate) rows: Rows,
    pub(crate) opt: O,
    /// Rows the optimizer's dense state has been grown to (never shrinks).
    pub(crate) opt_rows: u64,
    pub(crate) admit: Admitter,
    pub(crate) eviction: Option<Eviction>,
    /// With eviction on: each row's last training step (saturating `u32`).
    pub(crate) last_seen: Vec<u32>,
    pub(crate) pending: Option<Pending>,
    pub(crate) scratch: Scratch,
    pub(crate) generation: u64,
    pub(crate) stats: TableStats,
}

impl<O: SparseOptimizer> ShardedTable<O> {
    /// An empty table for rank `config.rank`, stepping its rows with `opt`.
    ///
    /// `opt` must keep its per-row state dense and growable
    /// (`RowIndex::Dense { rows: 0 }` in its configuration): the table owns
    /// the only id → slot map and grows the optimizer with it. For
    /// one-choice BASIS under [`OwnerRule::buckets`], build it over
    /// [`OwnerRule::partition`]`(rank)`.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] for `dim == 0`, a rank outside the owner
    /// rule's group, an optimizer of another dimension, or an invalid
    /// admission or eviction rule, or eviction with an optimizer that cannot
    /// free one row's state (`SparseOptimizer::swap_remove_row`);
    /// [`ShardError::OutOfMemory`] for an admission sketch that cannot be
    /// allocated.
    pub fn new(config: TableConfig, mut opt: O) -> Result<Self, ShardError> {
        if config.dim == 0 {
            return Err(ShardError::BadConfig("rows need at least one value"));
        }
        if config.rank >= config.owner.ranks() {
            return Err(ShardError::BadConfig("rank outside the owner rule's group"));
        }
        if opt.dim() != config.dim {
            return Err(ShardError::BadConfig(
                "the optimizer's dimension is not the table's",
            ));
        }
        if let Some(ev) = &config.eviction {
            ev.check()?;
            // An out-of-range slot is refused as such by an optimizer that
            // frees rows, as unsupported by one that does not.
            if let Err(RowStateError::Unsupported(_)) = opt.swap_remove_row(u64::MAX) {
                return Err(ShardError::BadConfig(
                    "eviction needs an optimizer that frees one row's state (swap_remove_row)",
                ));
            }
        }
        Ok(Self {
            admit: Admitter::new(config.admission)?,
            eviction: config.eviction,
            last_seen: Vec::new(),
            dim: config.dim,
            rank: config.rank,
            owner: config.owner,
            init: config.init,
            l2: config.l2,
            index: IdSlots::new(config.index),
            rows: Rows::new(config.dim, config.precision, config.rounding_seed),
            opt,
            opt_rows: 0,
            pending: None,
            scratch: Scratch::default(),
            generation: 0,
            stats: TableStats::default(),
        })
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The owner rule.
    pub fn owner(&self) -> &OwnerRule {
        &self.owner
    }

    /// Rows held by this rank.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether this rank holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sparse optimizer (its telemetry).
    pub fn optimizer(&self) -> &O {
        &self.opt
    }

    /// Traffic counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Row `id` (widened to f32) if this rank holds it.
    pub fn get(&self, id: u64) -> Option<Vec<f32>> {
        self.index.get(id).map(|s| self.rows.row(s))
    }

    /// How row values are stored.
    pub fn precision(&self) -> RowPrecision {
        self.rows.precision()
    }

    /// The seed of the rows' stochastic rounding
    /// ([`TableConfig::rounding_seed`]).
    pub fn rounding_seed(&self) -> u64 {
        self.rows.seed()
    }

    /// Bytes held: index, rows, optimizer state and bookkeeping, separately.
    pub fn memory(&self) -> MemoryUse {
        let m = self.opt.memory();
        MemoryUse {
            rows: self.len() as u64,
            index_bytes: self.index.bytes(),
            row_bytes: self.rows.bytes(),
            state_bytes: m.total_bytes - m.scratch,
            bookkeeping_bytes: self.admit.bytes() + self.last_seen.capacity() * 4,
            scratch_bytes: self.scratch.bytes() + self.rows.scratch_bytes() + m.scratch,
        }
    }

    /// The admission rule.
    pub fn admission(&self) -> Admission {
        self.admit.rule()
    }

    /// The eviction rule, if any.
    pub fn eviction(&self) -> Option<Eviction> {
        self.eviction
    }

    /// Training lookups done (the step counter admission and eviction use).
    pub fn steps(&self) -> u64 {
        self.generation
    }

    /// Frees the rows `ev` selects when `now` training steps are done:
    /// each freed slot is refilled by the last row (the optimizer's row
    /// state first, then the index, the row and its last-seen step), so an
    /// error leaves every row before it freed and the rest untouched.
    fn evict(&mut self, ev: Eviction, now: u64) -> Result<(), ShardError> {
        let mut ids = self.index.ids_by_slot();
        let gone = ev.select(&self.last_seen, &ids, now);
        for &e in &gone {
            self.opt
                .swap_remove_row(u64::from(e))
                .map_err(ShardError::RowState)?;
            self.opt_rows -= 1;
            self.index.swap_remove_slots(&mut ids, &[e]);
            let e = e as usize;
            self.rows.swap_remove(e);
            self.last_seen.swap_remove(e);
            self.stats.rows_evicted += 1;
        }
        Ok(())
    }

    /// `(id, slot)` of every row held, in id order.
    fn sorted_slots(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .index
            .ids_by_slot()
            .into_iter()
            .enumerate()
            .map(|(s, id)| (id, s as u32))
            .collect();
        v.sort_unstable_by_key(|p| p.0);
        v
    }

    /// `(id, row)` of every row held (widened to f32), in id order.
    pub fn sorted_rows(&self) -> Vec<(u64, Vec<f32>)> {
        self.sorted_slots()
            .into_iter()
            .map(|(id, s)| (id, self.rows.row(s)))
            .collect()
    }

    /// An order-independent checksum of this rank's rows: the wrapping sum,
    /// over the rows held, of a 64-bit hash of (id, values widened to f32).
    ///
    /// Guarantees: the same rows give the same checksum whatever order they
    /// were inserted, evicted or resharded in, and whichever index layout
    /// holds them; one changed id or one changed value (any bit) always
    /// changes it (each step of a row's hash is a bijection of its input,
    /// so that row's term changes and no other does); other differences
    /// (rows swapped, several changes) go unnoticed with probability
    /// ≈ 2⁻⁶⁴. It is a check, not a cryptographic digest. One pass over the
    /// index and the rows, allocating nothing (no sorted copy of the ids).
    pub fn checksum(&self) -> u64 {
        let mut sum = 0u64;
        self.index.for_each(|id, s| {
            sum = sum.wrapping_add(self.rows.row_hash(id, s));
        });
        sum
    }

    fn check_group(&self, comm: &dyn Communicator) -> Result<(), ShardError> {
        if comm.rank() != self.rank || comm.size() != self.owner.ranks() {
            return Err(ShardError::GroupMismatch {
                table: (self.rank, self.owner.ranks()),
                comm: (comm.rank(), comm.size()),
            });
        }
        Ok(())
    }

    /// Forward, collective (every rank calls it once per step, with its own
    /// ids, possibly none): the unique ids of `ids` go to their owners
    /// (`all_to_all_counts`, `all_to_all_v`), owners create the rows they
    /// do not hold yet from [`RowInit`] (growing the optimizer's state with
    /// them), and the rows come back (`all_to_all_v`). The returned batch is
    /// what [`apply`](Self::apply) takes the gradients of.
    ///
    /// # Errors
    /// [`ShardError::GroupMismatch`], [`ShardError::Comm`],
    /// [`ShardError::OutOfMemory`] / [`ShardError::Grow`] when the owner
    /// cannot grow (allocation is fallible: the table is unchanged).
    pub fn lookup(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
    ) -> Result<Batch, ShardError> {
        let mut batch = Batch::default();
        self.lookup_into(comm, ids, &mut batch)?;
        Ok(batch)
    }

    /// [`lookup`](Self::lookup) into `batch`, reusing its buffers: a
    /// training loop that keeps one `Batch` across steps allocates nothing
    /// per step once the buffers have grown (a fresh ~1 MB `Batch` each
    /// step is a fresh `mmap` and its page faults with glibc's allocator).
    ///
    /// # Errors
    /// As [`lookup`](Self::lookup); `batch` is then empty and cannot be
    /// applied.
    pub fn lookup_into(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
        batch: &mut Batch,
    ) -> Result<(), ShardError> {
        batch.generation = 0;
        batch.ids.clear();
        batch.rows.clear();
        // The buffers go back whatever the outcome.
        let mut scratch = core::mem::take(&mut self.scratch);
        let out = self.lookup_with(comm, ids, &mut scratch, batch);
        self.scratch = scratch;
        if out.is_err() {
            batch.generation = 0;
            batch.ids.clear();
            batch.rows.clear();
        }
        out
    }

    fn lookup_with(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
        s: &mut Scratch,
        batch: &mut Batch,
    ) -> Result<(), ShardError> {
        self.check_group(comm)?;
        self.pending = None;
        let step = self.generation + 1;
        if let Some(ev) = self.eviction
            && ev.sweeps_before(step)
        {
            self.evict(ev, self.generation)?;
        }
        self.admit.begin_step(step);
        let before = comm.stats();
        route::request(comm, &self.owner, ids, &mut s.wire, &mut s.req)?;
        self.slots_for(step, s)?;
        self.stats.ids_served += s.req.received.len() as u64;
        let d = self.dim;
        let Scratch {
            req,
            slots,
            out,
            row,
            ..
        } = s;
        out.clear();
        out.try_reserve_exact(slots.len() * d)
            .map_err(|_| ShardError::OutOfMemory { rows: self.len() })?;
        row.clear();
        row.resize(d, 0.0);
        for (&slot, &id) in slots.iter().zip(&req.received) {
            if slot == NONE {
                // Not admitted: the row it would start as.
                self.init.fill(id, row);
                self.rows.round_nearest(row);
                out.extend_from_slice(row);
            } else {
                self.rows.extend_row(slot, out);
            }
        }
        self.answer(
            comm,
            &s.req,
            &s.out,
            &mut s.wire,
            &mut s.got,
            &mut batch.rows,
        )?;
        self.generation += 1;
        self.stats.bytes_sent += comm.stats().since(&before).bytes_sent;
        self.pending = Some(Pending {
            generation: self.generation,
        });
        batch.ids.extend_from_slice(&s.req.uniq);
        batch.generation = self.generation;
        Ok(())
    }

    /// Evaluation, collective: like [`lookup`](Self::lookup) but read only.
    /// Owners return the rows they hold and, for an id no rank holds yet,
    /// the row it **would start as** ([`RowInit`], rounded to the row
    /// precision) without inserting it —
    /// so evaluating unseen ids neither grows the table nor differs from a
    /// single-process model that holds every row from its start. The batch
    /// cannot be applied.
    ///
    /// # Errors
    /// [`ShardError::GroupMismatch`], [`ShardError::Comm`],
    /// [`ShardError::OutOfMemory`].
    pub fn lookup_eval(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
    ) -> Result<Batch, ShardError> {
        let mut batch = Batch::default();
        self.lookup_eval_into(comm, ids, &mut batch)?;
        Ok(batch)
    }

    /// [`lookup_eval`](Self::lookup_eval) into `batch`, reusing its buffers
    /// (as [`lookup_into`](Self::lookup_into)).
    ///
    /// # Errors
    /// As [`lookup_eval`](Self::lookup_eval); `batch` is then empty.
    pub fn lookup_eval_into(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
        batch: &mut Batch,
    ) -> Result<(), ShardError> {
        batch.generation = 0;
        batch.ids.clear();
        batch.rows.clear();
        let mut scratch = core::mem::take(&mut self.scratch);
        let out = self.lookup_eval_with(comm, ids, &mut scratch, batch);
        self.scratch = scratch;
        if out.is_err() {
            batch.ids.clear();
            batch.rows.clear();
        }
        out
    }

    fn lookup_eval_with(
        &mut self,
        comm: &mut dyn Communicator,
        ids: &[u64],
        s: &mut Scratch,
        batch: &mut Batch,
    ) -> Result<(), ShardError> {
        self.check_group(comm)?;
        let before = comm.stats();
        route::request(comm, &self.owner, ids, &mut s.wire, &mut s.eval)?;
        let d = self.dim;
        let Scratch { eval, out, row, .. } = s;
        out.clear();
        out.try_reserve_exact(eval.received.len() * d)
            .map_err(|_| ShardError::OutOfMemory { rows: self.len() })?;
        row.clear();
        row.resize(d, 0.0);
        for &id in &eval.received {
            match self.index.get(id) {
                Some(slot) => self.rows.extend_row(slot, out),
                None => {
                    self.init.fill(id, row);
                    self.rows.round_nearest(row);
                    out.extend_from_slice(row);
                }
            }
        }
        self.answer(
            comm,
            &s.eval,
            &s.out,
            &mut s.wire,
            &mut s.got,
            &mut batch.rows,
        )?;
        self.stats.bytes_sent += comm.stats().since(&before).bytes_sent;
        batch.ids.extend_from_slice(&s.eval.uniq);
        Ok(())
    }

    /// Send `serve` (rows of `req.received`) back and lay the rows this rank
    /// asked for out in `req.uniq` order into `rows` (cleared first).
    fn answer(
        &self,
        comm: &mut dyn Communicator,
        req: &Request,
        serve: &[f32],
        wire: &mut Wire,
        got: &mut Vec<f32>,
        rows: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        let d = self.dim;
        route::exchange_f32_into(comm, wire, serve, &req.per_rank, &req.per_owner, d, got)?;
        rows.clear();
        rows.resize(req.uniq.len() * d, 0.0);
        for (k, id) in req.sent.iter().enumerate() {
            let pos = req.uniq.binary_search(id).unwrap_or(0);
            rows[pos * d..(pos + 1) * d].copy_from_slice(&got[k * d..(k + 1) * d]);
        }
        Ok(())
    }

    /// The slot of every id of `s.req.received` into `s.slots` (training
    /// step `step`), creating the missing ones the admission rule admits in
    /// the order given (so slot numbers are a function of the id sequence)
    /// and growing the optimizer's dense state with them; [`NONE`] for an
    /// id left without a row. One index lookup per id, then one
    /// get-or-insert per miss (the same new id may come from several
    /// ranks). Fallible allocation: on error the table is unchanged except
    /// for reserved capacity.
    fn slots_for(&mut self, step: u64, s: &mut Scratch) -> Result<(), ShardError> {
        let Scratch {
            req,
            slots: out,
            missing,
            new_slots,
            row: fresh,
            ..
        } = s;
        let ids = &req.received;
        let want = self.len().saturating_add(ids.len());
        let oom = ShardError::OutOfMemory { rows: want };
        if want >= u32::MAX as usize {
            return Err(oom);
        }
        out.clear();
        out.try_reserve_exact(ids.len())
            .map_err(|_| ShardError::OutOfMemory { rows: want })?;
        self.index.get_many(ids, out);
        // Distinct new ids (several ranks may ask for the same new id),
        // sorted: admission decides once per id and step, in id order.
        missing.clear();
        missing
            .try_reserve_exact(ids.len())
            .map_err(|_| ShardError::OutOfMemory { rows: want })?;
        missing.extend(
            ids.iter()
                .zip(out.iter())
                .filter(|&(_, &slot)| slot == NONE)
                .map(|(&id, _)| id),
        );
        missing.sort_unstable();
        missing.dedup();
        let news = missing.len();
        self.index.try_reserve(news)?;
        let values = news
            .checked_mul(self.dim)
            .ok_or(ShardError::OutOfMemory { rows: want })?;
        self.rows
            .reserve_growth(values)
            .map_err(|_| ShardError::OutOfMemory { rows: want })?;
        let evicting = self.eviction.is_some();
        if evicting {
            self.last_seen
                .try_reserve(news)
                .map_err(|_| ShardError::OutOfMemory { rows: want })?;
        }
        let before = self.len();
        if !self.admit.always() {
            missing.retain(|&id| self.admit.admit(id, step));
        }
        if !missing.is_empty() {
            fresh.clear();
            fresh.resize(self.dim, 0.0);
            new_slots.clear();
            new_slots
                .try_reserve_exact(missing.len())
                .map_err(|_| ShardError::OutOfMemory { rows: want })?;
            new_slots.resize(missing.len(), NONE);
            for (slot, &id) in out.iter_mut().zip(ids) {
                if *slot != NONE {
                    continue;
                }
                let Ok(k) = missing.binary_search(&id) else {
                    continue;
                };
                if new_slots[k] != NONE {
                    // Asked again in this step: inserted at its first ask.
                    *slot = new_slots[k];
                    continue;
                }
                // `get_many` above found no row for it and it was not
                // inserted since: the index need not look it up again.
                let s = match self.index.insert_absent(id) {
                    Ok(s) => s,
                    Err(e) => {
                        self.undo_inserts(before, ids, out);
                        return Err(e);
                    }
                };
                new_slots[k] = s;
                self.init.fill(id, fresh);
                self.rows.push(fresh);
                if evicting {
                    self.last_seen.push(0);
                }
                *slot = s;
            }
        }
        // Grow the optimizer once the rows are in: a failed insertion
        // above then leaves it as it was (growing it first left it grown
        // past the rows, and the table's snapshot unrestorable), and a
        // failure here undoes the insertions.
        let after = self.len() as u64;
        if after > self.opt_rows {
            if let Err(e) = self.opt.grow_rows(after) {
                self.undo_inserts(before, ids, out);
                return Err(ShardError::Grow(e));
            }
            self.opt_rows = after;
        }
        if evicting {
            let now = u32::try_from(step).unwrap_or(u32::MAX);
            for &slot in out.iter() {
                if slot != NONE {
                    self.last_seen[slot as usize] = now;
                }
            }
        }
        Ok(())
    }

    /// Undoes the rows [`slots_for`](Self::slots_for) created (slots
    /// `before..`, given in `out` for the ids `ids`) and its admission
    /// decisions, last slot first, so that nothing moves: the table is as
    /// before the call. New slots were handed out in the order of their
    /// ids' first occurrences, so one backward pass meets each last slot.
    fn undo_inserts(&mut self, before: usize, ids: &[u64], out: &[u32]) {
        for (&slot, &id) in out.iter().zip(ids).rev() {
            if slot != NONE && slot as usize >= before && self.index.remove_last(id) {
                self.rows.swap_remove(slot as usize);
                if self.eviction.is_some() {
                    self.last_seen.pop();
                }
            }
        }
        self.admit.rollback();
    }

    /// Backward, collective (every rank calls it after its `lookup`):
    /// `grads` (`batch.ids.len() × dim`, row `k` the gradient of
    /// `batch.ids[k]`) go to the owners (`all_to_all_v`); an owner sums an
    /// id's gradients **in rank order**, adds `l2 · θ` once per row, and
    /// steps its optimizer over its slots, keyed by the global ids (BASIS
    /// hashes ids, not slots). Returns the owner's step report.
    ///
    /// # Errors
    /// [`ShardError::GradLength`], [`ShardError::StaleBatch`] (checked
    /// before any exchange), [`ShardError::Comm`], [`ShardError::Step`].
    pub fn apply(
        &mut self,
        comm: &mut dyn Communicator,
        batch: &Batch,
        grads: &[f32],
    ) -> Result<StepReport, ShardError> {
        self.check_group(comm)?;
        let d = self.dim;
        if grads.len() != batch.ids.len() * d {
            return Err(ShardError::GradLength {
                expected: batch.ids.len() * d,
                got: grads.len(),
            });
        }
        match self.pending.take() {
            Some(p) if batch.generation != 0 && p.generation == batch.generation => {}
            other => {
                self.pending = other;
                return Err(ShardError::StaleBatch);
            }
        }
        let mut scratch = core::mem::take(&mut self.scratch);
        let out = self.apply_with(comm, batch, grads, &mut scratch);
        self.scratch = scratch;
        out
    }

    /// [`apply`](Self::apply) once the batch is known to be the pending
    /// lookup's (`s.req`, `s.slots`).
    fn apply_with(
        &mut self,
        comm: &mut dyn Communicator,
        batch: &Batch,
        grads: &[f32],
        s: &mut Scratch,
    ) -> Result<StepReport, ShardError> {
        let d = self.dim;
        let before = comm.stats();
        let Scratch {
            wire,
            req,
            slots,
            out: send,
            got,
            row: theta,
            order,
            keys,
            slot_ids: ids,
            sums: rows,
            ..
        } = s;
        send.clear();
        send.reserve(req.sent.len() * d);
        for id in &req.sent {
            let pos = batch.ids.binary_search(id).unwrap_or(0);
            send.extend_from_slice(&grads[pos * d..(pos + 1) * d]);
        }
        route::exchange_f32_into(comm, wire, send, &req.per_owner, &req.per_rank, d, got)?;
        self.stats.bytes_sent += comm.stats().since(&before).bytes_sent;
        // Sum duplicates (one id sent by several ranks) in rank order:
        // sorting by (slot, position) keeps the rank order within a slot.
        // Both fit a `u64` (positions are below `u32::MAX`, checked by
        // `slots_for`), and distinct keys need no stable sort (no merge
        // buffer to allocate).
        order.clear();
        order.extend(
            slots
                .iter()
                .enumerate()
                .map(|(k, &slot)| u64::from(slot) << 32 | k as u64),
        );
        order.sort_unstable();
        keys.clear();
        ids.clear();
        rows.clear();
        for &key in order.iter() {
            let k = (key & u64::from(u32::MAX)) as usize;
            if slots[k] == NONE {
                // Not admitted: the gradient is dropped.
                self.stats.grads_dropped += 1;
                continue;
            }
            let g = &got[k * d..(k + 1) * d];
            if ids.last() == Some(&u64::from(slots[k])) {
                let at = rows.len() - d;
                for (a, b) in rows[at..].iter_mut().zip(g) {
                    *a += *b;
                }
            } else {
                ids.push(u64::from(slots[k]));
                keys.push(req.received[k]);
                rows.extend_from_slice(g);
            }
        }
        if self.l2 > 0.0 {
            for (slot, g) in ids.iter().zip(rows.chunks_exact_mut(d)) {
                theta.clear();
                self.rows.extend_row(*slot as u32, theta);
                for (g, &t) in g.iter_mut().zip(theta.iter()) {
                    *g += self.l2 * t;
                }
            }
        }
        // Narrow rows round with the training step this batch belongs to
        // (0 for the first), as a single process stepping once per batch
        // (`LowPrecisionRows`) does.
        let opt = &mut self.opt;
        let (keys, ids, rows) = (&*keys, &*ids, &*rows);
        self.rows
            .step(keys, ids, batch.generation - 1, |table| {
                opt.step_keyed(keys, ids, rows, table)
            })
            .map_err(ShardError::Step)
    }

    /// This rank's whole state: ids and rows in slot order, the optimizer's
    /// exported state, and what identifies the table (what a checkpoint
    /// holds; [`restore_snapshot`](Self::restore_snapshot) reads it back).
    pub fn snapshot(&self) -> crate::TableSnapshot {
        crate::TableSnapshot {
            rank: self.rank as u64,
            ranks: self.owner.ranks() as u64,
            dim: self.dim as u64,
            owner: self.owner.identity(),
            ids: self.index.ids_by_slot(),
            rows: self.rows.to_f32(),
            precision: self.rows.precision(),
            rounding_seed: self.rows.seed(),
            optimizer: self.opt.export_state(),
            step: self.generation,
            admission: self.admit.rule().identity(),
            counters: self.admit.counters().to_vec(),
            last_seen: self.last_seen.clone(),
            opt_rows: self.opt_rows,
            eviction: self.eviction.is_some(),
        }
    }

    /// Replace this (empty) table's rows and optimizer state by `snap`'s.
    ///
    /// # Errors
    /// [`ShardError::NotEmpty`]; [`ShardError::Mismatch`] for a snapshot of
    /// another rank, group size, dimension, owner rule, admission rule, or
    /// with eviction on where the table has it off (or the reverse);
    /// [`ShardError::Corrupt`] for row values that are not `ids × dim`, a
    /// repeated id, or admission counters or last-seen steps of the wrong
    /// size, or row values the snapshot's precision cannot hold exactly;
    /// [`ShardError::Precision`] for rows of another [`RowPrecision`] (a
    /// row is never silently widened or rounded to restore it), and
    /// [`ShardError::Mismatch`] for narrow rows under another rounding
    /// seed; [`ShardError::OutOfMemory`] / [`ShardError::Grow`];
    /// [`ShardError::State`] when the optimizer refuses the state. On any
    /// error the table still holds no row (the optimizer may have grown
    /// never-updated rows, which new rows then use).
    pub fn restore_snapshot(&mut self, snap: crate::TableSnapshot) -> Result<(), ShardError> {
        if !self.is_empty() {
            return Err(ShardError::NotEmpty);
        }
        self.check_precision(&snap)?;
        let expect = [
            ("rank", self.rank as u64, snap.rank),
            ("group size", self.owner.ranks() as u64, snap.ranks),
            ("row dimension", self.dim as u64, snap.dim),
            ("owner rule", self.owner.identity(), snap.owner),
            (
                "admission rule",
                self.admit.rule().identity(),
                snap.admission,
            ),
            (
                "eviction (on = 1)",
                u64::from(self.eviction.is_some()),
                u64::from(snap.eviction),
            ),
        ];
        for (what, expected, found) in expect {
            if expected != found {
                return Err(ShardError::Mismatch {
                    what,
                    expected,
                    found,
                });
            }
        }
        if Some(snap.rows.len()) != snap.ids.len().checked_mul(self.dim) {
            return Err(ShardError::Corrupt("row values are not ids × dim"));
        }
        let n = snap.ids.len();
        if n >= u32::MAX as usize {
            return Err(ShardError::OutOfMemory { rows: n });
        }
        if self.eviction.is_some() && snap.last_seen.len() != n {
            return Err(ShardError::Corrupt("last-seen steps are not one per row"));
        }
        // This crate grows and shrinks the optimizer with the rows: its
        // dense range is the row count (0: a snapshot built by hand).
        if snap.opt_rows != 0 && snap.opt_rows != n as u64 {
            return Err(ShardError::Corrupt("optimizer rows are not the row count"));
        }
        let mut admit = self.admit.clone();
        admit.set_counters(snap.counters)?;
        let mut rows = Rows::new(self.dim, self.rows.precision(), self.rows.seed());
        rows.replace(snap.rows).map_err(|()| {
            ShardError::Corrupt("a row value is not exact at the checkpoint's precision")
        })?;
        let mut index = IdSlots::new(self.index.kind());
        index.try_reserve(n)?;
        for &id in &snap.ids {
            if !index.insert_new(id)? {
                return Err(ShardError::Corrupt("an id appears twice"));
            }
        }
        let opt_rows = n as u64;
        if opt_rows > self.opt_rows {
            self.opt.grow_rows(opt_rows).map_err(ShardError::Grow)?;
            self.opt_rows = opt_rows;
        }
        self.opt
            .import_state(&snap.optimizer)
            .map_err(ShardError::State)?;
        self.index = index;
        self.rows = rows;
        self.last_seen = snap.last_seen;
        self.admit = admit;
        self.generation = snap.step;
        self.pending = None;
        Ok(())
    }

    /// Refuses `snap` unless its rows are stored as this table's are:
    /// same precision and, for narrow rows, the same rounding seed.
    pub(crate) fn check_precision(&self, snap: &crate::TableSnapshot) -> Result<(), ShardError> {
        let mine = self.rows.precision();
        if snap.precision != mine {
            return Err(ShardError::Precision {
                table: mine,
                checkpoint: snap.precision,
            });
        }
        if mine != RowPrecision::F32 && snap.rounding_seed != self.rows.seed() {
            return Err(ShardError::Mismatch {
                what: "rounding seed",
                expected: self.rows.seed(),
                found: snap.rounding_seed,
            });
        }
        Ok(())
    }
}
