#pragma once
// The cuDNN descriptors of a convolution as data (conv2d.cu passes these fields verbatim
// to cudnnSetTensor4dDescriptorEx / cudnnSetFilter4dDescriptor /
// cudnnSetConvolution2dDescriptor), and the choice among the algorithms cuDNN offers.
// CUDA-free: the tests check the dimensions and strides against the CPU's Conv2dShape and
// the choice against fabricated candidate lists.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"

namespace codistill::kernels::cuda::plans {

struct TensorDesc4d {  // NCHW, float32
  std::array<int, 4> dims{};     // n, c, h, w
  std::array<int, 4> strides{};  // in elements
};
struct FilterDesc4d {  // KCRS (out channels, in channels, kernel h, kernel w), NCHW layout
  std::array<int, 4> dims{};
};
struct ConvDesc2d {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
};
struct ConvDescriptors {
  TensorDesc4d x, y;
  FilterDesc4d w;
  ConvDesc2d conv;
};

// Throws std::invalid_argument when a size (or a stride) exceeds cuDNN's int range.
ConvDescriptors conv_descriptors(const kernels::Conv2dShape& s);

// One algorithm of cuDNN's ranked list (cudnnConvolution*AlgoPerf_t), with the workspace
// cuDNN reports for the math type that would run (usable: the size query succeeded).
struct AlgoCandidate {
  int algo = 0;
  bool ok = true;  // status == CUDNN_STATUS_SUCCESS
  bool deterministic = true;
  bool usable = true;
  std::size_t workspace = 0;
};

// The index in `ranked` of the algorithm to run: the first deterministic one whose workspace
// fits under `cap`; if there is none and require_deterministic is false, the first usable
// one (nondeterministic = true). With require_deterministic, no fallback: throws
// std::runtime_error naming `what` (e.g. "conv2d backward-filter"), the shape and the cap,
// since a nondeterministic algorithm would silently break bit-exact resume and sync mode.
struct AlgoChoice {
  std::size_t index = 0;
  bool nondeterministic = false;
};
AlgoChoice choose_algorithm(const std::vector<AlgoCandidate>& ranked, std::size_t cap,
                            bool require_deterministic, const std::string& what);

// The workspace cap per convolution call (1 GiB).
inline constexpr std::size_t kConvWorkspaceCap = std::size_t{1} << 30;

// The three passes of a convolution, each with its own list of cuDNN algorithms.
enum class ConvPass : std::uint8_t { forward, backward_data, backward_filter };
inline constexpr ConvPass kConvPasses[] = {ConvPass::forward, ConvPass::backward_data,
                                           ConvPass::backward_filter};
const char* conv_pass_name(ConvPass pass);  // "forward", "backward-data", "backward-filter"

// The one picker of conv2d.cu, for each pass: choose_algorithm over cuDNN's ranked list for
// `pass`, deterministic only, within kConvWorkspaceCap; an error names "conv2d <pass>
// <shape>" (shape: shape_string of the convolution).
AlgoChoice choose_conv_algorithm(ConvPass pass, const std::vector<AlgoCandidate>& ranked,
                                 const std::string& shape);

std::string shape_string(const kernels::Conv2dShape& s);

}  // namespace codistill::kernels::cuda::plans
