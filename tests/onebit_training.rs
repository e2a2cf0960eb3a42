//! Cross-crate: 1-bit Adam (`onebit-adam`) on in-process ranks
//! (`basis-std::LocalComm`), checkpointed mid-run to files with
//! `basis-std::checkpoint` — error buffers included — and resumed by fresh
//! optimizers: the resumed run is bit-identical to an uninterrupted one.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use basis::adam::testing::{LogisticProblem, run_steps};
use basis::adam::{Config, GroupSpec, OneBitAdam};
use basis::comm::Communicator;
use basis_std::checkpoint::{self, Checkpoint};
use basis_std::local::LocalComm;

const RANKS: usize = 3;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn checkpoint_files_resume_one_bit_adam_bit_identically() {
    let pb = LogisticProblem::generate(RANKS, 128, 300, 8, 21);
    let d = pb.params();
    let groups = [GroupSpec::one_bit(d - 1), GroupSpec::full_precision(1)];
    let cfg = Config::default().with_lr(0.01).with_freeze_step(8);
    let dir = std::env::temp_dir().join(format!("basis-onebit-training-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let straight: Vec<Vec<f32>> = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups, cfg).unwrap();
        let mut x = vec![0.0f32; d];
        run_steps(&mut c, &pb, &mut opt, &mut x, 30, Some(32)).unwrap();
        x
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();

    let resumed: Vec<Vec<f32>> = LocalComm::run(RANKS, |mut c| {
        let path = dir.join(format!("rank{}.ckpt", c.rank()));
        {
            let mut opt = OneBitAdam::with_groups(&groups, cfg).unwrap();
            let mut x = vec![0.0f32; d];
            run_steps(&mut c, &pb, &mut opt, &mut x, 17, Some(32)).unwrap();
            let mut ck = Checkpoint::new();
            ck.insert("optimizer", opt.export_state()).unwrap();
            ck.insert(
                "params",
                x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
            )
            .unwrap();
            checkpoint::save(&path, &ck).unwrap();
        }
        let ck = checkpoint::load(&path).unwrap();
        let mut opt = OneBitAdam::with_groups(&groups, cfg).unwrap();
        opt.import_state(ck.get("optimizer").unwrap()).unwrap();
        assert!(opt.error_norms()[0].worker > 0.0, "error buffers restored");
        let mut x: Vec<f32> = ck
            .get("params")
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        run_steps(&mut c, &pb, &mut opt, &mut x, 13, Some(32)).unwrap();
        x
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    std::fs::remove_dir_all(&dir).unwrap();

    for (a, b) in straight.iter().zip(&resumed) {
        assert_eq!(bits(a), bits(b));
        assert_eq!(bits(a), bits(&straight[0]));
    }
    assert!(pb.loss(&straight[0]) < pb.loss(&vec![0.0; d]));
}
