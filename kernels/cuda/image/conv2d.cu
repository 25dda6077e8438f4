// Convolution through cuDNN's legacy API (conv2d.hpp), float32 NCHW. (Max pooling is
// pool.cu: its own kernels, with the CPU's tie rule.)
//
// Per queue (its cuDNN handle and plan cache, kernels/cuda/resources.cuh: never shared
// between threads or streams) and per shape, a plan holds the descriptors and the chosen
// algorithms, so the heuristics run once per shape. One picker serves the three passes
// (algorithm<P> below, choosing through plans::choose_conv_algorithm). Algorithms come from
// cuDNN's heuristics (cudnnGet*Algorithm_v7, no benchmarking runs), and only deterministic ones,
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
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/handle.cuh"
#include "kernels/cuda/image/conv2d.hpp"
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

template <class AlgoT>
struct Algo {
  AlgoT algo{};
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
  bool chosen = false;
};

// The descriptors are owned by handle.cuh's wrappers, destroyed with the plan.
struct ConvPlan {
  std::string shape;  // for messages
  CudnnTensorDesc x, y;
  CudnnFilterDesc w;
  CudnnConvDesc conv;
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
using plans::ConvPass;

void set_tensor(cudnnTensorDescriptor_t d, const plans::TensorDesc4d& t) {
  CODISTILL_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(d, CUDNN_DATA_FLOAT, t.dims[0], t.dims[1],
                                                     t.dims[2], t.dims[3], t.strides[0],
                                                     t.strides[1], t.strides[2], t.strides[3]));
}

// The descriptors of desc (plans/cudnn_plan.hpp), passed verbatim.
void set_descriptors(ConvPlan& p, const plans::ConvDescriptors& desc) {
  set_tensor(p.x.get(), desc.x);
  set_tensor(p.y.get(), desc.y);
  CODISTILL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   desc.w.dims[0], desc.w.dims[1],
                                                   desc.w.dims[2], desc.w.dims[3]));
  CODISTILL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p.conv.get(), desc.conv.pad_h, desc.conv.pad_w, desc.conv.stride_h, desc.conv.stride_w,
      desc.conv.dilation_h, desc.conv.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // The heuristics only offer what the descriptor's math type permits.
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.get(), p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
}

ConvPlan& conv_plan(const Conv2dShape& s, const Context& ctx) {
  const ConvKey key{ctx.allow_tf32,
                    {s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h,
                     s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w}};
  auto& slot = resources_of(ctx, "conv2d").cudnn_plans().conv[key];
  if (slot) return *slot;
  auto p = std::make_unique<ConvPlan>();
  CODISTILL_CUDNN_CHECK(cudnnCreateTensorDescriptor(p->x.put()));
  CODISTILL_CUDNN_CHECK(cudnnCreateTensorDescriptor(p->y.put()));
  CODISTILL_CUDNN_CHECK(cudnnCreateFilterDescriptor(p->w.put()));
  CODISTILL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(p->conv.put()));
  const plans::ConvDescriptors desc = plans::conv_descriptors(s);
  p->shape = plans::shape_string(s);
  p->tf32 = ctx.allow_tf32;
  set_descriptors(*p, desc);
  int n = 0, c = 0, h = 0, w = 0;
  CODISTILL_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv.get(), p->x.get(),
                                                              p->w.get(), &n, &c, &h, &w));
  if (n != desc.y.dims[0] || c != desc.y.dims[1] || h != desc.y.dims[2] || w != desc.y.dims[3])
    throw std::logic_error("conv2d (cuda): cuDNN's output shape differs from Conv2dShape's");
  return *(slot = std::move(p));
}

// What differs between the passes: cuDNN's ranked list (its _v7 heuristics, no benchmarking
// runs), the workspace size query and the plan's slot for the choice. Everything else is the
// one picker below.
template <ConvPass P>
struct PassApi;

template <>
struct PassApi<ConvPass::forward> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static auto& slot(ConvPlan& p) { return p.fwd; }
  static void ranked(ConvPlan& p, cudnnHandle_t h, Perf* perf, int& count) {
    CODISTILL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(), kCount, &count, perf));
  }
  static cudnnStatus_t workspace(ConvPlan& p, cudnnHandle_t h, cudnnConvolutionFwdAlgo_t a,
                                 std::size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x.get(), p.w.get(), p.conv.get(),
                                                   p.y.get(), a, bytes);
  }
};

template <>
struct PassApi<ConvPass::backward_data> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static auto& slot(ConvPlan& p) { return p.bwd_data; }
  static void ranked(ConvPlan& p, cudnnHandle_t h, Perf* perf, int& count) {
    CODISTILL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(), kCount, &count, perf));
  }
  static cudnnStatus_t workspace(ConvPlan& p, cudnnHandle_t h, cudnnConvolutionBwdDataAlgo_t a,
                                 std::size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.get(), p.y.get(), p.conv.get(),
                                                        p.x.get(), a, bytes);
  }
};

template <>
struct PassApi<ConvPass::backward_filter> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static auto& slot(ConvPlan& p) { return p.bwd_filter; }
  static void ranked(ConvPlan& p, cudnnHandle_t h, Perf* perf, int& count) {
    CODISTILL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(), kCount, &count, perf));
  }
  static cudnnStatus_t workspace(ConvPlan& p, cudnnHandle_t h, cudnnConvolutionBwdFilterAlgo_t a,
                                 std::size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.get(), p.y.get(), p.conv.get(),
                                                          p.w.get(), a, bytes);
  }
};

// The algorithm of pass P for the plan, chosen on first use and kept. cuDNN's ranked list
// becomes plain candidates (status, determinism, the workspace for the math type that would
// run: FMA unless TF32 is allowed; a failed size query, which also rejects combinations
// cuDNN cannot run, makes one unusable), then plans::choose_conv_algorithm picks: the first
// deterministic one within the cap, never a nondeterministic one (bit-exact resume and sync
// mode depend on it).
template <ConvPass P>
const auto& algorithm(ConvPlan& p, cudnnHandle_t h) {
  using Api = PassApi<P>;
  auto& chosen = Api::slot(p);
  if (chosen.chosen) return chosen;
  typename Api::Perf perf[Api::kCount];
  int count = 0;
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(
      p.conv.get(), p.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  Api::ranked(p, h, perf, count);
  std::vector<plans::AlgoCandidate> ranked;
  std::vector<cudnnMathType_t> maths;
  for (int i = 0; i < count; ++i) {
    const auto& q = perf[i];
    plans::AlgoCandidate c;
    c.algo = static_cast<int>(q.algo);
    c.ok = q.status == CUDNN_STATUS_SUCCESS;
    c.deterministic = q.determinism == CUDNN_DETERMINISTIC;
    const cudnnMathType_t math = p.tf32 ? q.mathType : CUDNN_FMA_MATH;
    c.usable = c.ok && cudnnSetConvolutionMathType(p.conv.get(), math) == CUDNN_STATUS_SUCCESS &&
               Api::workspace(p, h, q.algo, &c.workspace) == CUDNN_STATUS_SUCCESS;
    ranked.push_back(c);
    maths.push_back(math);
  }
  const auto choice = plans::choose_conv_algorithm(P, ranked, p.shape);
  chosen = {perf[choice.index].algo, maths[choice.index], ranked[choice.index].workspace, true};
  return chosen;
}

const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

void conv2d_forward(const float* x, const float* w, const float* b, float* y,
                    const Conv2dShape& s, const Context& ctx) {
  s.validate();
  cudnnHandle_t h = handle_for(ctx);
  ConvPlan& p = conv_plan(s, ctx);
  const auto& a = algorithm<ConvPass::forward>(p, h);
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), a.math));
  void* ws = detail::stream_workspace(ctx, a.workspace);
  CODISTILL_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p.x.get(), x, p.w.get(), w,
                                                p.conv.get(), a.algo, ws, a.workspace, &kZero,
                                                p.y.get(), y));
  if (b) bias_add_channels(y, b, s.batch, s.out_channels, s.out_height() * s.out_width(), ctx);
}

void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, const Conv2dShape& s, bool accumulate, const Context& ctx) {
  s.validate();
  cudnnHandle_t h = handle_for(ctx);
  ConvPlan& p = conv_plan(s, ctx);
  if (dx) {
    const auto& a = algorithm<ConvPass::backward_data>(p, h);
    CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), a.math));
    void* ws = detail::stream_workspace(ctx, a.workspace);
    CODISTILL_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, p.w.get(), w, p.y.get(), dy,
                                                       p.conv.get(), a.algo, ws, a.workspace,
                                                       &kZero, p.x.get(), dx));
  }
  const auto& a = algorithm<ConvPass::backward_filter>(p, h);
  CODISTILL_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), a.math));
  // Fetched after the data pass: a larger request may have replaced the buffer.
  void* ws = detail::stream_workspace(ctx, a.workspace);
  CODISTILL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      h, &kOne, p.x.get(), x, p.y.get(), dy, p.conv.get(), a.algo, ws, a.workspace,
      accumulate ? &kOne : &kZero, p.w.get(), dw));
  if (db)
    bias_grad_channels(dy, db, s.batch, s.out_channels, s.out_height() * s.out_width(),
                       accumulate, ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

namespace {
// Channels-last maps are not built here (supports_channels_last() is false): refused.
// Channels-last maps are not built here (supports_channels_last() is false): refused.
void require_nchw(const Conv2dShape& s, const char* op) {
  if (s.channels_last)
    throw std::invalid_argument(std::string(op) + " (cuda): channels-last maps are not supported by the cuda backend");
}
}  // namespace

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 const Conv2dShape& s, kernels::Queue& q) {
  const char* op = "conv2d";
  CudaQueue& cq = enter(q, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  ops::expect(cq.device(), op,
              {{x, s.batch * s.in_channels * s.height * s.width, "x"},
               {w, s.out_channels * s.in_channels * s.kernel_h * s.kernel_w, "w"},
               {b, s.out_channels, "b"},
               {y, s.batch * s.out_channels * s.out_height() * s.out_width(), "y"}});
  cuda::conv2d_forward(f32(x), f32(w), f32(b), f32(y), s, cq.context());
}

void CudaBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                  Tensor& dw, Tensor* db, const Conv2dShape& s,
                                  kernels::Queue& q) {
  const char* op = "conv2d backward";
  CudaQueue& cq = enter(q, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  const std::int64_t nx = s.batch * s.in_channels * s.height * s.width;
  const std::int64_t nw = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
  ops::expect(cq.device(), op,
              {{x, nx, "x"}, {w, nw, "w"}, {dy, s.batch * s.out_channels * s.out_height() * s.out_width(), "dy"},
               {dx, nx, "dx"}, {dw, nw, "dw"}, {db, s.out_channels, "db"}});
  cuda::conv2d_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), s,
                        /*accumulate=*/true, cq.context());
}

}  // namespace codistill::kernels::cuda
