// The cuDNN descriptor plans and the algorithm choice (cudnn_plan.hpp). Built in every
// configuration: the CPU-only tests check them.
#include "kernels/cuda/plans/cudnn_plan.hpp"

#include <fmt/format.h>

#include <climits>
#include <stdexcept>

namespace codistill::kernels::cuda::plans {
namespace {

int to_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument("conv2d (cuda): " + std::string(what) + " = " +
                                std::to_string(v) + " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

TensorDesc4d nchw(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                  const char* what) {
  TensorDesc4d d;
  d.dims = {to_int(n, what), to_int(c, what), to_int(h, what), to_int(w, what)};
  d.strides = {to_int(c * h * w, "batch stride"), to_int(h * w, "channel stride"),
               to_int(w, "row stride"), 1};
  return d;
}

}  // namespace

std::string shape_string(const kernels::Conv2dShape& s) {
  return fmt::format("[{}, {}, {}, {}] -> {} channels, kernel {}x{}, stride {}x{}, padding {}x{}",
                     s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h,
                     s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w);
}
ConvDescriptors conv_descriptors(const kernels::Conv2dShape& s) {
  s.validate();
  ConvDescriptors d;
  d.x = nchw(s.batch, s.in_channels, s.height, s.width, "input size");
  d.y = nchw(s.batch, s.out_channels, s.out_height(), s.out_width(), "output size");
  to_int(s.in_channels * s.kernel_h * s.kernel_w, "filter size");
  d.w.dims = {to_int(s.out_channels, "out channels"), to_int(s.in_channels, "in channels"),
              to_int(s.kernel_h, "kernel height"), to_int(s.kernel_w, "kernel width")};
  d.conv = {to_int(s.pad_h, "padding"), to_int(s.pad_w, "padding"), to_int(s.stride_h, "stride"),
            to_int(s.stride_w, "stride"), 1, 1};
  return d;
}

AlgoChoice choose_algorithm(const std::vector<AlgoCandidate>& ranked, std::size_t cap,
                            bool require_deterministic, const std::string& what) {
  const auto fits = [&](const AlgoCandidate& c) { return c.ok && c.usable && c.workspace <= cap; };
  for (std::size_t i = 0; i < ranked.size(); ++i)
    if (fits(ranked[i]) && ranked[i].deterministic) return {i, false};
  std::size_t over_cap = 0;
  for (const auto& c : ranked) over_cap += c.ok && c.usable && c.deterministic && c.workspace > cap;
  if (require_deterministic)
    throw std::runtime_error(
        what + " (cuda): no deterministic cuDNN algorithm fits the workspace cap of " +
        std::to_string(cap >> 20) + " MiB (" + std::to_string(over_cap) +
        " deterministic one(s) need more); a nondeterministic one would break bit-exact "
        "resume and sync mode, so none is used. Use smaller batches for this layer, or run it "
        "on the CPU");
  for (std::size_t i = 0; i < ranked.size(); ++i)
    if (fits(ranked[i])) return {i, true};
  throw std::runtime_error(what + " (cuda): cuDNN offers no usable algorithm within " +
                           std::to_string(cap >> 20) + " MiB of workspace");
}

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return "forward";
    case ConvPass::backward_data: return "backward-data";
    case ConvPass::backward_filter: return "backward-filter";
  }
  throw std::invalid_argument("conv_pass_name: not a ConvPass (" +
                              std::to_string(static_cast<int>(pass)) + ")");
}

AlgoChoice choose_conv_algorithm(ConvPass pass, const std::vector<AlgoCandidate>& ranked,
                                 const std::string& shape) {
  // Bit-exact resume and sync mode depend on it: never a nondeterministic algorithm.
  return choose_algorithm(ranked, kConvWorkspaceCap, /*require_deterministic=*/true,
                          std::string("conv2d ") + conv_pass_name(pass) + " " + shape);
}

}  // namespace codistill::kernels::cuda::plans
