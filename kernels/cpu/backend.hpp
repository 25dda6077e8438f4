#pragma once
// The CPU backend: host memory, synchronous queues, and the ops of kernels/cpu/ — the
// fast paths (OpenBLAS, OpenMP, vectorized loops) or, on a queue made with
// QueueOptions::reference, the plain reference loops that every other path is tested
// against. float32 and float64 everywhere (float64 for gradient checks).
#include "kernels/backend.hpp"

namespace codistill::kernels {

Backend& cpu_backend();

}  // namespace codistill::kernels
