// The processes of one run: this process's rank and how many there are, as the launcher that
// started them says (mpirun, mpiexec). Read from the environment, so no MPI library is linked; a
// process started by hand is rank 0 of 1, and a run of one process changes nothing anywhere.
#pragma once

#include <string>

namespace lmt {

struct ProcessGroup {
  int rank = 0;
  int count = 1;
  std::string source;  // where rank and count came from ("OMPI_COMM_WORLD_RANK/SIZE"); "" for 1

  bool several() const { return count > 1; }
};

// OpenMPI's mpirun (OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE), else MPICH's and Intel MPI's
// Hydra (PMI_RANK / PMI_SIZE), else rank 0 of 1. A value that is not a number, or a rank outside
// [0, count), is a UserError naming the variable.
ProcessGroup process_group_from_env();

}  // namespace lmt
