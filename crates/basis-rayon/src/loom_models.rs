//! loom models of the Hogwild tables (`cargo xtask loom`).
//!
//! Each model runs 2–3 threads on one bucket and checks, over every
//! interleaving loom explores (bounded by `LOOM_MAX_PREEMPTIONS`): no update
//! is lost, and a reader never sees a torn `(M, V)` pair. Each model also
//! records what its executions observed and asserts that loom did reach the
//! interesting interleavings (a model that explored one schedule would prove
//! nothing). Two deliberately broken variants — plain load+store, and `M`/`V`
//! in separate words — run under `catch_unwind` to show the models catch the
//! bugs they are about.

#![allow(
    clippy::std_instead_of_core,
    clippy::unwrap_used,
    reason = "test code: models mix std bookkeeping with loom types; a panic is a failing model"
)]

use crate::sync::{AtomicU32, Ordering};
use crate::table::MomentParams;
use crate::{AtomicMomentTable, MomentTable, StripedMomentTable};
use loom::sync::Arc;
use loom::thread;
use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex as StdMutex;

/// Bit patterns of `(Σg, Σg²)` over every subset of `grads` (sum mode).
fn consistent_pairs(grads: &[f32]) -> BTreeSet<(u32, u32)> {
    (0..1u32 << grads.len())
        .map(|mask| {
            let (m, v) = grads
                .iter()
                .enumerate()
                .filter(|(i, _)| mask >> i & 1 == 1)
                .fold((0.0f32, 0.0f32), |(m, v), (_, &g)| (m + g, v + g * g));
            (m.to_bits(), v.to_bits())
        })
        .collect()
}

fn full_sum(grads: &[f32]) -> (f32, f32) {
    grads
        .iter()
        .fold((0.0, 0.0), |(m, v), &g| (m + g, v + g * g))
}

/// Observations collected across a model's executions (outside loom's view).
type Seen<T> = std::sync::Arc<StdMutex<BTreeSet<T>>>;

fn seen<T>() -> Seen<T> {
    std::sync::Arc::new(StdMutex::new(BTreeSet::new()))
}

/// One thread per gradient `accumulate`s into bucket 0 while another reads;
/// the final totals must be exact, and every read a consistent pair.
fn sum_model<T: MomentTable + Send + 'static>(make: fn() -> T, grads: &'static [f32]) {
    let allowed = consistent_pairs(grads);
    let reads: Seen<(u32, u32)> = seen();
    let log = std::sync::Arc::clone(&reads);
    loom::model(move || {
        let table = Arc::new(make());
        let writers: Vec<_> = grads
            .iter()
            .map(|&g| {
                let table = Arc::clone(&table);
                thread::spawn(move || table.accumulate(0, &[g]).unwrap())
            })
            .collect();
        let (mut m, mut v) = ([0.0], [0.0]);
        table.snapshot(0, &mut m, &mut v).unwrap();
        log.lock().unwrap().insert((m[0].to_bits(), v[0].to_bits()));
        for w in writers {
            w.join().unwrap();
        }
        let t = table.snapshot(0, &mut m, &mut v).unwrap();
        assert_eq!(t, grads.len() as u64, "lost a step count");
        assert_eq!((m[0], v[0]), full_sum(grads), "lost a moment update");
    });
    let reads = reads.lock().unwrap();
    assert!(reads.is_subset(&allowed), "torn read among {reads:?}");
    assert!(
        reads.len() >= 2,
        "loom explored too little: reads {reads:?}"
    );
}

fn atomic_1x1() -> AtomicMomentTable {
    AtomicMomentTable::new(1, 1).unwrap()
}

fn striped_1x1() -> StripedMomentTable {
    StripedMomentTable::new(1, 1).unwrap()
}

#[test]
fn loom_atomic_no_lost_update_two_threads() {
    sum_model(atomic_1x1, &[1.0, 2.0]);
}

#[test]
fn loom_atomic_no_lost_update_three_threads() {
    sum_model(atomic_1x1, &[1.0, 2.0, 4.0]);
}

#[test]
fn loom_striped_no_lost_update_two_threads() {
    sum_model(striped_1x1, &[1.0, 2.0]);
}

/// Two Adam updates race; the result must be one of the two serial orders,
/// bit for bit, and loom must reach both orders.
#[test]
fn loom_atomic_adam_update_is_one_serial_order() {
    let p = MomentParams::default();
    let serial = |first: f32, second: f32| {
        let (m, v) = p.ema(0.0, 0.0, first);
        let (m, v) = p.ema(m, v, second);
        (m.to_bits(), v.to_bits())
    };
    let orders = [serial(1.0, 3.0), serial(3.0, 1.0)];
    assert_ne!(orders[0], orders[1]);
    let finals: Seen<(u32, u32)> = seen();
    let log = std::sync::Arc::clone(&finals);
    loom::model(move || {
        let table = Arc::new(atomic_1x1());
        let threads: Vec<_> = [1.0f32, 3.0]
            .into_iter()
            .map(|g| {
                let table = Arc::clone(&table);
                thread::spawn(move || {
                    let mut dir = [0.0];
                    table.adam_update(0, &[g], &p, &mut dir).unwrap();
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        let (mut m, mut v) = ([0.0], [0.0]);
        assert_eq!(table.snapshot(0, &mut m, &mut v).unwrap(), 2);
        let got = (m[0].to_bits(), v[0].to_bits());
        assert!(orders.contains(&got), "result {got:?} is no serial order");
        log.lock().unwrap().insert(got);
    });
    assert_eq!(
        finals.lock().unwrap().len(),
        2,
        "loom reached only one order"
    );
}

/// The striped table promises more: a snapshot is a whole bucket
/// (`t`, every `M_j`, every `V_j`) after exactly `t` updates.
#[test]
fn loom_striped_snapshot_is_whole_bucket() {
    let ts: Seen<u64> = seen();
    let log = std::sync::Arc::clone(&ts);
    loom::model(move || {
        let table = Arc::new(StripedMomentTable::new(1, 2).unwrap());
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let table = Arc::clone(&table);
                thread::spawn(move || table.accumulate(0, &[1.0, 2.0]).unwrap())
            })
            .collect();
        let (mut m, mut v) = ([0.0; 2], [0.0; 2]);
        let t = table.snapshot(0, &mut m, &mut v).unwrap();
        let tf = t as f32;
        assert_eq!(
            (m, v),
            ([tf, 2.0 * tf], [tf, 4.0 * tf]),
            "snapshot mixes updates"
        );
        log.lock().unwrap().insert(t);
        for w in writers {
            w.join().unwrap();
        }
    });
    assert_eq!(
        *ts.lock().unwrap(),
        BTreeSet::from([0, 1, 2]),
        "loom explored too little"
    );
}

/// Runs `model`; true when loom found an execution failing with a panic
/// whose message contains `expect` (any other panic is re-raised).
fn loom_finds_failure(expect: &str, model: impl Fn() + Sync + Send + 'static) -> bool {
    match catch_unwind(AssertUnwindSafe(|| loom::model(model))) {
        Ok(()) => false,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            assert!(
                msg.contains(expect),
                "model failed for another reason: {msg}"
            );
            true
        }
    }
}

/// The model bites: plain load + store instead of CAS loses an update.
#[test]
fn loom_catches_lost_update_in_racy_variant() {
    let found = loom_finds_failure("lost update", || {
        let table = Arc::new(atomic_1x1());
        let threads: Vec<_> = [1.0f32, 2.0]
            .into_iter()
            .map(|g| {
                let table = Arc::clone(&table);
                thread::spawn(move || table.accumulate_racy(0, &[g]))
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        let (mut m, mut v) = ([0.0], [0.0]);
        table.snapshot(0, &mut m, &mut v).unwrap();
        assert_eq!((m[0], v[0]), (3.0, 5.0), "lost update");
    });
    assert!(found, "loom did not find the lost update of load+store");
}

/// `M` and `V` in two words, each updated by its own CAS: no update is lost,
/// but a reader can see `M` after an update and `V` before it.
#[derive(Debug)]
struct SplitPair {
    m: AtomicU32,
    v: AtomicU32,
}

impl SplitPair {
    fn add(word: &AtomicU32, x: f32) {
        let mut cur = word.load(Ordering::Relaxed);
        while let Err(actual) = word.compare_exchange_weak(
            cur,
            (f32::from_bits(cur) + x).to_bits(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            cur = actual;
        }
    }
}

/// The torn-pair model bites: with `M` and `V` in separate words it fails.
#[test]
fn loom_catches_torn_pair_in_split_variant() {
    let allowed = consistent_pairs(&[2.0]);
    let found = loom_finds_failure("torn pair", move || {
        let pair = Arc::new(SplitPair {
            m: AtomicU32::new(0),
            v: AtomicU32::new(0),
        });
        let reader = Arc::clone(&pair);
        let allowed = allowed.clone();
        let h = thread::spawn(move || {
            let m = reader.m.load(Ordering::Relaxed);
            let v = reader.v.load(Ordering::Relaxed);
            assert!(allowed.contains(&(m, v)), "torn pair ({m:#x}, {v:#x})");
        });
        SplitPair::add(&pair.m, 2.0);
        SplitPair::add(&pair.v, 4.0);
        h.join().unwrap();
    });
    assert!(found, "loom did not find the torn pair of split words");
}
