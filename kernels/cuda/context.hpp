#pragma once
// Where and how a CUDA op runs, with no CUDA type in sight: the device ordinal, the stream
// (an opaque cudaStream_t; null is the legacy default stream), whether float32 GEMMs
// and convolutions may use TF32 tensor cores (opt-in from the config, off by default so
// that CUDA results stay within float32 tolerance of the CPU) and the per-stream resources
// of the queue that owns the stream (its cuBLAS and cuDNN handles, workspaces and plan
// caches: kernels/cuda/resources.cuh). A CUDA queue (kernels/cuda/backend.cu) makes the
// contexts its ops run with; the ops that need a library handle or scratch memory (linear,
// conv2d, maxpool2d, optimizer steps, bias gradients of many rows) throw without resources.
//
// Stream and Event own a CUDA stream/event behind a pimpl. Every function throws
// std::runtime_error carrying file, line and the CUDA message on failure, and "built
// without CUDA" in a CPU-only build.
#include <memory>

namespace codistill::kernels::cuda {

struct Context {
  int device = 0;
  void* stream = nullptr;  // cudaStream_t
  bool allow_tf32 = false;
  void* resources = nullptr;  // the queue's StreamResources (owned by the queue), bound to stream
  // Mixed precision (QueueOptions::compute == bf16): float32 GEMMs round their operands to
  // bf16 (kernels/cuda/bf16.hpp) and multiply with float32 accumulation (linear.cu).
  bool bf16_gemm = false;
};

// A non-blocking stream on one device (does not synchronize with the legacy stream), with
// the per-stream resources its ops need (handles, workspaces, plan caches), owned like a
// CUDA queue's: destroying it waits for the stream, then frees them. (The pre-backend API;
// a kernels::Queue of the CUDA backend is the same thing behind kernels/backend.hpp.)
class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const;
  void* handle() const;     // cudaStream_t
  void* resources() const;  // its StreamResources
  Context context(bool allow_tf32 = false) const {
    return {device(), handle(), allow_tf32, resources()};
  }
  void synchronize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A timing-free event (cudaEventDisableTiming) used to order streams without blocking the
// host: record on the producer, wait on the consumer.
class Event {
 public:
  explicit Event(int device = 0);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(void* stream);        // cudaEventRecord
  void wait(void* stream) const;    // cudaStreamWaitEvent: stream waits, the host does not
  bool ready() const;               // cudaEventQuery == cudaSuccess
  void synchronize() const;         // host waits

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Host waits for every operation queued on the stream.
void stream_synchronize(const Context& ctx);

}  // namespace codistill::kernels::cuda
