#include "kernels/cpu/impl.hpp"

#include <omp.h>

#include <stdexcept>
#include <string>

// OpenBLAS's own setter; declared here so that no particular cblas.h variant is needed.
extern "C" void openblas_set_num_threads(int num_threads);

namespace codistill::kernels::cpu {

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("thread count must be >= 1, got " + std::to_string(n));
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace codistill::kernels::cpu
