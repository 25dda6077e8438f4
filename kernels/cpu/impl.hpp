#pragma once
// Every CPU op has two implementations behind one signature:
//   reference - plain loops, obviously correct, used by the tests as ground truth;
//   fast      - OpenBLAS GEMMs, OpenMP threads, loops written to vectorize.
// OpenBLAS runs single-threaded (see set_num_threads): all parallelism is OpenMP's, so
// the two thread pools never fight over the cores.
namespace codistill::kernels::cpu {

enum class Impl { reference, fast };

// Sets the OpenMP thread count used by fast paths and pins OpenBLAS to one thread.
void set_num_threads(int n);
int num_threads();

}  // namespace codistill::kernels::cpu
