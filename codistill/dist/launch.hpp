#pragma once
// Was this process started by a parallel launcher (mpirun, srun, MPICH's mpiexec)? Read
// from the environment the launcher sets before MPI is initialized, so that kind "auto"
// can choose "mpi" under a launcher and "single" otherwise without touching MPI.
#include <functional>
#include <string>

namespace codistill::dist {

struct LaunchInfo {
  // "" when no launcher was detected; else "openmpi", "pmi" (MPICH Hydra, srun
  // --mpi=pmi2), "pmix" (srun --mpi=pmix, PRRTE) or "slurm" (an srun job step).
  std::string launcher;
  int rank = 0;
  int size = 1;  // 0 when the launcher does not say (PMIx alone)
  // The variables that decided it, e.g. "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=3".
  std::string evidence;

  bool launched() const { return !launcher.empty(); }
};

// Reads variables through `getenv` (std::getenv by default; tests pass a map). Only an srun
// job step counts as Slurm (SLURM_STEP_ID set): an sbatch script itself also has
// SLURM_PROCID=0 but is one process. Throws std::invalid_argument naming the variable
// when a rank or size is not a non-negative integer or the rank is not below the size.
using EnvLookup = std::function<const char*(const char*)>;
LaunchInfo detect_launch(const EnvLookup& getenv = {});

// This process's rank among the ranks of its launch on its own node, as the launcher says
// (OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, an srun step's SLURM_LOCALID, in
// that order), or -1 when none does. The nccl group picks its device from it. Throws
// std::invalid_argument naming the variable when it is not a non-negative integer.
int launch_local_rank(const EnvLookup& getenv = {});

// The kind "auto" stands for: "mpi" when launched with a size other than 1, else "single"
// (no launcher, or a launcher of one process). Any other kind is returned as it is (the
// factory validates it).
std::string resolve_kind(const std::string& kind, const LaunchInfo& launch);

}  // namespace codistill::dist
