// bfloat16 rounding and the bf16 GEMM engine on the CPU (bf16.hpp).
#include "kernels/cpu/bf16.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstdlib>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/bf16_widened.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/isa.hpp"

namespace codistill::kernels::cpu {
namespace {

// Below this many elements a conversion is not worth an OpenMP fork.
constexpr std::int64_t kParallelElems = std::int64_t{1} << 16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(CODISTILL_NO_MULTIVERSIONING)
#define CODISTILL_BF16_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CODISTILL_BF16_CLONES
#endif

// The rule of bf16_round written without a branch, so that it vectorizes.
CODISTILL_BF16_CLONES void round_span(const float* x, std::uint16_t* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    const std::uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (u >> 16) | 0x40u;
    y[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : nearest);
  }
}

// The same rule, its result kept as the float32 value (the bf16 bits, then 16 zero bits).
CODISTILL_BF16_CLONES void round_values_span(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    const std::uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const std::uint32_t nan = (u & 0xffff0000u) | 0x400000u;
    const std::uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? nan : nearest;
    std::memcpy(y + i, &r, sizeof r);
  }
}

CODISTILL_BF16_CLONES void widen_span(const std::uint16_t* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &u, sizeof u);
  }
}

// f(x + lo, y + lo, hi - lo) over the threads for a long array outside a parallel region,
// else on the calling thread.
template <class In, class Out, class Span>
void split_span(const In* x, Out* y, std::int64_t n, Span f) {
  if (n <= 0) return;
  if (n < kParallelElems || omp_in_parallel()) {
    f(x, y, n);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t lo = n * t / parts, hi = n * (t + 1) / parts;
    f(x + lo, y + lo, hi - lo);
  }
}

}  // namespace

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n) { split_span(x, y, n, round_span); }
void round_values_to_bf16(const float* x, float* y, std::int64_t n) { split_span(x, y, n, round_values_span); }
void widen_bf16(const std::uint16_t* x, float* y, std::int64_t n) { split_span(x, y, n, widen_span); }

Bf16Kernel default_bf16_kernel() {
  const char* want = std::getenv("CODISTILL_BF16_GEMM");
  if (want && *want) {
    const std::string w(want);
    if (w == "onednn") return Bf16Kernel::onednn;
    if (w == "widened") return Bf16Kernel::widened;
    throw std::invalid_argument("CODISTILL_BF16_GEMM='" + w + "' is not one of: onednn, widened");
  }
  return has_amx_bf16() || amd_avx512_bf16() ? Bf16Kernel::onednn : Bf16Kernel::widened;
}

const char* bf16_kernel_name(Bf16Kernel k) { return k == Bf16Kernel::onednn ? "onednn" : "widened"; }

// ---- the engine ----------------------------------------------------------------------------

struct Bf16Gemm::State {
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool>;  // M, N, K, ta, tb, accumulate
  struct Plan {
    dnnl::memory::desc a, b, c;
    dnnl::matmul matmul;
  };
  // Beyond this many shapes the cache starts over: a long run sees a handful (train and
  // evaluation batches, the fused head's last chunk), so this only bounds a pathological one.
  static constexpr std::size_t kMaxPlans = 256;

  // The linear forward's matmuls (bias and relu in the epilogue) and, for frozen weights,
  // the weights rounded and repacked as those matmuls read them.
  struct LinearKey {
    std::array<std::int64_t, 3> mnk;
    bool bias, relu, frozen;
    int threads;
    auto operator<=>(const LinearKey&) const = default;
  };
  struct LinearPlan {
    dnnl::memory::desc x, w, b, y;
    dnnl::matmul matmul;
    bool relu_after = false;  // oneDNN's reference kernel keeps NaN through its relu: ours runs after
  };
  using PackedKey = std::tuple<const float*, std::int64_t, std::int64_t>;  // w, N, K

  std::mutex mu;
  std::unique_ptr<dnnl::engine> engine;  // made on first use: a queue that never multiplies in bf16 pays nothing
  std::unique_ptr<dnnl::stream> stream;
  std::map<Key, Plan> plans;
  std::map<LinearKey, LinearPlan> linear_plans;
  // Per weight array, its packed copies: one per layout asked for (a layout may depend on
  // the batch rows M: training and evaluation batches each keep theirs).
  std::map<PackedKey, std::vector<dnnl::memory>> packed;
  std::vector<std::uint16_t> a_ws, b_ws, shared_ws;
  widened::Workspace wide;  // the widened kernel's (Bf16Kernel::widened)
  std::string impl;

  Plan& plan(std::int64_t M, std::int64_t N, std::int64_t K, bool ta, bool tb, bool acc) {
    const Key key{M, N, K, ta, tb, acc};
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    if (plans.size() >= kMaxPlans) plans.clear();
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    Plan p;
    // A and B as stored: [M, K] / [K, N] row-major, or [K, M] / [N, K] row-major read as
    // their transposes (strides; oneDNN's brgemm matmul takes both, no transposed copy).
    p.a = ta ? dnnl::memory::desc({M, K}, dt::bf16, dnnl::memory::dims{1, M})
             : dnnl::memory::desc({M, K}, dt::bf16, tag::ab);
    p.b = tb ? dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::dims{1, K})
             : dnnl::memory::desc({K, N}, dt::bf16, tag::ab);
    p.c = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (acc) {  // C += A B: a sum post-op reads C before it is written
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, *engine);
    impl = pd.impl_info_str();
    p.matmul = dnnl::matmul(pd);
    return plans.emplace(key, std::move(p)).first->second;
  }

  LinearPlan& linear_plan(std::int64_t M, std::int64_t N, std::int64_t K, bool bias, bool relu, bool frozen) {
    const LinearKey key{{M, N, K}, bias, relu, frozen, omp_get_max_threads()};
    if (auto it = linear_plans.find(key); it != linear_plans.end()) return it->second;
    if (linear_plans.size() >= kMaxPlans) linear_plans.clear();
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    LinearPlan p;
    p.x = dnnl::memory::desc({M, K}, dt::bf16, tag::ab);
    // w^T: the [N, K] rows of w read in place, or, frozen, whatever layout the kernel
    // prefers (packed once by packed_weights).
    p.w = dnnl::memory::desc({K, N}, dt::bf16, frozen ? tag::any : tag::ba);
    p.y = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
    if (bias) p.b = dnnl::memory::desc({1, N}, dt::f32, tag::ab);
    const auto d = bias ? dnnl::matmul::desc(p.x, p.w, p.b, p.y) : dnnl::matmul::desc(p.x, p.w, p.y);
    auto make = [&](bool fused_relu) {
      dnnl::primitive_attr attr;
      if (fused_relu) {  // the JIT kernels' max(v, 0): NaN -> 0, as relu_forward (see dnnl_matmul.cpp)
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      return dnnl::matmul::primitive_desc(d, attr, *engine);
    };
    dnnl::matmul::primitive_desc pd = make(relu);
    if (relu && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      pd = make(false);
      p.relu_after = true;
    }
    p.w = pd.weights_desc();
    impl = pd.impl_info_str();
    p.matmul = dnnl::matmul(pd);
    return linear_plans.emplace(key, std::move(p)).first->second;
  }

  // Frozen w as `want` lays it out: rounded (our rule) into [N, K], then reordered (a
  // permutation of bf16 values: exact) on first use, kept after.
  dnnl::memory packed_weights(const float* w, std::int64_t N, std::int64_t K, const dnnl::memory::desc& want) {
    const PackedKey key{w, N, K};
    if (auto it = packed.find(key); it != packed.end())
      for (const dnnl::memory& m : it->second)
        if (m.get_desc() == want) return m;
    if (packed.size() >= kMaxPlans) packed.clear();
    b_ws.resize(std::max(b_ws.size(), static_cast<std::size_t>(N * K)));
    round_to_bf16(w, b_ws.data(), N * K);
    using dt = dnnl::memory::data_type;
    dnnl::memory src(dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::format_tag::ba), *engine, b_ws.data());
    dnnl::memory dst(want, *engine);  // oneDNN's own, aligned allocation
    dnnl::reorder(src, dst).execute(*stream, src, dst);
    stream->wait();
    packed[key].push_back(dst);
    return dst;
  }
};

Bf16Gemm::Bf16Gemm(Bf16Kernel kernel) : kernel_(kernel), s_(std::make_unique<State>()) {}
Bf16Gemm::~Bf16Gemm() = default;

std::string Bf16Gemm::implementation() const {
  std::lock_guard lock(s_->mu);
  return s_->impl;
}

namespace {

void check_sizes(std::int64_t M, std::int64_t N, std::int64_t K) {
  if (M < 0 || N < 0 || K < 0)
    throw std::invalid_argument("bf16 gemm: negative size M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                " K=" + std::to_string(K));
}

// M, N or K zero: true when nothing is left to multiply (an empty sum leaves C or zeroes it).
bool degenerate(std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate, float* C) {
  if (M == 0 || N == 0) return true;
  if (K > 0) return false;
  if (!accumulate) std::fill(C, C + M * N, 0.0f);
  return true;
}

constexpr const char* kWidenedName = "widened:f32 sgemm";

void grow(std::vector<std::uint16_t>& ws, std::int64_t n) {
  if (ws.size() < static_cast<std::size_t>(n)) ws.resize(static_cast<std::size_t>(n));
}

}  // namespace

void Bf16Gemm::gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
                    const float* B, bool accumulate, float* C) {
  check_sizes(M, N, K);
  if (degenerate(M, N, K, accumulate, C)) return;
  std::lock_guard lock(s_->mu);
  if (kernel_ == Bf16Kernel::widened) {
    s_->impl = kWidenedName;
    widened::gemm(s_->wide, ta, tb, M, N, K, A, nullptr, B, accumulate, C);
    return;
  }
  grow(s_->a_ws, M * K);
  round_to_bf16(A, s_->a_ws.data(), M * K);  // in A's own layout
  multiply(ta, tb, M, N, K, s_->a_ws.data(), B, accumulate, C);
}

void Bf16Gemm::gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const Bf16Operand& A,
                    const float* B, bool accumulate, float* C) {
  check_sizes(M, N, K);
  if (degenerate(M, N, K, accumulate, C)) return;
  if ((kernel_ == Bf16Kernel::widened ? !A.values : !A.bits))
    throw std::invalid_argument("bf16 gemm: the rounded operand was not rounded by this engine's kernel (" +
                                std::string(bf16_kernel_name(kernel_)) + ")");
  std::lock_guard lock(s_->mu);
  if (kernel_ == Bf16Kernel::widened) {
    s_->impl = kWidenedName;
    widened::gemm(s_->wide, ta, tb, M, N, K, nullptr, A.values, B, accumulate, C);
    return;
  }
  multiply(ta, tb, M, N, K, A.bits, B, accumulate, C);
}

Bf16Operand Bf16Gemm::round_operand(const float* x, std::int64_t n) {
  std::lock_guard lock(s_->mu);
  if (kernel_ == Bf16Kernel::widened) {
    auto& ws = s_->wide.shared;
    if (ws.size() < static_cast<std::size_t>(n)) ws.resize(static_cast<std::size_t>(n));
    round_values_to_bf16(x, ws.data(), n);
    return {nullptr, ws.data()};
  }
  grow(s_->shared_ws, n);
  round_to_bf16(x, s_->shared_ws.data(), n);
  return {s_->shared_ws.data(), nullptr};
}

// With the mutex held.
void Bf16Gemm::start_engine() {
  if (s_->engine) return;
  s_->engine = std::make_unique<dnnl::engine>(dnnl::engine::kind::cpu, 0);
  s_->stream = std::make_unique<dnnl::stream>(*s_->engine);
}

void Bf16Gemm::linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M,
                              std::int64_t N, std::int64_t K, bool relu, bool frozen_w) {
  run_linear(x, w, nullptr, b, y, M, N, K, relu, frozen_w);
}

void Bf16Gemm::linear_forward(const float* x, const std::uint16_t* w, const float* b, float* y, std::int64_t M,
                              std::int64_t N, std::int64_t K, bool relu) {
  run_linear(x, nullptr, w, b, y, M, N, K, relu, /*frozen_w=*/false);
}

void Bf16Gemm::run_linear(const float* x, const float* w, const std::uint16_t* w_bf16, const float* b, float* y,
                          std::int64_t M, std::int64_t N, std::int64_t K, bool relu, bool frozen_w) {
  if (M < 1 || N < 1 || K < 1)
    throw std::invalid_argument("bf16 linear forward: sizes M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                " K=" + std::to_string(K) + " (need >= 1)");
  State& s = *s_;
  std::lock_guard lock(s.mu);
  if (kernel_ == Bf16Kernel::widened) {
    s.impl = kWidenedName;
    widened::linear_forward(s.wide, x, w, w_bf16, frozen_w, b, y, M, N, K, relu);
    return;
  }
  try {
    start_engine();
    grow(s.a_ws, M * K);
    round_to_bf16(x, s.a_ws.data(), M * K);
    State::LinearPlan& p = s.linear_plan(M, N, K, b != nullptr, relu, frozen_w);
    dnnl::memory wm;
    if (w_bf16) {  // [N, K] rows read as w^T (tag::ba), in place; oneDNN only reads it
      wm = dnnl::memory(p.w, *s.engine, const_cast<std::uint16_t*>(w_bf16));
    } else if (frozen_w) {
      wm = s.packed_weights(w, N, K, p.w);
    } else {
      grow(s.b_ws, N * K);
      round_to_bf16(w, s.b_ws.data(), N * K);
      wm = dnnl::memory(p.w, *s.engine, s.b_ws.data());
    }
    // oneDNN takes non-const handles; it only reads the sources.
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(p.x, *s.engine, s.a_ws.data())},
                                               {DNNL_ARG_WEIGHTS, wm},
                                               {DNNL_ARG_DST, dnnl::memory(p.y, *s.engine, y)}};
    if (b) args[DNNL_ARG_BIAS] = dnnl::memory(p.b, *s.engine, const_cast<float*>(b));
    p.matmul.execute(*s.stream, args);
    s.stream->wait();
    if (p.relu_after)
      for (std::int64_t i = 0; i < M * N; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
  } catch (const dnnl::error& e) {
    throw std::runtime_error("bf16 linear forward (oneDNN matmul) M=" + std::to_string(M) + " N=" +
                             std::to_string(N) + " K=" + std::to_string(K) + ": " + e.what());
  }
}

// With the mutex held: B rounded, then the matmul of this shape (built on first use).
void Bf16Gemm::multiply(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* A,
                        const float* B, bool accumulate, float* C) {
  State& s = *s_;
  try {
    start_engine();
    grow(s.b_ws, K * N);
    round_to_bf16(B, s.b_ws.data(), K * N);
    State::Plan& p = s.plan(M, N, K, ta, tb, accumulate);
    // oneDNN takes non-const handles; it only reads the sources.
    dnnl::memory a(p.a, *s.engine, const_cast<std::uint16_t*>(A)), b(p.b, *s.engine, s.b_ws.data());
    dnnl::memory c(p.c, *s.engine, C);
    p.matmul.execute(*s.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.stream->wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error("bf16 gemm (oneDNN matmul) M=" + std::to_string(M) + " N=" + std::to_string(N) +
                             " K=" + std::to_string(K) + ": " + e.what());
  }
}

template <class T>
void gemm_compute(Bf16Gemm* bf16, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const T* A,
                  const T* B, bool accumulate, T* C) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {
      bf16->gemm(ta, tb, M, N, K, A, B, accumulate, C);
      return;
    }
  }
  gemm<T>(ta, tb, M, N, K, T(1), A, B, accumulate ? T(1) : T(0), C, Impl::fast);
}

template void gemm_compute<float>(Bf16Gemm*, bool, bool, std::int64_t, std::int64_t, std::int64_t, const float*,
                                  const float*, bool, float*);
template void gemm_compute<double>(Bf16Gemm*, bool, bool, std::int64_t, std::int64_t, std::int64_t, const double*,
                                   const double*, bool, double*);

}  // namespace codistill::kernels::cpu
