#pragma once
// A check of an HDF5 file's global heap collections before libhdf5 reads one.
//
// Variable-length strings live in global heap collections ("GCOL"). libhdf5 1.10
// (Debian 12's) loops forever parsing a collection whose free-space object has size 0,
// and reads past the collection for an object that overruns it (found by
// fuzz/fuzz_checkpoint; the input is fuzz/findings/checkpoint-hang-H5HG_read.h5).
// Checkpoints are written with fixed-length strings, so only older files and damaged
// ones hold a variable-length string; before such a string is read, every collection in
// the file is parsed here, by the same walk libhdf5 makes, with bounds.
#include <string>

namespace codistill::checkpoint {

// Throws std::runtime_error naming the offset and the fault when a global heap
// collection in the file would make libhdf5 loop or overrun; returns the number of
// collections checked. Stray bytes "GCOL" that are not version-1 collections are
// ignored (libhdf5 refuses those itself).
int check_global_heaps(const std::string& path);

}  // namespace codistill::checkpoint
