// libFuzzer target: the checkpoint reader (checkpoint/reader.cpp through verify, read_meta,
// list_tensors and read) on arbitrary bytes. Every malformed file must end in a
// CheckpointError (or a VerifyResult saying why), never a crash or a hang, and must leave
// no HDF5 object open (checked after every input: a handle leaked on an error path aborts).
// Memory HDF5 itself loses on some malformed files is its own (run with -detect_leaks=0:
// scripts/run_fuzz.sh).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include <hdf5.h>

#include <cstdlib>
#include <iostream>

#include "checkpoint/checkpoint.hpp"

namespace ck = codistill::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/codistill-fuzz-ckpt-" + std::to_string(::getpid()) + ".h5";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    (void)ck::verify(path);
  } catch (const std::exception&) {
  }
  try {
    (void)ck::read_meta(path);
  } catch (const std::exception&) {
  }
  try {
    (void)ck::list_tensors(path);
  } catch (const std::exception&) {
  }
  try {
    (void)ck::read(path);
  } catch (const std::exception&) {
  }
  if (const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); open != 0) {
    std::cerr << "fuzz_checkpoint: " << open << " HDF5 object(s) left open by the reader\n";
    std::abort();
  }
  return 0;
}
