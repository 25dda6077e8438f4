// Launcher detection from the environment, through a fake environment.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "codistill/dist/launch.hpp"

using namespace codistill::dist;

namespace {

LaunchInfo detect(const std::map<std::string, std::string>& env) {
  return detect_launch([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

int local_rank(const std::map<std::string, std::string>& env) {
  return launch_local_rank([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("launch: a plain process is not launched and auto means single", "[dist]") {
  LaunchInfo info = detect({{"HOME", "/root"}});
  CHECK_FALSE(info.launched());
  CHECK(info.rank == 0);
  CHECK(info.size == 1);
  CHECK(resolve_kind("auto", info) == "single");
  CHECK(resolve_kind("mpi", info) == "mpi");  // an explicit kind is kept
}

TEST_CASE("launch: OpenMPI's mpirun, before the PMIx variables it also sets", "[dist]") {
  LaunchInfo info = detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMIX_RANK", "2"}});
  CHECK(info.launcher == "openmpi");
  CHECK(info.rank == 2);
  CHECK(info.size == 3);
  CHECK(info.evidence == "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3");
  CHECK(resolve_kind("auto", info) == "mpi");
  CHECK(resolve_kind("single", info) == "single");
}

TEST_CASE("launch: MPICH/PMI, PMIx and an srun job step", "[dist]") {
  LaunchInfo pmi = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}});
  CHECK(pmi.launcher == "pmi");
  CHECK(pmi.size == 4);
  LaunchInfo pmix = detect({{"PMIX_RANK", "0"}});
  CHECK(pmix.launcher == "pmix");
  CHECK(pmix.size == 0);  // PMIx does not say in the environment
  LaunchInfo srun = detect({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_ID", "0"},
                            {"SLURM_NTASKS", "8"}});
  CHECK(srun.launcher == "slurm");
  CHECK(srun.rank == 5);
  CHECK(srun.size == 8);
  CHECK(resolve_kind("auto", srun) == "mpi");
}

TEST_CASE("launch: a launcher of one process means single, an unknown size mpi", "[dist]") {
  // srun --ntasks=1 (a worker of the sbatch script without --ranks), under any --mpi.
  LaunchInfo step = detect({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_STEP_ID", "3"},
                            {"PMIX_RANK", "0"}});
  CHECK(step.launched());
  CHECK(step.size == 1);
  CHECK(resolve_kind("auto", step) == "single");
  CHECK(resolve_kind("mpi", step) == "mpi");  // asked for explicitly: MPI even for one rank
  LaunchInfo np1 = detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  CHECK(resolve_kind("auto", np1) == "single");
  LaunchInfo pmix = detect({{"PMIX_RANK", "0"}});
  CHECK(resolve_kind("auto", pmix) == "mpi");
}

TEST_CASE("launch: an sbatch script itself (no job step) is one process", "[dist]") {
  LaunchInfo info = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "17"}});
  CHECK_FALSE(info.launched());
  CHECK(resolve_kind("auto", info) == "single");
}

TEST_CASE("launch: a malformed or inconsistent variable is an error naming it", "[dist]") {
  CHECK_THROWS_WITH(detect({{"OMPI_COMM_WORLD_RANK", "one"}}), Catch::Contains("OMPI_COMM_WORLD_RANK='one'"));
  CHECK_THROWS_WITH(detect({{"PMI_RANK", "-1"}}), Catch::Contains("PMI_RANK='-1'"));
  CHECK_THROWS_WITH(detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "2x"}}), Catch::Contains("PMI_SIZE='2x'"));
  CHECK_THROWS_WITH(detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}}),
                    Catch::Contains("must be below the size"));
}

TEST_CASE("launch: the local rank the nccl group picks its GPU by", "[dist]") {
  CHECK(local_rank({{"HOME", "/root"}}) == -1);  // no launcher: the group asks MPI's ranks instead
  CHECK(local_rank({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}}) == 3);
  CHECK(local_rank({{"MPI_LOCALRANKID", "2"}}) == 2);
  CHECK(local_rank({{"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}}) == 1);
  // An sbatch script (no job step) is one process, whatever SLURM_LOCALID says.
  CHECK(local_rank({{"SLURM_LOCALID", "1"}}) == -1);
  CHECK_THROWS_WITH(local_rank({{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}}),
                    Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK='x' is not a non-negative integer"));
}
