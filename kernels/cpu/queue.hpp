#pragma once
// The CPU backend's queue and event (internal to kernels/cpu/): work on the CPU
// runs when it is queued, so a queue is the choice of implementation (fast or reference)
// plus the per-queue state of the libraries it calls (oneDNN's bf16 GEMMs, convolutions
// and float32 linear forwards: primitives per shape, made on first use), as a CUDA queue
// owns its handles and plan caches.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/dnnl_matmul.hpp"
#include "kernels/cpu/image/dnnl_conv.hpp"

namespace codistill::kernels::cpu {

// Work on the CPU runs when it is queued, so a queue is only the choice of implementation
// and every event has been reached when it is recorded.
class CpuEvent final : public Event {
 public:
  void synchronize() override {}
  bool ready() override { return true; }
};

class CpuQueue final : public Queue {
 public:
  static constexpr std::size_t kParallelZeroBytes = std::size_t{256} << 10;
  CpuQueue(Backend& b, QueueOptions o) : Queue(b, Device::cpu(), o) {}
  // This queue's bf16 GEMM engine (oneDNN primitives per shape, operand workspaces): per
  // queue, as the CUDA queue's plan caches, made on first use.
  cpu::Bf16Gemm& bf16_gemm() {
    if (!bf16_) bf16_ = std::make_unique<cpu::Bf16Gemm>();
    return *bf16_;
  }
  void synchronize() override {}
  std::unique_ptr<Event> make_event() override { return std::make_unique<CpuEvent>(); }
  void record(Event& /*event*/) override {}
  void wait(Event& /*event*/) override {}
  void copy(Tensor& dst, const Tensor& src) override {
    if (dst.same_memory(src)) {
      if (dst.numel() != src.numel() || dst.dtype() != src.dtype())
        throw std::invalid_argument("Queue::copy: a tensor onto itself with another size or dtype");
      return;
    }
    dst.copy_from(src);
  }
  // Zeroing a model's gradients (1 MB for fmnist_mlp) took 9 us of a 470 us step on one
  // thread: large tensors are split across the OpenMP threads.
  void zero(Tensor& t) override {
    const std::size_t n = t.nbytes();
    if (n < kParallelZeroBytes || omp_in_parallel() || omp_get_max_threads() == 1) {
      if (n) std::memset(t.raw(), 0, n);
      return;
    }
    auto* p = static_cast<unsigned char*>(t.raw());
#pragma omp parallel
    {
      const auto parts = static_cast<std::size_t>(omp_get_num_threads());
      const auto i = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t lines = (n + 63) / 64, lo = std::min(n, lines * i / parts * 64),
                        hi = std::min(n, lines * (i + 1) / parts * 64);
      if (lo < hi) std::memset(p + lo, 0, hi - lo);
    }
  }
  // The queue's oneDNN state for convolutions (engine, primitives per shape, scratch), made
  // on first use.
  cpu::DnnlConv& conv() {
    if (!conv_) conv_ = std::make_unique<cpu::DnnlConv>();
    return *conv_;
  }
  // The queue's oneDNN state for linear layers' forward (primitives per shape).
  cpu::DnnlMatmul& matmul() {
    if (!matmul_) matmul_ = std::make_unique<cpu::DnnlMatmul>();
    return *matmul_;
  }

 private:
  std::unique_ptr<cpu::Bf16Gemm> bf16_;
  std::unique_ptr<cpu::DnnlConv> conv_;
  std::unique_ptr<cpu::DnnlMatmul> matmul_;
};

inline CpuQueue& cpu_queue(Queue& q, const char* op) {
  auto* c = dynamic_cast<CpuQueue*>(&q);
  if (!c) throw std::invalid_argument(std::string(op) + " (cpu): the queue is not a CPU queue");
  return *c;
}

}  // namespace codistill::kernels::cpu
