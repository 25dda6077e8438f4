#include "codistill/nn/buffer_pool.hpp"

#include <algorithm>
#include <functional>
#include <utility>

namespace codistill::nn {

using kernels::Tensor;

Tensor BufferPool::take(const kernels::Shape& shape, kernels::DType dtype, kernels::Device device) {
  const std::int64_t numel = kernels::shape_numel(shape);
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->numel() == numel && it->dtype() == dtype && it->device() == device) {
      Tensor t = it->reshape(shape);
      free_.erase(it);
      return t;
    }
  return {};
}

void BufferPool::use_for(std::int64_t rows) {
  if (rows != rows_) free_.clear();
  rows_ = rows;
}

void BufferPool::drop(Tensor& t) {
  if (t.defined()) dropped_.push_back(std::move(t));
  t = Tensor();
}

// A buffer is free when the dropped tensors sharing it are all its holders (a saved input is
// the output of the layer before: two members, one buffer). Tensors sharing a buffer start
// at the same memory unless one is a view at an offset, whose holder then counts as outside.
void BufferPool::settle() {
  std::sort(dropped_.begin(), dropped_.end(),
            [](const Tensor& a, const Tensor& b) { return std::less<const void*>()(a.raw(), b.raw()); });
  for (std::size_t i = 0; i < dropped_.size();) {
    std::size_t j = i + 1;
    while (j < dropped_.size() && dropped_[j].same_memory(dropped_[i])) ++j;
    if (dropped_[i].owners() == static_cast<long>(j - i)) free_.push_back(std::move(dropped_[i]));
    i = j;
  }
  dropped_.clear();
}

std::size_t BufferPool::free_bytes() const {
  std::size_t sum = 0;
  for (const Tensor& t : free_) sum += t.nbytes();
  return sum;
}

// Per thread: a pool is not locked, and two threads' forwards never share a buffer.
std::shared_ptr<BufferPool> BufferPool::for_this_thread() {
  thread_local const std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  return pool;
}

}  // namespace codistill::nn
