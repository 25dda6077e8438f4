#pragma once
// What the ops of one CUDA stream need, owned by one queue (kernels/cuda/backend.cu):
// the stream itself, a cuBLAS handle bound to it with a workspace of its own, a cuDNN
// handle, the cuDNN descriptor/algorithm plans, the optimizer's slice tables and scratch
// buffers (device and pinned host). Never shared between streams or threads: a queue is used by one host thread at
// a time, and everything here is only touched by work queued on its stream, so nothing
// needs a lock and results do not depend on what other streams do.
//
// The ops reach it through Context::resources (kernels/cuda/context.hpp); an op that needs
// a library handle or scratch memory throws std::logic_error when the context has none.
// Internal to kernels/cuda/ (.cu files only).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/handle.cuh"

namespace codistill::kernels::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file,
                                    int line);

// Plans cached per shape (conv2d.cu) and slice tables (optimizer.cu), defined where used.
struct CudnnPlans;
CudnnPlans* new_cudnn_plans();
struct CudnnPlansDeleter {
  void operator()(CudnnPlans* p) const noexcept;
};
struct OptimizerTables;
OptimizerTables* new_optimizer_tables(int device, cudaStream_t stream);
struct OptimizerTablesDeleter {
  void operator()(OptimizerTables* p) const noexcept;  // frees device memory: stream idle
};

class StreamResources {
 public:
  // A fresh non-blocking stream on `device`; the library handles come on first use.
  StreamResources(int device, bool allow_tf32, bool bf16_gemm = false);
  // Waits for the stream, then frees everything (errors ignored: the runtime may already
  // be shutting down at exit).
  ~StreamResources();
  StreamResources(const StreamResources&) = delete;
  StreamResources& operator=(const StreamResources&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  bool allow_tf32() const { return allow_tf32_; }
  Context context() { return {device_, stream_.get(), allow_tf32_, this, bf16_gemm_}; }

  // Bound to the stream; cuBLAS's workspace is a buffer of this stream's own (so that
  // concurrent streams never share one), atomics off (reproducible results).
  cublasHandle_t cublas();
  cudnnHandle_t cudnn();
  CudnnPlans& cudnn_plans();
  OptimizerTables& optimizer_tables();

  // Scratch device memory for one op, at least `bytes`, grown on demand and kept. Ops of
  // this stream run in order, so they share it freely; when it must grow, the stream is
  // synchronized before the old buffer goes back to the cache. Valid until the next call.
  void* scratch(std::size_t bytes);
  // The same for page-locked host memory (asynchronous copies to and from the device need
  // it): for small per-op uploads and results, so no op pins and unpins memory per call.
  void* pinned_scratch(std::size_t bytes);
  // Device memory for the bf16 operands of one GEMM (linear.cu), as scratch() but its own
  // buffer: an op may hold scratch() across the GEMMs it runs (the fused head's chunks).
  void* bf16_scratch(std::size_t bytes);

 private:
  int device_;
  bool allow_tf32_;
  bool bf16_gemm_;
  StreamHandle stream_;
  CublasHandle cublas_;
  void* cublas_workspace_ = nullptr;
  CudnnHandle cudnn_;
  std::unique_ptr<CudnnPlans, CudnnPlansDeleter> cudnn_plans_;
  std::unique_ptr<OptimizerTables, OptimizerTablesDeleter> optimizer_tables_;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  void* bf16_ = nullptr;
  std::size_t bf16_bytes_ = 0;
  void* pinned_ = nullptr;
  std::size_t pinned_bytes_ = 0;
};

// The resources behind ctx; throws std::logic_error naming `op` when ctx has none (a
// context not made by a queue).
StreamResources& resources_of(const Context& ctx, const char* op);

}  // namespace codistill::kernels::cuda

#define CODISTILL_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                      \
    cublasStatus_t codistill_status_ = (expr);                                              \
    if (codistill_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::codistill::kernels::cuda::throw_cublas_error(codistill_status_, #expr, __FILE__,    \
                                                     __LINE__);                             \
  } while (0)

#define CODISTILL_CUDNN_CHECK(expr)                                                         \
  do {                                                                                      \
    cudnnStatus_t codistill_status_ = (expr);                                               \
    if (codistill_status_ != CUDNN_STATUS_SUCCESS)                                          \
      ::codistill::kernels::cuda::throw_cudnn_error(codistill_status_, #expr, __FILE__,     \
                                                    __LINE__);                              \
  } while (0)
