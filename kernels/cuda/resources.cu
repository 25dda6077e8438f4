// A queue's per-stream resources (resources.cuh) and the library error messages.
#include <algorithm>
#include <string>
#include <utility>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                           " failed: " + cublasGetStatusName(status) + ": " +
                           cublasGetStatusString(status));
}

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file,
                                    int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                           " failed: " + cudnnGetErrorString(status));
}

StreamResources::StreamResources(int device, bool allow_tf32, bool bf16_gemm)
    : device_(device), allow_tf32_(allow_tf32), bf16_gemm_(bf16_gemm) {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  // Non-blocking: work on this stream does not wait for (nor block) the legacy default
  // stream, which synchronous cudaMemcpy calls elsewhere in the process use.
  CODISTILL_CUDA_CHECK(cudaStreamCreateWithFlags(stream_.put(), cudaStreamNonBlocking));
  // Blocks freed from now on wait for this stream's queued work before reuse.
  register_stream(device_, stream_.get());
}

StreamResources::~StreamResources() {
  if (cudaSetDevice(device_) != cudaSuccess) {
    // No runtime left: nothing to free, and the library handles must not be touched.
    cublas_.release();
    cudnn_.release();
    stream_.release();
    return;
  }
  // Everything below may still be in use by queued work.
  cudaStreamSynchronize(stream_.get());
  cublas_.reset();
  cudnn_.reset();
  cudnn_plans_.reset();
  optimizer_tables_.reset();
  cached_free(cublas_workspace_, device_);
  cached_free(scratch_, device_);
  cached_free(bf16_, device_);
  pinned_free(pinned_);
  unregister_stream(device_, stream_.get());
  stream_.reset();
  cudaGetLastError();  // leave no error of this teardown behind for the thread's next call
}

cublasHandle_t StreamResources::cublas() {
  if (cublas_) return cublas_.get();
  CODISTILL_CUDA_CHECK(cudaSetDevice(device_));
  // The size cuBLAS recommends: 32 MiB on Hopper, 4 MiB before. Allocated first, so that a
  // failure leaves no half-made handle behind.
  const std::size_t ws_bytes =
      (detail::device_info(device_).major >= 9 ? std::size_t{32} : std::size_t{4}) << 20;
  if (!cublas_workspace_) cublas_workspace_ = cached_malloc(ws_bytes, device_);
  // Configured before it is kept: on a failure, UniqueHandle destroys the half-made one.
  CublasHandle h;
  CODISTILL_CUBLAS_CHECK(cublasCreate(h.put()));
  // cublasSetStream resets the workspace to cuBLAS's default pool, which concurrent
  // streams would share: set the stream first, then this stream's own workspace.
  CODISTILL_CUBLAS_CHECK(cublasSetStream(h.get(), stream_.get()));
  CODISTILL_CUBLAS_CHECK(cublasSetWorkspace(h.get(), cublas_workspace_, ws_bytes));
  // No atomics-based reductions inside cuBLAS kernels: results reproducible run to run.
  CODISTILL_CUBLAS_CHECK(cublasSetAtomicsMode(h.get(), CUBLAS_ATOMICS_NOT_ALLOWED));
  CODISTILL_CUBLAS_CHECK(
      cublasSetMathMode(h.get(), allow_tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  cublas_ = std::move(h);
  return cublas_.get();
}

cudnnHandle_t StreamResources::cudnn() {
  if (cudnn_) return cudnn_.get();
  CODISTILL_CUDA_CHECK(cudaSetDevice(device_));
  CudnnHandle h;
  CODISTILL_CUDNN_CHECK(cudnnCreate(h.put()));
  if (const cudnnStatus_t st = cudnnSetStream(h.get(), stream_.get()); st != CUDNN_STATUS_SUCCESS)
    throw_cudnn_error(st, "cudnnSetStream(handle, stream)", __FILE__, __LINE__);
  cudnn_ = std::move(h);
  return cudnn_.get();
}

CudnnPlans& StreamResources::cudnn_plans() {
  if (!cudnn_plans_) cudnn_plans_.reset(new_cudnn_plans());
  return *cudnn_plans_;
}

OptimizerTables& StreamResources::optimizer_tables() {
  if (!optimizer_tables_) optimizer_tables_.reset(new_optimizer_tables(device_, stream_.get()));
  return *optimizer_tables_;
}

namespace {

// A device buffer of this stream grown to at least `bytes` (kept between calls); when it
// must grow, the stream is synchronized first: work queued earlier may still use it.
void* grow_device(void*& buf, std::size_t& have, std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  if (have >= bytes) return buf;
  if (buf) {
    CODISTILL_CUDA_CHECK(cudaSetDevice(device));
    CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
    cached_free(buf, device);
    buf = nullptr;
    have = 0;
  }
  const std::size_t size = std::max(bytes, std::size_t{1} << 20);  // avoid regrowing by crumbs
  buf = cached_malloc(size, device);
  have = size;
  return buf;
}

}  // namespace

void* StreamResources::scratch(std::size_t bytes) {
  return grow_device(scratch_, scratch_bytes_, bytes, device_, stream_.get());
}

void* StreamResources::bf16_scratch(std::size_t bytes) {
  return grow_device(bf16_, bf16_bytes_, bytes, device_, stream_.get());
}

void* StreamResources::pinned_scratch(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (pinned_bytes_ >= bytes) return pinned_;
  if (pinned_) {
    // A copy queued earlier on this stream may still read or write the old buffer.
    CODISTILL_CUDA_CHECK(cudaSetDevice(device_));
    CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    pinned_free(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
  }
  const std::size_t size = std::max(bytes, std::size_t{4} << 10);
  pinned_ = pinned_malloc(size);
  pinned_bytes_ = size;
  return pinned_;
}

StreamResources& resources_of(const Context& ctx, const char* op) {
  if (!ctx.resources)
    throw std::logic_error(std::string(op) +
                           " (cuda): the context has no queue resources (cuBLAS/cuDNN handles, "
                           "workspaces); run it on a queue of the CUDA backend");
  auto& r = *static_cast<StreamResources*>(ctx.resources);
  // The handles are bound to the resources' stream: work on another would be misordered.
  if (ctx.stream != r.stream() || ctx.device != r.device())
    throw std::logic_error(std::string(op) +
                           " (cuda): the context's stream or device is not its resources' own");
  return r;
}

namespace detail {

void* stream_workspace(const Context& ctx, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  return resources_of(ctx, "scratch memory").scratch(bytes);
}

}  // namespace detail
}  // namespace codistill::kernels::cuda
