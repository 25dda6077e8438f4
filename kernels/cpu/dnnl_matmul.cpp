#include "kernels/cpu/dnnl_matmul.hpp"

#include <omp.h>

#include <array>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/dnnl_context.hpp"

namespace codistill::kernels::cpu {
namespace {

using memory = dnnl::memory;
using Tag = memory::format_tag;

// What selects a primitive: the shape, the bias, the fused relu and the thread count.
struct Key {
  std::array<std::int64_t, 3> mnk;
  bool bias, relu;
  int threads;
  auto operator<=>(const Key&) const = default;
};

struct Entry {
  std::optional<dnnl::matmul> prim;  // empty: only a reference kernel (not used)
  memory::desc x, w, b, y;
};

}  // namespace

struct DnnlMatmul::State {
  DnnlContext ctx;  // calls take turns under ctx.mu
  DnnlCache<Key, Entry> entries;

  Entry build(std::int64_t M, std::int64_t N, std::int64_t K, bool bias, bool relu) {
    const auto f32 = memory::data_type::f32;
    Entry e;
    e.x = memory::desc({M, K}, f32, Tag::ab);
    e.w = memory::desc({K, N}, f32, Tag::ba);  // w^T: the [N, K] rows of w, read in place
    e.y = memory::desc({M, N}, f32, Tag::ab);
    if (bias) e.b = memory::desc({1, N}, f32, Tag::ab);
    const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(e.x, e.w, e.b, e.y) : dnnl::matmul::desc(e.x, e.w, e.y);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
    if (relu) {
      // oneDNN's relu with slope 0 is max(v, 0) with the 0 as the second operand (vmaxps):
      // NaN -> 0, the bits of relu_forward's `v > 0 ? v : 0` (test_linear.cpp).
      dnnl::post_ops po;
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(d, attr, ctx.engine);
    // oneDNN answers every shape, with its slow reference kernel where no JIT one applies
    // (a CPU without AVX2, odd strides): gemm.cpp is faster there.
    if (std::string(pd.impl_info_str()).find("ref") == std::string::npos) e.prim.emplace(pd);
    return e;
  }
};

DnnlMatmul::DnnlMatmul() : st_(std::make_unique<State>()) {}
DnnlMatmul::~DnnlMatmul() = default;

bool DnnlMatmul::linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M,
                                std::int64_t N, std::int64_t K, bool relu) {
  if (M < 1 || N < 1 || K < 1)
    throw std::invalid_argument("DnnlMatmul::linear_forward: sizes M=" + std::to_string(M) + " N=" +
                                std::to_string(N) + " K=" + std::to_string(K) + " (need >= 1)");
  // Inside a parallel region oneDNN would size the primitive for the outer team and then
  // run only the calling thread's share of it: the caller's gemm path takes those calls.
  if (omp_in_parallel()) return false;
  State& st = *st_;
  DnnlContext& dc = st.ctx;
  std::lock_guard lock(dc.mu);
  const Key k{{M, N, K}, b != nullptr, relu, omp_get_max_threads()};
  Entry& e = st.entries.get(k, [&] { return st.build(M, N, K, b != nullptr, relu); });
  if (!e.prim) return false;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, dc.wrap(e.x, x)}, {DNNL_ARG_WEIGHTS, dc.wrap(e.w, w)}, {DNNL_ARG_DST, dc.wrap(e.y, y)}};
  if (b) args[DNNL_ARG_BIAS] = dc.wrap(e.b, b);
  e.prim->execute(dc.stream, args);
  dc.stream.wait();
  return true;
}

}  // namespace codistill::kernels::cpu
