#pragma once
// Max pooling, NCHW, square window, no padding; stride defaults to the window size.
// Forward keeps what the backend's backward needs: the CPU records the argmax of every
// window (backward is a scatter); CUDA's own kernels find the maxima again from x, with the
// CPU's rule (the first of equal maxima; a NaN is the maximum), so both route gradients alike.
#include <cstdint>
#include <string>

#include "codistill/nn/module.hpp"
#include "kernels/ops.hpp"

namespace codistill {

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0);  // 0: = kernel_size

  std::string kind() const override { return "maxpool2d"; }
  // [C, H, W] -> [C, OH, OW]; throws when the window does not fit (output below 1x1).
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  std::int64_t k_, stride_;
  kernels::Pool2dShape last_{};
  kernels::Tensor x_;       // forward's input (shared, not copied)
  kernels::Tensor argmax_;  // int32, where the backend keeps one
  kernels::Tensor y_, dx_;
};

}  // namespace codistill
