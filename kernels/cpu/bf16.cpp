// bfloat16 rounding and the bf16 GEMM engine on the CPU (bf16.hpp).
#include "kernels/cpu/bf16.hpp"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.hpp"

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

}  // namespace

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n) {
  if (n <= 0) return;
  if (n < kParallelElems || omp_in_parallel()) {
    round_span(x, y, n);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t lo = n * t / parts, hi = n * (t + 1) / parts;
    round_span(x + lo, y + lo, hi - lo);
  }
}

void round_values_to_bf16(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = bf16_rounded(x[i]);
}

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

  std::mutex mu;
  std::unique_ptr<dnnl::engine> engine;  // made on first use: a queue that never multiplies in bf16 pays nothing
  std::unique_ptr<dnnl::stream> stream;
  std::map<Key, Plan> plans;
  std::vector<std::uint16_t> a_ws, b_ws, shared_ws;
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
};

Bf16Gemm::Bf16Gemm() : s_(std::make_unique<State>()) {}
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

void grow(std::vector<std::uint16_t>& ws, std::int64_t n) {
  if (ws.size() < static_cast<std::size_t>(n)) ws.resize(static_cast<std::size_t>(n));
}

}  // namespace

void Bf16Gemm::gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
                    const float* B, bool accumulate, float* C) {
  check_sizes(M, N, K);
  if (degenerate(M, N, K, accumulate, C)) return;
  std::lock_guard lock(s_->mu);
  grow(s_->a_ws, M * K);
  round_to_bf16(A, s_->a_ws.data(), M * K);  // in A's own layout
  multiply(ta, tb, M, N, K, s_->a_ws.data(), B, accumulate, C);
}

void Bf16Gemm::gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* A,
                    const float* B, bool accumulate, float* C) {
  check_sizes(M, N, K);
  if (degenerate(M, N, K, accumulate, C)) return;
  std::lock_guard lock(s_->mu);
  multiply(ta, tb, M, N, K, A, B, accumulate, C);
}

const std::uint16_t* Bf16Gemm::round_operand(const float* x, std::int64_t n) {
  std::lock_guard lock(s_->mu);
  grow(s_->shared_ws, n);
  round_to_bf16(x, s_->shared_ws.data(), n);
  return s_->shared_ws.data();
}

// With the mutex held: B rounded, then the matmul of this shape (built on first use).
void Bf16Gemm::multiply(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* A,
                        const float* B, bool accumulate, float* C) {
  State& s = *s_;
  try {
    if (!s.engine) {
      s.engine = std::make_unique<dnnl::engine>(dnnl::engine::kind::cpu, 0);
      s.stream = std::make_unique<dnnl::stream>(*s.engine);
    }
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
