#pragma once
// Kind "nccl": the ranks of MPI_COMM_WORLD as one group whose float all-reduce of device
// memory runs on the GPU through NCCL (start_device_all_reduce_sum); its host-memory
// collectives (all_reduce_sum, all_reduce_sum_f64, broadcast, barrier) go through an "mpi"
// group it holds, which also bootstraps NCCL (rank 0's ncclUniqueId is broadcast over it).
// Declared without CUDA, NCCL or MPI types; defined in nccl_group.cpp, compiled only when
// CMake found CUDA, MPI and NCCL (CODISTILL_HAVE_NCCL).
//
// Device: local rank modulo the CUDA devices visible to the process. The local rank is the
// launcher's (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, an srun step's SLURM_LOCALID:
// dist::launch_local_rank), else this rank's position among the group's ranks on the same
// host (host names exchanged over MPI). So with one visible GPU per task (srun
// --gpus-per-task=1) every rank takes device 0 of its own; with all of a node's GPUs visible,
// rank k of the node takes GPU k. Two ranks on one GPU (more ranks than GPUs on a node) is
// refused by NCCL itself when the communicator is made.
#include <memory>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

// Throws ProcessGroupError when no CUDA device is visible (before MPI is touched), when MPI
// cannot start (as make_mpi_group), or when NCCL cannot connect the ranks before
// options.timeout.
std::unique_ptr<ProcessGroup> make_nccl_group(const GroupOptions& options);

}  // namespace codistill::dist
