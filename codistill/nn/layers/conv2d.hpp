#pragma once
// 2-D convolution, square kernel: weight [out, in, k, k], bias [out]; maps NCHW, or NHWC once
// set_channels_last (codistill/nn/channels_last.hpp).
// Padding defaults to k/2 ('same' output size for odd k at stride 1). The bias is added
// inside the convolution op (no separate bias pass).
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/channels_last.hpp"
#include "codistill/nn/module.hpp"
#include "kernels/ops.hpp"

namespace codistill {

class Conv2d : public Layer, public ChannelsLastLayer {
 public:
  static constexpr std::int64_t kSamePadding = -1;
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         std::int64_t stride = 1, std::int64_t padding = kSamePadding, bool bias = true);

  std::string kind() const override { return "conv2d"; }
  std::vector<Param> params() override;
  // input [C, H, W] -> [out, OH, OW]; throws when the output would be empty.
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void init_params(Rng& rng, const std::string& init) override;

  std::int64_t padding() const { return pad_; }
  std::int64_t stride() const { return stride_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::Conv2dShape conv_shape(const kernels::Shape& x) const;

  std::int64_t in_, out_, k_, stride_, pad_;
  bool has_bias_;
  kernels::Tensor w_, b_, dw_, db_;
  kernels::Tensor x_, y_, dx_;
  kernels::Conv2dShape last_{};
};

}  // namespace codistill
