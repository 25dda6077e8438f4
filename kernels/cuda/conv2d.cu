// Convolution through cuDNN's legacy API (conv2d.hpp), float32 NCHW. (Max pooling is
// pool.cu: its own kernels, with the CPU's tie rule.)
//
// Per queue (its cuDNN handle and plan cache, kernels/cuda/resources.cuh: never shared
// between threads or streams) and per shape, a plan holds the descriptors and the chosen
// algorithms, so the heuristics run once per shape. Algorithms come from cuDNN's
// heuristics (cudnnGet*Algorithm_v7, no benchmarking runs), and only deterministic ones,
// within a 1 GiB workspace, so a run is reproducible (cuDNN's backward-data algo 0 and
// backward-filter algos 0 and 3 accumulate with atomics); when none fits, the call throws
// rather than silently lose bit-exact resume (plans/cudnn_plan.hpp). The descriptors come
// from plans/cudnn_plan.hpp, verbatim. Float32 stays float32 (CUDNN_FMA_MATH) unless the context
// allows TF32 tensor cores. The bias and its gradient use the deterministic kernels of
// bias_activation.cu rather than cudnnAddTensor / cudnnConvolutionBackwardBias: the same
// double-accumulated, fixed-order sums as the linear layers, whatever cuDNN picks.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <map>
#include <vector>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/plans/cudnn_plan.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

// The queue's cuDNN handle (resources.cuh), bound to ctx.stream.
cudnnHandle_t handle_for(const Context& ctx) {
  StreamResources& r = resources_of(ctx, "conv2d");
  detail::use_device(ctx);
  return r.cudnn();
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
  void set(const plans::TensorDesc4d& t) {
    CODISTILL_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(
        d, CUDNN_DATA_FLOAT, t.dims[0], t.dims[1], t.dims[2], t.dims[3], t.strides[0],
        t.strides[1], t.strides[2], t.strides[3]));
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
  std::string shape;  // for messages
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

ConvPlan& conv_plan(const Conv2dShape& s, const Context& ctx) {
  const ConvKey key{ctx.allow_tf32,
                    {s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h,
                     s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w}};
  auto& slot = resources_of(ctx, "conv2d").cudnn_plans().conv[key];
  if (slot) return *slot;
  auto p = std::make_unique<ConvPlan>();
  const plans::ConvDescriptors desc = plans::conv_descriptors(s);  // passed verbatim
  p->shape = plans::shape_string(s);
  p->tf32 = ctx.allow_tf32;
  p->x.set(desc.x);
  p->y.set(desc.y);
  CODISTILL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   desc.w.dims[0], desc.w.dims[1],
                                                   desc.w.dims[2], desc.w.dims[3]));
  CODISTILL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p->conv.d, desc.conv.pad_h, desc.conv.pad_w, desc.conv.stride_h, desc.conv.stride_w,
      desc.conv.dilation_h, desc.conv.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // The heuristics below only offer what the descriptor's math type permits.
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p->conv.d, ctx.allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  CODISTILL_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(p->conv.d, p->x.d, p->w.d, &n, &c, &h, &w));
  if (n != desc.y.dims[0] || c != desc.y.dims[1] || h != desc.y.dims[2] || w != desc.y.dims[3])
    throw std::logic_error("conv2d (cuda): cuDNN's output shape differs from Conv2dShape's");
  return *(slot = std::move(p));
}

// cuDNN's ranked list as plain candidates (status, determinism, the workspace for the math
// type that would run: FMA unless TF32 is allowed), then plans::choose_algorithm: the first
// deterministic one within the cap, and never a nondeterministic one (bit-exact resume and
// sync mode depend on it). size_of(algo, math, &bytes) sets the descriptor's math type and
// asks cuDNN for the workspace, which also rejects combinations cuDNN cannot run.
template <class Perf, class AlgoT, class SizeOf>
Algo<AlgoT> choose(const ConvPlan& plan, const char* what, const Perf* perf, int count,
                   SizeOf&& size_of) {
  std::vector<plans::AlgoCandidate> ranked;
  std::vector<cudnnMathType_t> maths;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    plans::AlgoCandidate c;
    c.algo = static_cast<int>(p.algo);
    c.ok = p.status == CUDNN_STATUS_SUCCESS;
    c.deterministic = p.determinism == CUDNN_DETERMINISTIC;
    const cudnnMathType_t math = plan.tf32 ? p.mathType : CUDNN_FMA_MATH;
    c.usable = c.ok && size_of(p.algo, math, &c.workspace);
    ranked.push_back(c);
    maths.push_back(math);
  }
  const auto choice = plans::choose_algorithm(ranked, plans::kConvWorkspaceCap, true,
                                              std::string("conv2d ") + what + " " + plan.shape);
  const auto& c = ranked[choice.index];
  return {perf[choice.index].algo, maths[choice.index], c.workspace, true};
}

void choose_forward(ConvPlan& p, cudnnHandle_t h) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.d, p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  CODISTILL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, p.x.d, p.w.d, p.conv.d, p.y.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  p.fwd = choose<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      p, "forward", perf, count,
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
      p, "backward-data", perf, count,
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
      p, "backward-filter", perf, count,
      [&](cudnnConvolutionBwdFilterAlgo_t a, cudnnMathType_t m, std::size_t* bytes) {
        return cudnnSetConvolutionMathType(p.conv.d, m) == CUDNN_STATUS_SUCCESS &&
               cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.d, p.y.d, p.conv.d, p.w.d,
                                                              a, bytes) == CUDNN_STATUS_SUCCESS;
      });
}

const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

void conv2d_forward(const float* x, const float* w, const float* b, float* y,
                    const Conv2dShape& s, const Context& ctx) {
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
                     float* db, const Conv2dShape& s, bool accumulate, const Context& ctx) {
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
