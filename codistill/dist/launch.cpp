#include "codistill/dist/launch.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace codistill::dist {
namespace {

// A non-negative integer variable, or -1 when it is not set.
int read_int(const EnvLookup& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return -1;
  std::string_view text(value);
  int out = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || out < 0)
    throw std::invalid_argument("environment variable " + std::string(name) + "='" + std::string(text) +
                                "' is not a non-negative integer (set by a parallel launcher?)");
  return out;
}

// One way a launcher announces ranks: the variable naming the rank and the one naming the
// size (nullptr: not announced), and a variable that must also be set (nullptr: none).
struct Scheme {
  const char* launcher;
  const char* rank_var;
  const char* size_var;
  const char* also_required;
};

// Order matters: mpirun of OpenMPI also sets PMIX_RANK, and srun --mpi=pmix sets both
// PMIX_RANK and SLURM_PROCID; the most specific scheme wins.
constexpr Scheme schemes[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID"},
    {"pmix", "PMIX_RANK", nullptr, nullptr},
};

}  // namespace

LaunchInfo detect_launch(const EnvLookup& lookup) {
  EnvLookup getenv = lookup ? lookup : EnvLookup([](const char* name) -> const char* { return std::getenv(name); });
  for (const Scheme& s : schemes) {
    if (s.also_required != nullptr && getenv(s.also_required) == nullptr) continue;
    int rank = read_int(getenv, s.rank_var);
    if (rank < 0) continue;
    LaunchInfo info;
    info.launcher = s.launcher;
    info.rank = rank;
    info.evidence = std::string(s.rank_var) + "=" + std::to_string(rank);
    info.size = 0;
    if (s.size_var != nullptr) {
      int size = read_int(getenv, s.size_var);
      if (size >= 0) {
        info.size = size;
        // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on `" " + string`.
        info.evidence.append(" ").append(s.size_var).append("=").append(std::to_string(size));
        if (rank >= size)
          throw std::invalid_argument("launcher environment is inconsistent: " + info.evidence +
                                      " (the rank must be below the size)");
      }
    }
    return info;
  }
  return {};
}

int launch_local_rank(const EnvLookup& lookup) {
  EnvLookup getenv = lookup ? lookup : EnvLookup([](const char* name) -> const char* { return std::getenv(name); });
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    int local = read_int(getenv, var);
    if (local >= 0) return local;
  }
  // As in detect_launch: only an srun job step, not the sbatch script around it.
  if (getenv("SLURM_STEP_ID") != nullptr) return read_int(getenv, "SLURM_LOCALID");
  return -1;
}

std::string resolve_kind(const std::string& kind, const LaunchInfo& launch) {
  if (kind != "auto") return kind;
  // A launcher that says it started one process (srun --ntasks=1: each worker of the
  // sbatch script without --ranks; mpirun -np 1) gets the identity group: one rank has no
  // peer to exchange with, and going through MPI would make such a step depend on MPI
  // being built and on the site's srun offering a PMI that this MPI speaks (Debian's
  // OpenMPI aborts in MPI_Init under srun --mpi=none or pmi2). Size 0 (PMIx alone does
  // not say) may be several ranks: MPI.
  return launch.launched() && launch.size != 1 ? "mpi" : "single";
}

}  // namespace codistill::dist
