//! The custom training loop of `custom_loop_local.rs` under `mpirun -np N`
//! (feature `mpi`): every rank trains over MPI, then runs the same loop over
//! `LocalComm` with N threads in-process, and checks the two give the same
//! model bit for bit (`cargo xtask mpi` runs it at N = 2 and 3).

#[path = "common/training.rs"]
mod training;

use basis_std::local::LocalComm;
use comm_mpi::MpiComm;
use comm_traits::Communicator;
use std::process::ExitCode;

fn main() -> ExitCode {
    let steps = 60;
    let mut comm = match MpiComm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("custom_loop_mpi: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (me, p) = (comm.rank(), comm.size());
    let mpi = training::train(&mut comm, steps);
    let local = LocalComm::run(p, |mut c| training::train(&mut c, steps));
    let local = local.into_iter().nth(me);
    match (mpi, local) {
        (Ok(m), Some(Ok(Ok(l)))) if m == l => {
            println!(
                "custom_loop_mpi rank {me}/{p}: MPI == LocalComm (model_crc32 {:08x}, loss {:.4} -> {:.4})",
                m.model_crc32, m.first_loss, m.last_loss
            );
            ExitCode::SUCCESS
        }
        (m, l) => {
            println!("custom_loop_mpi rank {me}/{p}: FAILED: MPI {m:?}, LocalComm {l:?}");
            ExitCode::FAILURE
        }
    }
}
