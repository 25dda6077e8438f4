#include "kernels/cpu/linear.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/gemm.hpp"

namespace codistill::kernels::cpu {
namespace {

void check(const char* op, std::int64_t M, std::int64_t N, std::int64_t K) {
  if (M < 0 || N < 1 || K < 1)
    throw std::invalid_argument(std::string(op) + ": bad sizes batch=" + std::to_string(M) +
                                " out=" + std::to_string(N) + " in=" + std::to_string(K) +
                                " (need batch >= 0, out >= 1, in >= 1)");
}

template <class T>
void forward_reference(const T* x, const T* w, const T* b, T* y, std::int64_t M, std::int64_t N,
                       std::int64_t K) {
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = b ? static_cast<double>(b[n]) : 0.0;
      for (std::int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(x[m * K + k]) * static_cast<double>(w[n * K + k]);
      y[m * N + n] = static_cast<T>(acc);
    }
}

template <class T>
void backward_reference(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t M,
                        std::int64_t N, std::int64_t K, bool accumulate) {
  if (dx)
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t k = 0; k < K; ++k) {
        double acc = 0;
        for (std::int64_t n = 0; n < N; ++n)
          acc += static_cast<double>(dy[m * N + n]) * static_cast<double>(w[n * K + k]);
        dx[m * K + k] = static_cast<T>(acc);
      }
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k) {
      double acc = accumulate ? static_cast<double>(dw[n * K + k]) : 0.0;
      for (std::int64_t m = 0; m < M; ++m)
        acc += static_cast<double>(dy[m * N + n]) * static_cast<double>(x[m * K + k]);
      dw[n * K + k] = static_cast<T>(acc);
    }
  if (db) bias_grad_rows(dy, db, M, N, accumulate, Impl::reference);
}

// The reference path's bf16 operands: the values bf16 holds, in float (T is float here).
template <class T>
std::vector<T> rounded(const T* x, std::int64_t n) {
  std::vector<T> out(x, x + n);
  if constexpr (std::is_same_v<T, float>) round_values_to_bf16(out.data(), out.data(), n);
  return out;
}

// Below this many elements of dy the fused backward's own loops (relu gradient, bias
// gradient) stay on one thread when its GEMMs do.
constexpr std::int64_t kFuseParallelMin = 1 << 15;

}  // namespace

template <class T>
void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t M, std::int64_t N,
                    std::int64_t K, Impl impl, Bf16Gemm* bf16) {
  check("linear_forward", M, N, K);
  if constexpr (!std::is_same_v<T, float>) bf16 = nullptr;  // mixed precision is float32's
  if (impl == Impl::reference) {
    if (bf16) {
      const auto xr = rounded(x, M * K), wr = rounded(w, N * K);
      forward_reference(xr.data(), wr.data(), b, y, M, N, K);
    } else {
      forward_reference(x, w, b, y, M, N, K);
    }
    return;
  }
  // y = x * w^T: the transpose is a BLAS flag (a stride for oneDNN), no copy of w.
  gemm_compute<T>(bf16, false, true, M, N, K, x, w, false, y);
  if (b) bias_add_rows(y, b, M, N, Impl::fast);
}

template <class T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t M,
                     std::int64_t N, std::int64_t K, bool accumulate, Impl impl, Bf16Gemm* bf16) {
  check("linear_backward", M, N, K);
  if constexpr (!std::is_same_v<T, float>) bf16 = nullptr;
  if (impl == Impl::reference) {
    if (bf16) {  // the GEMM operands rounded; db sums dy itself (no GEMM: float32)
      const auto xr = rounded(x, M * K), wr = rounded(w, N * K), dyr = rounded(dy, M * N);
      backward_reference(xr.data(), wr.data(), dyr.data(), dx, dw, static_cast<T*>(nullptr), M, N, K, accumulate);
      if (db) bias_grad_rows(dy, db, M, N, accumulate, Impl::reference);
    } else {
      backward_reference(x, w, dy, dx, dw, db, M, N, K, accumulate);
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && M > 0) {  // dy rounded once for both products
      const Bf16Operand g = bf16->round_operand(dy, M * N);
      if (dx) bf16->gemm(false, false, M, K, N, g, w, false, dx);
      bf16->gemm(true, false, N, K, M, g, x, accumulate, dw);
      if (db) bias_grad_rows(dy, db, M, N, accumulate, Impl::fast);
      return;
    }
  }
  if (dx) gemm_compute<T>(bf16, false, false, M, K, N, dy, w, false, dx);  // dy * w
  gemm_compute<T>(bf16, true, false, N, K, M, dy, x, accumulate, dw);      // dy^T x
  if (db) bias_grad_rows(dy, db, M, N, accumulate, Impl::fast);
}

template <class T>
void linear_backward_relu(const T* x, const T* w, const T* dy, const T* relu_y, T* dpre, T* dx, T* dw, T* db,
                          std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate) {
  check("linear_backward", M, N, K);
  if (relu_y && !dpre) throw std::invalid_argument("linear_backward: a fused relu needs dpre");
  if (M == 0) {  // nothing to sum: dw and db keep (accumulate) or get zeros
    if (!accumulate) {
      std::fill(dw, dw + N * K, T(0));
      if (db) std::fill(db, db + N, T(0));
    }
    return;
  }
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const GemmSplit sdx = gemm_split<T>(M, K, N, threads);  // dx[M, K] = g[M, N] w[N, K]
  const GemmSplit sdw = gemm_split<T>(N, K, M, threads);  // dw[N, K] (+)= g^T x
  // A GEMM's part p runs on thread (p + shift) % (the team's size): two one-part GEMMs (a
  // small layer's) run on two threads side by side.
  const int dx_parts = dx ? sdx.parts : 0, dw_shift = dx_parts;
  const int nt = std::min(threads, std::max(dx_parts + sdw.parts, M * N >= kFuseParallelMin ? threads : 1));
  const T* g = relu_y ? dpre : dy;
  const T beta = accumulate ? T(1) : T(0);
  const Isa isa = chosen_isa();  // before the region: it may throw
  auto body = [&](int t, int parts, bool sync) {
    if (relu_y) {  // dpre = y > 0 ? dy : 0, this thread's block of 16-element chunks; the GEMMs read all of it
      const std::int64_t n = M * N, units = (n + 15) / 16;
      const std::int64_t lo = std::min(n, units * t / parts * 16), hi = std::min(n, units * (t + 1) / parts * 16);
      if (lo < hi) relu_backward_span(relu_y + lo, dy + lo, dpre + lo, hi - lo);
      if (sync) {
#pragma omp barrier
      }
    }
    for (int p = 0; p < dx_parts; ++p)
      if (p % parts == t) gemm_part<T>(sdx, p, false, false, M, K, N, T(1), g, w, T(0), dx);
    for (int p = 0; p < sdw.parts; ++p)
      if ((p + dw_shift) % parts == t) gemm_part<T>(sdw, p, true, false, N, K, M, T(1), g, x, beta, dw);
    if (db) {
      const std::int64_t lo = N * t / parts, hi = N * (t + 1) / parts;
      if (lo < hi) bias_grad_rows_cols(g, db, M, N, lo, hi, accumulate, isa);
    }
  };
  if (nt <= 1) return body(0, 1, false);
#pragma omp parallel num_threads(nt)
  body(omp_get_thread_num(), omp_get_num_threads(), true);
}

#define CODISTILL_LINEAR(T)                                                                  \
  template void linear_forward<T>(const T*, const T*, const T*, T*, std::int64_t,            \
                                  std::int64_t, std::int64_t, Impl, Bf16Gemm*);              \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t,   \
                                   std::int64_t, std::int64_t, bool, Impl, Bf16Gemm*);       \
  template void linear_backward_relu<T>(const T*, const T*, const T*, const T*, T*, T*, T*,  \
                                        T*, std::int64_t, std::int64_t, std::int64_t, bool);
CODISTILL_LINEAR(float)
CODISTILL_LINEAR(double)
#undef CODISTILL_LINEAR

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

namespace {

// linear_forward with a bf16 weight (Op::linear_bf16_weights): a forward-only model's
// matrices held as bf16. The fast path reads w as stored through the queue's bf16 engine;
// the reference widens it (exactly) and rounds x as that engine does. A float32-compute fast
// queue is refused: it would need a float32 copy of w per call, the memory bf16 weights save.
void linear_forward_bf16_weights(const Backend& be, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 Activation act, Tensor* pre, Queue& q) {
  require_support(be, Op::linear_bf16_weights, x.dtype(), "linear");
  if (act != Activation::none) require_support(be, Op::linear_activation, x.dtype(), "linear");
  if (y.dtype() != DType::f32 || (b && b->dtype() != DType::f32))
    throw std::invalid_argument("linear (bf16 weights): x, bias and y must be float32");
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  const auto* wb = static_cast<const std::uint16_t*>(w.raw());
  cpu::Bf16Gemm* engine = gemm_engine(q);
  bool fused_relu = false;
  if (impl_of(q) == cpu::Impl::fast) {
    if (!engine)
      throw std::invalid_argument("linear (bf16 weights): the queue computes in float32; bf16 weights need a "
                                  "bf16-compute queue (QueueOptions::compute)");
    if (M > 0) engine->linear_forward(x.data<float>(), wb, opt<float>(b), y.data<float>(), M, N, K,
                                      act == Activation::relu);
    fused_relu = true;
  } else {
    std::vector<float> wf(static_cast<std::size_t>(N * K));
    for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_float(wb[i]);
    cpu::linear_forward<float>(x.data<float>(), wf.data(), opt<float>(b), y.data<float>(), M, N, K,
                               cpu::Impl::reference, engine);
  }
  if (act == Activation::none || (fused_relu && act == Activation::relu)) return;
  if (keeps_input(act) && pre) std::memcpy(pre->raw(), y.raw(), y.nbytes());
  activate<float>(y.data<float>(), y.data<float>(), y.numel(), act, impl_of(q));
}

}  // namespace

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Activation act,
                                Tensor* pre, Queue& q) {
  if (w.dtype() == DType::bf16 && x.dtype() == DType::f32)
    return linear_forward_bf16_weights(*this, x, w, b, y, act, pre, q);
  run_op(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), "linear", [&]<class T>() {
    const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
    // float32 on the fast path: oneDNN's matmul primitive, bias and relu inside its kernel:
    // in bf16 (kernels/cpu/bf16.hpp; frozen weights packed once) or in float32
    // (kernels/cpu/dnnl_matmul.hpp). The reference queue keeps its loops (tests' truth).
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (impl_of(q) == cpu::Impl::fast && M > 0 && N > 0 && K > 0 && gemm_engine(q)) {
        gemm_engine(q)->linear_forward(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(), M, N, K,
                                       act == Activation::relu, q.options().frozen_params);
        done = true;
      } else {
        done = impl_of(q) == cpu::Impl::fast && M > 0 && N > 0 && K > 0 &&
               cpu_queue(q, "linear").matmul().linear_forward(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(),
                                                               M, N, K, act == Activation::relu);
      }
    }
    if (!done)
      cpu::linear_forward<T>(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(), M, N, K, impl_of(q),
                             gemm_engine(q));
    if (act == Activation::none || (done && act == Activation::relu)) return;
    // gelu's and silu's backward need the pre-activation; relu's only its output (in place).
    if (keeps_input(act) && pre) std::memcpy(pre->raw(), y.raw(), y.nbytes());
    activate<T>(y.data<T>(), y.data<T>(), y.numel(), act, impl_of(q));
  });
}

void CpuBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db,
                                 Activation act, const Tensor* saved, Tensor* dpre, bool accumulate, Queue& q) {
  run_op(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), "linear", [&]<class T>() {
    const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
    if ((act == Activation::none || act == Activation::relu) && impl_of(q) == cpu::Impl::fast && !gemm_engine(q)) {
      if (act == Activation::relu && (!saved || !dpre))
        throw std::invalid_argument("linear backward: a fused activation needs saved and dpre");
      cpu::linear_backward_relu<T>(x.data<T>(), w.data<T>(), dy.data<T>(),
                                   act == Activation::relu ? saved->data<T>() : nullptr, opt<T>(dpre), opt<T>(dx),
                                   dw.data<T>(), opt<T>(db), M, N, K, accumulate);
      return;
    }
    const T* g = dy.data<T>();
    if (act != Activation::none) {
      if (!saved || !dpre) throw std::invalid_argument("linear backward: a fused activation needs saved and dpre");
      activate_backward<T>(saved->data<T>(), g, dpre->data<T>(), dy.numel(), act, impl_of(q));
      g = dpre->data<T>();
    }
    cpu::linear_backward<T>(x.data<T>(), w.data<T>(), g, opt<T>(dx), dw.data<T>(), opt<T>(db), M, N, K,
                            accumulate, impl_of(q), gemm_engine(q));
  });
}

}  // namespace codistill::kernels::cpu
