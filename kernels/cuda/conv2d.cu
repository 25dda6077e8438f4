// Convolution through cuDNN's legacy API (conv2d.hpp), float32 NCHW. (Max pooling is
// pool.cu: its own kernels, with the CPU's tie rule.)
//
// Per queue (its cuDNN handle and plan cache, kernels/cuda/resources.cuh: never shared
// between threads or streams) and per shape, a plan holds the descriptors and the chosen
// algorithms, so the heuristics run once per shape. Algorithms come from cuDNN's
// heuristics (cudnnGet*Algorithm_v7, no benchmarking runs), deterministic ones first, so
// a run is reproducible (cuDNN's backward-data algo 0 and backward-filter algos 0 and 3
// accumulate with atomics). Float32 stays float32 (CUDNN_FMA_MATH) unless the context
// allows TF32 tensor cores. The bias and its gradient use the deterministic kernels of
// bias_activation.cu rather than cudnnAddTensor / cudnnConvolutionBackwardBias: the same
// double-accumulated, fixed-order sums as the linear layers, whatever cuDNN picks.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

// Workspace above this is not worth an algorithm's speed-up (and may not fit next to a model).
constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;

// The queue's cuDNN handle (resources.cuh), bound to ctx.stream.
cudnnHandle_t handle_for(const Context& ctx) {
  StreamResources& r = resources_of(ctx, "conv2d");
  detail::use_device(ctx);
  return r.cudnn();
}

int to_int(std::int64_t v, const char* op) {
  if (v > INT_MAX)
    throw std::invalid_argument(std::string(op) + " (cuda): size " + std::to_string(v) +
                                " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

}  // namespace

// The plan types have names outside an anonymous namespace: a queue's CudnnPlans (declared
// in resources.cuh) holds them.
namespace cudnn_plan {

// ---- descriptors (RAII) -----------------------------------------------------------------

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { CODISTILL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, const char* op) {
    to_int(c * h * w, op);  // the batch stride must fit cuDNN's int too
    CODISTILL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                     to_int(n, op), to_int(c, op), to_int(h, op),
                                                     to_int(w, op)));
  }
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { CODISTILL_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { CODISTILL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// ---- convolution plans --------------------------------------------------------------------

template <class AlgoT>
struct Algo {
  AlgoT algo{};
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
  bool chosen = false;
};

struct ConvPlan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  bool tf32 = false;
  Algo<cudnnConvolutionFwdAlgo_t> fwd;
  Algo<cudnnConvolutionBwdDataAlgo_t> bwd_data;
  Algo<cudnnConvolutionBwdFilterAlgo_t> bwd_filter;
};

using ConvKey = std::tuple<bool, std::array<std::int64_t, 11>>;

}  // namespace cudnn_plan

// A queue's plans (resources.cuh), one per shape it has run.
struct CudnnPlans {
  std::map<cudnn_plan::ConvKey, std::unique_ptr<cudnn_plan::ConvPlan>> conv;
};

CudnnPlans* new_cudnn_plans() { return new CudnnPlans(); }
void CudnnPlansDeleter::operator()(CudnnPlans* p) const noexcept { delete p; }

namespace {

using namespace cudnn_plan;

ConvPlan& conv_plan(const cpu::Conv2dShape& s, const Context& ctx) {
  const ConvKey key{ctx.allow_tf32,
                    {s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h,
                     s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w}};
  auto& slot = resources_of(ctx, "conv2d").cudnn_plans().conv[key];
  if (slot) return *slot;
  auto p = std::make_unique<ConvPlan>();
  const char* op = "conv2d";
  const std::int64_t OH = s.out_height(), OW = s.out_width();
  p->tf32 = ctx.allow_tf32;
  p->x.set(s.batch, s.in_channels, s.height, s.width, op);
  p->y.set(s.batch, s.out_channels, OH, OW, op);
  to_int(s.in_channels * s.kernel_h * s.kernel_w, op);
  CODISTILL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      p->w.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(s.out_channels, op),
      to_int(s.in_channels, op), to_int(s.kernel_h, op), to_int(s.kernel_w, op)));
  CODISTILL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p->conv.d, to_int(s.pad_h, op), to_int(s.pad_w, op), to_int(s.stride_h, op),
      to_int(s.stride_w, op), 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // The heuristics below only offer what the descriptor's math type permits.
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p->conv.d, ctx.allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  CODISTILL_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(p->conv.d, p->x.d, p->w.d, &n, &c, &h, &w));
  if (n != s.batch || c != s.out_channels || h != OH || w != OW)
    throw std::logic_error("conv2d (cuda): cuDNN's output shape differs from Conv2dShape's");
  return *(slot = std::move(p));
}

// The first usable entry of cuDNN's ranked list: status success, workspace within the cap,
// deterministic unless none is; with TF32 off, forced to FMA math (as the descriptor asked).
// size_of(algo, math, &bytes) sets the descriptor's math type and asks cuDNN for the
// workspace, which also rejects combinations cuDNN cannot run.
template <class Perf, class AlgoT, class SizeOf>
Algo<AlgoT> choose(const char* what, const Perf* perf, int count, bool tf32, SizeOf&& size_of) {
  for (bool deterministic_only : {true, false})
    for (int i = 0; i < count; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic_only && p.determinism != CUDNN_DETERMINISTIC) continue;
      const cudnnMathType_t math = tf32 ? p.mathType : CUDNN_FMA_MATH;
      std::size_t bytes = 0;
      if (!size_of(p.algo, math, &bytes) || bytes > kMaxWorkspace) continue;
      return {p.algo, math, bytes, true};
    }
  throw std::runtime_error(std::string("conv2d (cuda): cuDNN offers no usable ") + what +
                           " algorithm for this shape");
}

void choose_forward(ConvPlan& p, cudnnHandle_t h) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.d, p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  CODISTILL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, p.x.d, p.w.d, p.conv.d, p.y.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  p.fwd = choose<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      "forward", perf, count, p.tf32,
      [&](cudnnConvolutionFwdAlgo_t a, cudnnMathType_t m, std::size_t* bytes) {
        return cudnnSetConvolutionMathType(p.conv.d, m) == CUDNN_STATUS_SUCCESS &&
               cudnnGetConvolutionForwardWorkspaceSize(h, p.x.d, p.w.d, p.conv.d, p.y.d, a,
                                                       bytes) == CUDNN_STATUS_SUCCESS;
      });
}

void choose_backward_data(ConvPlan& p, cudnnHandle_t h) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.d, p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  CODISTILL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, p.w.d, p.y.d, p.conv.d, p.x.d, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  p.bwd_data = choose<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      "backward-data", perf, count, p.tf32,
      [&](cudnnConvolutionBwdDataAlgo_t a, cudnnMathType_t m, std::size_t* bytes) {
        return cudnnSetConvolutionMathType(p.conv.d, m) == CUDNN_STATUS_SUCCESS &&
               cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.d, p.y.d, p.conv.d, p.x.d, a,
                                                            bytes) == CUDNN_STATUS_SUCCESS;
      });
}

void choose_backward_filter(ConvPlan& p, cudnnHandle_t h) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.d, p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  CODISTILL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, p.x.d, p.y.d, p.conv.d, p.w.d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  p.bwd_filter = choose<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      "backward-filter", perf, count, p.tf32,
      [&](cudnnConvolutionBwdFilterAlgo_t a, cudnnMathType_t m, std::size_t* bytes) {
        return cudnnSetConvolutionMathType(p.conv.d, m) == CUDNN_STATUS_SUCCESS &&
               cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.d, p.y.d, p.conv.d, p.w.d,
                                                              a, bytes) == CUDNN_STATUS_SUCCESS;
      });
}

const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

void conv2d_forward(const float* x, const float* w, const float* b, float* y,
                    const cpu::Conv2dShape& s, const Context& ctx) {
  s.validate();
  cudnnHandle_t h = handle_for(ctx);
  ConvPlan& p = conv_plan(s, ctx);
  if (!p.fwd.chosen) choose_forward(p, h);
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.fwd.math));
  void* ws = detail::stream_workspace(ctx, p.fwd.workspace);
  CODISTILL_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p.x.d, x, p.w.d, w, p.conv.d,
                                                p.fwd.algo, ws, p.fwd.workspace, &kZero,
                                                p.y.d, y));
  if (b) bias_add_channels(y, b, s.batch, s.out_channels, s.out_height() * s.out_width(), ctx);
}

void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, const cpu::Conv2dShape& s, bool accumulate, const Context& ctx) {
  s.validate();
  cudnnHandle_t h = handle_for(ctx);
  ConvPlan& p = conv_plan(s, ctx);
  if (dx) {
    if (!p.bwd_data.chosen) choose_backward_data(p, h);
    CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_data.math));
    void* ws = detail::stream_workspace(ctx, p.bwd_data.workspace);
    CODISTILL_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, p.w.d, w, p.y.d, dy, p.conv.d,
                                                       p.bwd_data.algo, ws, p.bwd_data.workspace,
                                                       &kZero, p.x.d, dx));
  }
  if (!p.bwd_filter.chosen) choose_backward_filter(p, h);
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_filter.math));
  // Fetched after the data pass: a larger request may have replaced the buffer.
  void* ws = detail::stream_workspace(ctx, p.bwd_filter.workspace);
  CODISTILL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      h, &kOne, p.x.d, x, p.y.d, dy, p.conv.d, p.bwd_filter.algo, ws, p.bwd_filter.workspace,
      accumulate ? &kOne : &kZero, p.w.d, dw));
  if (db)
    bias_grad_channels(dy, db, s.batch, s.out_channels, s.out_height() * s.out_width(),
                       accumulate, ctx);
}

}  // namespace codistill::kernels::cuda
