// Streams, events and per-device properties (see context.hpp).
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/handle.cuh"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {

// ---- Stream ------------------------------------------------------------------------

struct Stream::Impl {
  // TF32 comes with each context (Context::allow_tf32), not from the handles' defaults.
  explicit Impl(int device) : resources(device, /*allow_tf32=*/false) {}
  StreamResources resources;
};

Stream::Stream(int device) : impl_(std::make_unique<Impl>(device)) {}

// ~StreamResources waits for the stream, then frees the handles, buffers and the stream.
Stream::~Stream() = default;

int Stream::device() const { return impl_->resources.device(); }
void* Stream::handle() const { return impl_->resources.stream(); }
void* Stream::resources() const { return &impl_->resources; }

void Stream::synchronize() const {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device()));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(impl_->resources.stream()));
}

// ---- Event -------------------------------------------------------------------------

struct Event::Impl {
  int device = 0;
  EventHandle event;
};

Event::Event(int device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  impl_->event = make_timing_free_event();
}

Event::~Event() {
  if (!impl_ || !impl_->event) return;
  // Impl destroys the event after this, with its own device current; without a runtime
  // (cudaSetDevice fails at exit) it is left alone.
  if (cudaSetDevice(impl_->device) != cudaSuccess) impl_->event.release();
}

void Event::record(void* stream) {
  CODISTILL_CUDA_CHECK(cudaSetDevice(impl_->device));
  CODISTILL_CUDA_CHECK(cudaEventRecord(impl_->event.get(), static_cast<cudaStream_t>(stream)));
}

void Event::wait(void* stream) const {
  // The waiting stream may live on another device: no cudaSetDevice needed for the wait.
  CODISTILL_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), impl_->event.get(), 0));
}

bool Event::ready() const {
  CODISTILL_CUDA_CHECK(cudaSetDevice(impl_->device));
  return event_reached(impl_->event.get());
}

void Event::synchronize() const {
  CODISTILL_CUDA_CHECK(cudaSetDevice(impl_->device));
  CODISTILL_CUDA_CHECK(cudaEventSynchronize(impl_->event.get()));
}

void stream_synchronize(const Context& ctx) {
  detail::use_device(ctx);
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(detail::stream_of(ctx)));
}

// ---- device properties ---------------------------------------------------------------

namespace detail {

const DeviceInfo& device_info(int device) {
  // Read once per device; the map only grows and its nodes never move, so the reference
  // stays valid after the lock is released.
  static std::mutex mutex;
  static auto* cache = new std::map<int, DeviceInfo>();  // leaked: usable during exit
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(device);
  if (it != cache->end()) return it->second;
  DeviceInfo info;
  CODISTILL_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device));
  CODISTILL_CUDA_CHECK(cudaDeviceGetAttribute(&info.l2_bytes, cudaDevAttrL2CacheSize, device));
  CODISTILL_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device));
  return cache->emplace(device, info).first->second;
}

}  // namespace detail
}  // namespace codistill::kernels::cuda
