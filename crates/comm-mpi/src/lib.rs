//! comm-mpi (under construction).
