// The CUDA backend (kernels/backend.hpp): device memory, queues, events and copies here;
// each op's entry points in its kernels/cuda/<op>.cu; the classes in backend_impl.cuh.
//
// Ownership
//   - CudaBackend: one per process (cuda_backend()), with no state of its own. Device
//     memory comes from the caching allocator's per-device caches (allocator.cu), which
//     live as long as the process.
//   - CudaQueue: owns a non-blocking stream on its device and everything per-stream its
//     ops use (StreamResources, resources.cuh): the cuBLAS handle (bound to the stream,
//     with a workspace of its own), the cuDNN handle, the cuDNN descriptor and algorithm
//     plans, the optimizer's slice tables and scratch buffers. Handles and caches are made
//     on first use. ~CudaQueue synchronizes the stream, then frees all of it.
//   - CudaEvent: owns one timing-free cudaEvent_t of one device (make_event), recorded on
//     any queue of that device, as often as wanted; it may outlive those queues.
//   - Tensors: device buffers from allocate() go back to the cache with their last
//     reference; staging buffers (staging_for) come from the pinned-memory cache and go
//     back to it with theirs (no cudaMallocHost/cudaFreeHost per teacher reload).
//
// Stream ordering
//   - Work queued on one queue (ops, copy, zero) runs in queue order; the host waits only
//     in synchronize(), Event::synchronize(), distill_loss (its result comes back to the
//     host), copies from or to pageable host memory (cudaMemcpyAsync stages them), and the
//     set-up paths copy_sync/zero_sync (whole device, before and after).
//   - Two queues are ordered only by events: record() on the producer, wait() on the
//     consumer (the consumer's stream waits, the host does not). wait() sees the event as
//     last recorded when wait() is called; an event never recorded is reached already.
//   - Freeing is safe at any time: the allocator hands a freed block out again only after
//     an event recorded at the free on every queue's stream of the device has completed
//     (allocator.hpp), so a tensor may be dropped while another queue still reads it.
//   - Staging memory is read or written by the device when the queue gets there: do not
//     refill a staging tensor copied to the device, nor read one copied from the device,
//     before the queue has passed the copy (an event or synchronize()).
//   - A queue is used by one host thread at a time (its handles are not thread-safe);
//     different queues may be driven from different threads.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/memory.hpp"

namespace codistill::kernels::cuda {

namespace {

std::string describe(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

void check_same_size(const Tensor& dst, const Tensor& src, const char* what) {
  if (dst.numel() != src.numel() || dst.dtype() != src.dtype())
    throw std::invalid_argument(std::string(what) + " (cuda): " + describe(src) + " into " +
                                describe(dst) + ": numel and dtype must match");
}

cudaMemcpyKind kind_of(const Tensor& dst, const Tensor& src) {
  const bool to_device = dst.device().is_cuda(), from_device = src.device().is_cuda();
  if (to_device && from_device) return cudaMemcpyDeviceToDevice;
  if (to_device) return cudaMemcpyHostToDevice;
  if (from_device) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

// The host waits for everything queued on the device, on any stream.
void wait_for_device(int device) {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  CODISTILL_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

// ---- events ------------------------------------------------------------------------------

// The event is destroyed with the object (handle.cuh): safe while work before it is
// pending, the driver releases it once reached.
CudaEvent::CudaEvent(int device) : device_(device) {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  event_ = make_timing_free_event();
}

void CudaEvent::synchronize() { CODISTILL_CUDA_CHECK(cudaEventSynchronize(event_.get())); }

bool CudaEvent::ready() { return event_reached(event_.get()); }

// ---- queues ------------------------------------------------------------------------------

CudaQueue::CudaQueue(Backend& backend, Device device, QueueOptions options)
    : Queue(backend, device, options),
      resources_(std::make_unique<StreamResources>(device.index, options.allow_tf32,
                                                   options.compute == Compute::bf16)) {}

void CudaQueue::synchronize() {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device().index));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

std::unique_ptr<kernels::Event> CudaQueue::make_event() {
  return std::make_unique<CudaEvent>(device().index);
}

void CudaQueue::record(kernels::Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (!e || e->device() != device().index)
    throw std::invalid_argument("Queue::record (cuda): the event was not made by a queue of " +
                                device().str() + " (make it with this queue's make_event)");
  CODISTILL_CUDA_CHECK(cudaSetDevice(device().index));
  CODISTILL_CUDA_CHECK(cudaEventRecord(e->handle(), stream()));
}

void CudaQueue::wait(kernels::Event& event) {
  if (auto* e = dynamic_cast<CudaEvent*>(&event)) {
    // The event may belong to another device's queue: the stream waits all the same.
    CODISTILL_CUDA_CHECK(cudaSetDevice(device().index));
    CODISTILL_CUDA_CHECK(cudaStreamWaitEvent(stream(), e->handle(), 0));
    return;
  }
  // Another backend's event (the CPU's are reached when recorded): the host waits for it.
  event.synchronize();
}

void CudaQueue::copy(Tensor& dst, const Tensor& src) {
  check_same_size(dst, src, "Queue::copy");
  if (dst.nbytes() == 0 || dst.same_memory(src)) return;
  const Tensor* sides[] = {&dst, &src};
  for (const Tensor* t : sides)
    if (t->device().is_cuda() && t->device() != device())
      throw std::invalid_argument("Queue::copy (cuda): a tensor on " + t->device().str() +
                                  " on a queue of " + device().str() +
                                  " (copy through the queue of its own device)");
  CODISTILL_CUDA_CHECK(cudaSetDevice(device().index));
  CODISTILL_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), kind_of(dst, src), stream()));
}

void CudaQueue::zero(Tensor& t) {
  if (t.nbytes() == 0) return;
  if (t.device() != device())
    throw std::invalid_argument("Queue::zero (cuda): a tensor on " + t.device().str() +
                                " on a queue of " + device().str());
  CODISTILL_CUDA_CHECK(cudaSetDevice(device().index));
  CODISTILL_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream()));
}

// ---- the backend: devices, memory, queues --------------------------------------------------

int CudaBackend::device_count() const { return cuda::device_count(); }

std::string CudaBackend::unavailable_reason() const {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver" error
    return std::string("no CUDA device is visible to this process (cudaGetDeviceCount: ") +
           cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + "; no NVIDIA driver, or no GPU)";
  }
  if (n == 0) return "no CUDA device is visible to this process (see CUDA_VISIBLE_DEVICES)";
  return {};
}

// The cuda column of kernels/op_list.def.
bool CudaBackend::supports(Op op, DType dtype) const {
  using namespace op_dtypes;  // the table's column spellings
  switch (op) {
#define CODISTILL_OP(id, spelling, cpu, cuda) \
  case Op::id:                                \
    return (cuda).contains(dtype);
#include "kernels/op_list.def"
  }
  return false;
}

std::shared_ptr<std::byte> CudaBackend::allocate(std::size_t bytes, int device) {
  auto* p = static_cast<std::byte*>(cached_malloc(bytes, device));
  // Should the control block fail to allocate, shared_ptr calls the deleter itself.
  return std::shared_ptr<std::byte>(p, [device](std::byte* q) { cached_free(q, device); });
}

Tensor CudaBackend::staging_for(const Tensor& device_tensor) {
  auto* p = static_cast<std::byte*>(pinned_malloc(device_tensor.nbytes()));
  std::shared_ptr<std::byte> buffer(p, [](std::byte* q) { pinned_free(q); });
  return Tensor::adopt(std::move(buffer), device_tensor.shape(), device_tensor.dtype(),
                       Device::cpu());
}

std::optional<Backend::DeviceMemory> CudaBackend::device_memory(int device) const {
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free = 0, total = 0;
  CODISTILL_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Blocks in the caching allocator's free lists are ours to hand out again: free to us.
  const AllocatorStats stats = allocator_stats(device);
  DeviceMemory m;
  m.free = static_cast<std::int64_t>(free + stats.cached_bytes);
  m.total = static_cast<std::int64_t>(total);
  m.peak = static_cast<std::int64_t>(stats.peak_allocated_bytes);
  return m;
}

void CudaBackend::copy_sync(Tensor& dst, const Tensor& src) {
  check_same_size(dst, src, "copy_sync");
  if (dst.nbytes() == 0 || dst.same_memory(src)) return;
  const Device d = dst.device(), s = src.device();
  if (d.is_cpu() && s.is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), dst.nbytes());
    return;
  }
  // Every stream of the device(s) first: queued work may still write src or read dst.
  if (s.is_cuda()) wait_for_device(s.index);
  if (d.is_cuda() && !(s.is_cuda() && s.index == d.index)) wait_for_device(d.index);
  if (d.is_cuda() && s.is_cuda() && d.index != s.index) {
    CODISTILL_CUDA_CHECK(cudaMemcpyPeer(dst.raw(), d.index, src.raw(), s.index, dst.nbytes()));
  } else {
    CODISTILL_CUDA_CHECK(cudaSetDevice(d.is_cuda() ? d.index : s.index));
    CODISTILL_CUDA_CHECK(cudaMemcpy(dst.raw(), src.raw(), dst.nbytes(), kind_of(dst, src)));
  }
  // cudaMemcpy may return before a device-to-device copy is done, and the legacy stream it
  // ran on does not order the (non-blocking) queues' streams: wait for it.
  if (d.is_cuda()) wait_for_device(d.index);
  if (s.is_cuda() && !(d.is_cuda() && s.index == d.index)) wait_for_device(s.index);
}

void CudaBackend::zero_sync(Tensor& t) {
  if (t.nbytes() == 0) return;
  if (t.device().is_cpu()) {
    std::memset(t.raw(), 0, t.nbytes());
    return;
  }
  wait_for_device(t.device().index);
  CODISTILL_CUDA_CHECK(cudaMemset(t.raw(), 0, t.nbytes()));
  wait_for_device(t.device().index);  // cudaMemset returns before it is done
}

std::unique_ptr<kernels::Queue> CudaBackend::make_queue(Device device, QueueOptions options) {
  if (!device.is_cuda())
    throw std::invalid_argument("cuda backend: cannot make a queue on " + device.str());
  const int n = device_count();
  if (n == 0)
    throw std::runtime_error("cuda backend: cannot make a queue on " + device.str() + ": " +
                             unavailable_reason());
  if (device.index < 0 || device.index >= n)
    throw std::invalid_argument("cuda backend: no device " + device.str() + " (" +
                                std::to_string(n) + " visible: cuda:0 to cuda:" +
                                std::to_string(n - 1) + ")");
  if (!supports_compute(options.compute))
    throw std::invalid_argument(std::string("cuda backend: cannot compute GEMMs in ") +
                                compute_name(options.compute) + " here");
  return std::make_unique<CudaQueue>(*this, device, options);
}

CudaQueue& CudaBackend::enter(kernels::Queue& q, Op op, DType dtype, const char* what,
                              std::initializer_list<TensorArg> args) const {
  // Only this backend makes queues that name it, and they are all CudaQueues.
  if (&q.backend() != this)
    throw std::invalid_argument(std::string(what) + " (cuda): a queue of the " +
                                q.backend().name() + " backend");
  auto& cq = static_cast<CudaQueue&>(q);
  require_support(*this, op, dtype, what);
  ops::expect(cq.device(), what, args);
  return cq;
}

// ---- softmax: no CUDA kernel (its cuda column in kernels/op_list.def is none) -----------

void CudaBackend::softmax_forward(const Tensor& x, Tensor& /*y*/, kernels::Queue& /*q*/) {
  require_support(*this, Op::softmax, x.dtype(), "softmax");  // throws: not supported
  throw std::logic_error("softmax (cuda): supports() claims a kernel that does not exist");
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& /*dy*/, Tensor& /*dx*/,
                                   kernels::Queue& /*q*/) {
  require_support(*this, Op::softmax, y.dtype(), "softmax backward");  // throws
  throw std::logic_error("softmax backward (cuda): supports() claims a kernel that does not exist");
}

}  // namespace codistill::kernels::cuda

namespace codistill::kernels {

Backend& cuda_backend() {
  static cuda::CudaBackend backend;
  return backend;
}

}  // namespace codistill::kernels
