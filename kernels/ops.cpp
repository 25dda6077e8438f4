#include "kernels/ops.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace codistill::kernels {

const char* op_name(Op op) {
  switch (op) {
#define CODISTILL_OP(id, spelling, cpu, cuda) \
  case Op::id:                                \
    return spelling;
#include "kernels/op_list.def"
  }
  return "?";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::silu: return "silu";
    case Activation::gelu_tanh: return "gelu_tanh";
  }
  return "?";
}

const char* compute_name(Compute c) {
  switch (c) {
    case Compute::f32: return "float32";
    case Compute::bf16: return "bf16";
  }
  return "?";
}

Compute parse_compute(const std::string& name) {
  if (name == "float32") return Compute::f32;
  if (name == "bf16") return Compute::bf16;
  throw std::invalid_argument("unknown compute precision '" + name + "' (valid: float32, bf16)");
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

void EmbeddingShape::validate() const {
  if (rows < 0 || vocab < 1 || dim < 1 || vocab > std::numeric_limits<std::int32_t>::max())
    throw std::invalid_argument("embedding: rows must be >= 0, vocab in [1, 2^31) and dim >= 1 (rows " +
                                std::to_string(rows) + ", vocab " + std::to_string(vocab) + ", dim " +
                                std::to_string(dim) + ")");
}

void check_embedding_ids(const std::int32_t* ids, const EmbeddingShape& s, const char* backend) {
  for (std::int64_t n = 0; n < s.rows; ++n)
    if (ids[n] < 0 || ids[n] >= s.vocab)
      throw std::out_of_range(std::string("embedding (") + backend + "): row " + std::to_string(n) + " has id " +
                              std::to_string(ids[n]) + ", outside [0, " + std::to_string(s.vocab) + ")");
}

double AttentionShape::scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

void AttentionShape::validate() const {
  if (batch < 0 || seq < 1 || heads < 1 || head_dim < 1)
    throw std::invalid_argument("causal_attention: batch must be >= 0, seq, heads and head_dim >= 1 (batch " +
                                std::to_string(batch) + ", seq " + std::to_string(seq) + ", heads " +
                                std::to_string(heads) + ", head_dim " + std::to_string(head_dim) + ")");
  // 32-bit BLAS indices (lda = 3*D, the T x T blocks).
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  if (3 * d_model() > kMax || seq * seq > kMax)
    throw std::invalid_argument("causal_attention: sizes too large for 32-bit BLAS indices (seq " +
                                std::to_string(seq) + ", d_model " + std::to_string(d_model()) + ")");
}

}  // namespace codistill::kernels
