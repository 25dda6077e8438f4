#pragma once
// The CPU fast path of a float32 linear layer's forward, y = x w^T + b: oneDNN's matmul
// primitive (its brgemm kernels), with the bias added and a relu applied inside the kernel. On fmnist_mlp's
// first layer (batch 128, 784 -> 256, two threads) it ran at 449-452 GFLOP/s where the
// sgemm interface split over our threads (kernels/cpu/gemm.cpp) ran at 378-393: the
// sgemm driver packs w^T for every call, the brgemm kernel reads it as it lies. The backward
// GEMMs measured the same either way and stay on gemm.cpp.
//
// One DnnlMatmul per CPU queue, as DnnlConv: the engine and stream, and the primitives per
// shape and thread count (oneDNN partitions the work for the threads it sees when the
// primitive is made; making one costs far more than running it), freed with the queue. Calls
// from several threads take turns (a mutex). The primitive runs on the caller's OpenMP
// threads; called inside a parallel region it declines (returns false).
//
// Deterministic: a shape and thread count always get the same primitive and oneDNN's CPU
// matmul sums in a fixed order, so outputs are bit-identical run to run. They are not those
// of gemm.cpp's path (another kernel, another order of the K sums).
#include <cstdint>
#include <memory>

namespace codistill::kernels::cpu {

class DnnlMatmul {
 public:
  DnnlMatmul();
  ~DnnlMatmul();
  DnnlMatmul(const DnnlMatmul&) = delete;
  DnnlMatmul& operator=(const DnnlMatmul&) = delete;

  // y[M, N] = x[M, K] w[N, K]^T + b[N] (b may be null), then relu(y) if `relu` (in the
  // kernel: no pass of its own); row-major, M, N, K >= 1. False when
  // oneDNN offers only its reference kernel for the shape, or when called inside a parallel
  // region (the caller then takes the gemm path); nothing is written then.
  bool linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M, std::int64_t N,
                      std::int64_t K, bool relu = false);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace codistill::kernels::cpu
