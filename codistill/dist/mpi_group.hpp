#pragma once
// Kind "mpi": the ranks of MPI_COMM_WORLD as one group, on host memory (OpenMPI from
// Debian). Declared without MPI types; defined in mpi_group.cpp, which is compiled only
// when CMake found MPI (CODISTILL_HAVE_MPI).
#include <memory>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

// Initializes MPI (MPI_THREAD_SERIALIZED) unless it already is; finalizes it when the
// last mpi group is destroyed cleanly. MPI cannot be initialized again in one process, so
// a group made after that throws ProcessGroupError.
std::unique_ptr<ProcessGroup> make_mpi_group(const GroupOptions& options);

}  // namespace codistill::dist
