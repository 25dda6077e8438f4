#pragma once
// A test-only layer with non-trainable buffers (as BatchNorm's running statistics will
// be): the identity, with a buffer "running" of n elements and a scalar "count".
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill::test {

class WithBuffer : public Layer {
 public:
  explicit WithBuffer(std::int64_t n) : running_(kernels::Tensor::zeros({n})), count_(kernels::Tensor::zeros({1})) {}
  std::string kind() const override { return "with_buffer"; }
  std::vector<Buffer> buffers() override { return {{"running", &running_}, {"count", &count_}}; }
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }
  kernels::Tensor& running() { return running_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool) override { return x; }
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool) override { return dy; }

 private:
  kernels::Tensor running_, count_;
};

}  // namespace codistill::test
