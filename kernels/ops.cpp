#include "kernels/ops.hpp"

#include <limits>
#include <string>

namespace codistill::kernels {

const char* op_name(Op op) {
  switch (op) {
    case Op::linear: return "linear";
    case Op::linear_activation: return "linear+activation";
    case Op::activation: return "activation";
    case Op::conv2d: return "conv2d";
    case Op::maxpool2d: return "maxpool2d";
    case Op::softmax: return "softmax";
    case Op::multiply: return "multiply";
    case Op::add: return "add";
    case Op::distill_loss: return "distill_loss";
    case Op::sgd_update: return "sgd_update";
    case Op::adamw_update: return "adamw_update";
    case Op::batchnorm: return "batchnorm";
    case Op::global_avgpool: return "global_avgpool";
    case Op::layernorm: return "layernorm";
    case Op::linear_distill_head: return "linear_distill_head";
  }
  return "?";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
  }
  return "?";
}

void Conv2dShape::validate() const {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(
        "conv2d: " + why + " (batch " + std::to_string(batch) + ", in " +
        std::to_string(in_channels) + "x" + std::to_string(height) + "x" + std::to_string(width) +
        ", out channels " + std::to_string(out_channels) + ", kernel " + std::to_string(kernel_h) +
        "x" + std::to_string(kernel_w) + ", stride " + std::to_string(stride_h) + "x" +
        std::to_string(stride_w) + ", pad " + std::to_string(pad_h) + "x" + std::to_string(pad_w) +
        ")");
  };
  if (batch < 1 || in_channels < 1 || height < 1 || width < 1 || out_channels < 1)
    fail("batch, channels and input sizes must be >= 1");
  if (kernel_h < 1 || kernel_w < 1) fail("kernel sizes must be >= 1");
  if (stride_h < 1 || stride_w < 1) fail("strides must be >= 1");
  if (pad_h < 0 || pad_w < 0) fail("padding must be >= 0");
  if (kernel_h > height + 2 * pad_h || kernel_w > width + 2 * pad_w)
    fail("kernel larger than the padded input");
  // The fast path's GEMMs take 32-bit sizes (checked here: an exception must not escape an
  // OpenMP thread). kTargetColumns bounds the grouped column count likewise.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  if (in_channels * kernel_h * kernel_w > kMax || out_height() * out_width() > kMax / 2 ||
      out_channels > kMax)
    fail("sizes too large for 32-bit BLAS indices");
}

void Pool2dShape::validate() const {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(
        "maxpool2d: " + why + " (batch " + std::to_string(batch) + ", channels " +
        std::to_string(channels) + ", input " + std::to_string(height) + "x" +
        std::to_string(width) + ", kernel " + std::to_string(kernel) + ", stride " +
        std::to_string(stride) + ")");
  };
  if (batch < 1 || channels < 1 || height < 1 || width < 1)
    fail("batch, channels and input sizes must be >= 1");
  if (kernel < 1 || stride < 1) fail("kernel and stride must be >= 1");
  if (kernel > height || kernel > width) fail("window larger than the input");
  if (height * width > std::numeric_limits<std::int32_t>::max())
    fail("plane too large for int32 argmax indices");
}

void BatchNormShape::validate(bool training) const {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("batchnorm: " + why + " (batch " + std::to_string(batch) + ", channels " +
                                std::to_string(channels) + ", spatial " + std::to_string(spatial) + ", eps " +
                                std::to_string(eps) + ", momentum " + std::to_string(momentum) + ")");
  };
  if (batch < 1 || channels < 1 || spatial < 1) fail("sizes must be positive");
  if (!(eps > 0)) fail("eps must be > 0");
  if (!(momentum >= 0 && momentum <= 1)) fail("momentum must be in [0, 1]");
  if (training && per_channel() < 2)
    fail("training needs more than one value per channel (batch x spatial is 1)");
}

void LayerNormShape::validate() const {
  if (rows < 0 || features < 1 || !(eps > 0))
    throw std::invalid_argument("layernorm: rows must be >= 0, features >= 1 and eps > 0 (rows " +
                                std::to_string(rows) + ", features " + std::to_string(features) + ", eps " +
                                std::to_string(eps) + ")");
}

}  // namespace codistill::kernels
