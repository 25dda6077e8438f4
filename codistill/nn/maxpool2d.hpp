#pragma once
// Max pooling, NCHW, square window, no padding; stride defaults to the window size.
// Forward records the argmax of every window so backward is a scatter (no re-search).
// On CUDA (cuDNN) backward needs forward's input and output instead; with ties cuDNN may
// route a gradient to another maximum than the CPU's first one.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/layer.hpp"
#include "kernels/cpu/pool.hpp"

namespace codistill {

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0);  // 0: = kernel_size

  std::string kind() const override { return "maxpool2d"; }
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  // [C, H, W] -> [C, OH, OW]; throws when the window does not fit (output below 1x1).
  kernels::Shape output_shape(const kernels::Shape& input) const override;

 private:
  std::int64_t k_, stride_;
  kernels::cpu::Pool2dShape last_{};
  std::vector<std::int32_t> argmax_;
  kernels::Shape x_shape_;
  kernels::Tensor x_;  // CUDA: forward's input (shared, not copied)
  kernels::Tensor y_, dx_;
};

}  // namespace codistill
