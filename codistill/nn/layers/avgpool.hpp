#pragma once
// Global average pooling: [B, C, H, W] -> [B, C], each channel's plane averaged (the head of
// a ResNet, before its classifier). The map NCHW, or NHWC once set_channels_last.
#include <string>

#include "codistill/nn/channels_last.hpp"
#include "codistill/nn/module.hpp"

namespace codistill {

class GlobalAvgPool : public Layer, public ChannelsLastLayer {
 public:
  std::string kind() const override { return "global_avgpool"; }
  // [C, H, W] -> [C].
  kernels::Shape output_shape(const kernels::Shape& input) const override;

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::Shape in_shape_;
  kernels::Tensor y_, dx_;
};

}  // namespace codistill
