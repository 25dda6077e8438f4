#pragma once
// The buffers that recomputed blocks (Module::set_recompute) drop after their forward and
// backward, kept for the next block to take: the blocks of a model's body have the same
// shapes and one block's internals are alive at a time, so block after block takes what the
// one before dropped instead of asking the backend for memory (on the CPU, pages of their own
// that the system maps and zeroes again on first touch, step after step; on CUDA, the
// caching allocator's round trip).
//
// A buffer returns to the pool only when nobody else holds it: a block's output, kept as
// the next block's input, or a gradient handed to the module before stays with its holder.
// Owners drop their tensors (drop), and once a whole subtree has (settle) a buffer whose
// every holder was among them becomes free. The pool serves one batch size at a time (the
// leading dimension of the blocks' inputs): evaluation at another batch after training
// empties it, and so does training after it.
//
// Forwards without gradients (Module::set_release_in_eval) use one too: on the CPU, where
// work runs as it is queued, one per thread (for_this_thread), shared by every model that
// thread runs, so K teachers run one after another hold one block's working set between
// them; on a device each model has its own, used on its own queue only.
#include <memory>
#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace codistill::nn {

class BufferPool {
 public:
  // Blocks of `rows` input rows (batch first) run next: the buffers kept for another
  // number are let go.
  void use_for(std::int64_t rows);
  // A free buffer of shape's size in dtype on device, seen as shape; undefined when there is
  // none.
  kernels::Tensor take(const kernels::Shape& shape, kernels::DType dtype, kernels::Device device);
  // t's owner lets it go (t becomes undefined).
  void drop(kernels::Tensor& t);
  // The dropped buffers that no tensor outside the dropped ones shares become free.
  void settle();
  std::size_t free_bytes() const;
  // The CPU's pool for forwards of this thread (made on first use, let go with the thread
  // and the models that hold it).
  static std::shared_ptr<BufferPool> for_this_thread();

 private:
  std::vector<kernels::Tensor> dropped_, free_;
  std::int64_t rows_ = -1;
};

}  // namespace codistill::nn
