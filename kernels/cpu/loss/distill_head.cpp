// The fused linear + distillation head on the CPU (distill_head.hpp).
#include "kernels/cpu/loss/distill_head.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear.hpp"

namespace codistill::kernels::cpu {
namespace {

constexpr const char* kOp = "linear_distill_head";

template <class T>
void check_args(const T* h, const T* w, std::int64_t N, std::int64_t H, std::int64_t V,
                const HeadTeacherPtrs<T>* teachers, int K, const std::int32_t* labels,
                const DistillHeadParams& p) {
  auto fail = [](const std::string& why) { throw std::invalid_argument(std::string(kOp) + ": " + why); };
  if (N <= 0 || H <= 0 || V <= 0)
    fail("need N, H, V > 0, got N=" + std::to_string(N) + " H=" + std::to_string(H) +
         " V=" + std::to_string(V));
  if (K < 0) fail("K must be >= 0, got " + std::to_string(K));
  if (!(p.loss.temperature > 0) || !std::isfinite(p.loss.temperature))
    fail("temperature must be finite and > 0, got " + std::to_string(p.loss.temperature));
  if (!h || !w || !labels) fail("null hidden states, weight or labels");
  for (int k = 0; k < K; ++k) {
    const auto& t = teachers[k];
    if (!t.hidden || (!t.weight && !t.weight_bf16))
      fail("teacher " + std::to_string(k) + " has a null hidden or weight");
    if (t.dim <= 0) fail("teacher " + std::to_string(k) + " has hidden size " + std::to_string(t.dim));
  }
}

DistillLossResult finish(DistillLossSums s, std::int64_t rows, const DistillLossParams& p) {
  DistillLossResult res;
  res.rows = rows;
  res.ce = s.ce / static_cast<double>(rows);
  res.distill = s.kl / static_cast<double>(rows);
  res.loss = p.hard_weight * res.ce + p.weight * res.distill;
  return res;
}

// ---- reference ------------------------------------------------------------------------

// out[j] = bias[j] + sum_i x[i] w[j, i], in double.
template <class T>
void logits_row(const T* x, const T* w, const T* bias, std::int64_t D, std::int64_t V,
                std::vector<double>& out) {
  for (std::int64_t j = 0; j < V; ++j) {
    double acc = bias ? static_cast<double>(bias[j]) : 0.0;
    for (std::int64_t i = 0; i < D; ++i)
      acc += static_cast<double>(x[i]) * static_cast<double>(w[j * D + i]);
    out[j] = acc;
  }
}

void log_softmax(const std::vector<double>& x, double mul, std::vector<double>& out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : x) mx = std::max(mx, v * mul);
  double sum = 0;
  for (double v : x) sum += std::exp(v * mul - mx);
  const double lse = mx + std::log(sum);
  for (std::size_t j = 0; j < x.size(); ++j) out[j] = x[j] * mul - lse;
}

// The reference's bf16 operands: copies holding the values bf16 holds (T is float here).
template <class T>
std::vector<T> rounded(const T* x, std::int64_t n) {
  std::vector<T> out(x, x + n);
  if constexpr (std::is_same_v<T, float>) round_values_to_bf16(out.data(), out.data(), n);
  return out;
}

// The reference's teacher operands: bf16-held weights widened to the float values they hold
// and, with teacher_bf16, every teacher's h_k and W_k rounded (copies, kept here).
template <class T>
struct ReferenceTeachers {
  std::vector<HeadTeacherPtrs<T>> ptrs;
  std::vector<std::vector<T>> held;

  ReferenceTeachers(const HeadTeacherPtrs<T>* teachers, int K, std::int64_t N, std::int64_t V, bool teacher_bf16)
      : ptrs(teachers, teachers + K) {
    held.reserve(static_cast<std::size_t>(3 * K));  // no reallocation: the pointers stay valid
    for (auto& t : ptrs) {
      if (t.weight_bf16) {
        held.emplace_back(static_cast<std::size_t>(V * t.dim));
        for (std::size_t i = 0; i < held.back().size(); ++i) held.back()[i] = bf16_to_float(t.weight_bf16[i]);
        t.weight = held.back().data();
      }
      if (!teacher_bf16) continue;
      held.push_back(rounded(t.hidden, N * t.dim));
      t.hidden = held.back().data();
      held.push_back(rounded(t.weight, V * t.dim));
      t.weight = held.back().data();
    }
  }
};

template <class T>
DistillLossResult head_reference(const T* h, const T* w, const T* b, std::int64_t N,
                                 std::int64_t H, std::int64_t V,
                                 const HeadTeacherPtrs<T>* teachers, int K,
                                 const std::int32_t* labels, T* dh, T* dw, T* db,
                                 const DistillHeadParams& hp, std::int64_t rows, bool bf16,
                                 bool teacher_bf16) {
  // Mixed precision: the GEMM operands rounded once here (the student's h and W, each
  // teacher's h_k and W_k), the logits gradient per row below; the sums stay in double.
  std::vector<T> hr, wr;
  if (bf16) {
    hr = rounded(h, N * H), wr = rounded(w, V * H);
    h = hr.data(), w = wr.data();
  }
  const ReferenceTeachers<T> rt(teachers, K, N, V, teacher_bf16);
  teachers = rt.ptrs.data();
  const DistillLossParams& p = hp.loss;
  const double temp = p.temperature, scale = 1.0 / static_cast<double>(rows);
  const auto v = static_cast<std::size_t>(V);
  std::vector<double> z(v), lp(v), lpt(v), t(v), lq(v), q(v), d(v), dr(v);
  std::vector<double> dw_acc(dw ? v * static_cast<std::size_t>(H) : 0), db_acc(db ? v : 0);
  double ce_sum = 0, kl_sum = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    const std::int64_t y = labels[r];
    if (y == -1) {  // no loss and a zero gradient: dh's row is zero, dW and db get nothing
      if (dh) std::fill(dh + r * H, dh + (r + 1) * H, T(0));
      continue;
    }
    logits_row(h + r * H, w, b, H, V, z);
    log_softmax(z, 1.0, lp);
    log_softmax(z, 1.0 / temp, lpt);
    ce_sum += -lp[static_cast<std::size_t>(y)];
    std::fill(q.begin(), q.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const auto& tk = teachers[k];
      logits_row(tk.hidden + r * tk.dim, tk.weight, tk.bias, tk.dim, V, t);
      log_softmax(t, 1.0 / temp, lq);
      for (std::size_t j = 0; j < v; ++j) q[j] += std::exp(lq[j]) / K;
    }
    double kl = 0;
    for (std::size_t j = 0; j < v && K > 0; ++j)
      if (q[j] > 0) kl += q[j] * (std::log(q[j]) - lpt[j]);
    kl_sum += temp * temp * kl;
    for (std::size_t j = 0; j < v; ++j) {
      double g = p.hard_weight * (std::exp(lp[j]) - (static_cast<std::int64_t>(j) == y ? 1.0 : 0.0));
      if (K > 0) g += p.weight * temp * (std::exp(lpt[j]) - q[j]);
      d[j] = scale * g;
      // The fast path rounds the float32 gradient (scaled) as the GEMMs' operand; db sums it
      // unrounded.
      dr[j] = d[j];
      if constexpr (std::is_same_v<T, float>)
        if (bf16) dr[j] = bf16_rounded(static_cast<float>(d[j]));
    }
    if (dh)
      for (std::int64_t i = 0; i < H; ++i) {
        double acc = 0;
        for (std::size_t j = 0; j < v; ++j) acc += dr[j] * static_cast<double>(w[j * H + i]);
        dh[r * H + i] = static_cast<T>(acc);
      }
    if (dw)
      for (std::size_t j = 0; j < v; ++j)
        for (std::int64_t i = 0; i < H; ++i) dw_acc[j * H + i] += dr[j] * static_cast<double>(h[r * H + i]);
    if (db)
      for (std::size_t j = 0; j < v; ++j) db_acc[j] += d[j];
  }
  if (dw)
    for (std::size_t e = 0; e < dw_acc.size(); ++e) dw[e] = static_cast<T>(dw[e] + dw_acc[e]);
  if (db)
    for (std::size_t j = 0; j < v; ++j) db[j] = static_cast<T>(db[j] + db_acc[j]);
  return finish({ce_sum, kl_sum}, rows, p);
}

// ---- fast path ----------------------------------------------------------------------------

template <class T>
struct FreeDeleter {
  void operator()(T* p) const noexcept { std::free(p); }
};

template <class T>
DistillLossResult head_fast(const T* h, const T* w, const T* b, std::int64_t N, std::int64_t H,
                            std::int64_t V, const HeadTeacherPtrs<T>* teachers, int K,
                            const std::int32_t* labels, T* dh, T* dw, T* db,
                            const DistillHeadParams& p, std::int64_t rows, Bf16Gemm* bf16,
                            Bf16Gemm* teacher_bf16) {
  const bool grad = dh || dw || db;
  const std::int64_t chunk = distill_head_chunk_rows(N, V, K, sizeof(T), p.workspace_bytes);
  // The chunk's logits: the student's (then its gradient, in place), then each teacher's.
  const std::size_t slot = static_cast<std::size_t>(chunk) * static_cast<std::size_t>(V);
  const std::size_t bytes = (static_cast<std::size_t>(K + 1) * slot * sizeof(T) + 63) / 64 * 64;
  const std::unique_ptr<T, FreeDeleter<T>> ws(static_cast<T*>(std::aligned_alloc(64, bytes)));
  if (!ws) throw std::bad_alloc();
  T* z = ws.get();
  std::vector<T*> tl(static_cast<std::size_t>(K));
  for (int k = 0; k < K; ++k) tl[static_cast<std::size_t>(k)] = z + static_cast<std::size_t>(k + 1) * slot;

  DistillLossSums sums;
  for (std::int64_t r0 = 0; r0 < N; r0 += chunk) {
    const std::int64_t c = std::min(chunk, N - r0);
    const std::int32_t* y = labels + r0;
    // A chunk of ignored rows only: nothing to compute, dh's rows are zero.
    if (std::all_of(y, y + c, [](std::int32_t l) { return l == -1; })) {
      if (dh) std::fill(dh + r0 * H, dh + (r0 + c) * H, T(0));
      continue;
    }
    linear_forward<T>(h + r0 * H, w, b, z, c, V, H, Impl::fast, bf16);
    for (int k = 0; k < K; ++k) {
      const auto& t = teachers[k];
      if constexpr (std::is_same_v<T, float>) {
        if (t.weight_bf16) {  // held as bf16: read as stored (check_args saw teacher_bf16 set)
          teacher_bf16->linear_forward(t.hidden + r0 * t.dim, t.weight_bf16, t.bias, tl[static_cast<std::size_t>(k)],
                                       c, V, t.dim, /*relu=*/false);
          continue;
        }
      }
      linear_forward<T>(t.hidden + r0 * t.dim, t.weight, t.bias, tl[static_cast<std::size_t>(k)],
                        c, V, t.dim, Impl::fast, teacher_bf16);
    }
    const DistillLossSums s =
        distill_loss_rows<T>(z, tl.data(), K, y, grad ? z : nullptr, c, V, p.loss, rows, Impl::fast);
    sums.ce += s.ce;
    sums.kl += s.kl;
    if (!grad) continue;
    // dz [c, V] row-major: dh = dz W ([V, H] as stored), dW += dz^T h (dz read transposed by
    // a BLAS flag); both split over threads along their larger side (H or V).
    if constexpr (std::is_same_v<T, float>) {
      if (bf16) {  // dz rounded once for both products
        const Bf16Operand g = bf16->round_operand(z, c * V);
        if (dh) bf16->gemm(false, false, c, H, V, g, w, false, dh + r0 * H);
        if (dw) bf16->gemm(true, false, V, H, c, g, h + r0 * H, true, dw);
        if (db) bias_grad_rows<T>(z, db, c, V, /*accumulate=*/true, Impl::fast);
        continue;
      }
    }
    if (dh) gemm_compute<T>(bf16, false, false, c, H, V, z, w, false, dh + r0 * H);
    if (dw) gemm_compute<T>(bf16, true, false, V, H, c, z, h + r0 * H, true, dw);
    if (db) bias_grad_rows<T>(z, db, c, V, /*accumulate=*/true, Impl::fast);
  }
  return finish(sums, rows, p.loss);
}

}  // namespace

template <class T>
DistillLossResult linear_distill_head(const T* h, const T* w, const T* b, std::int64_t N,
                                      std::int64_t H, std::int64_t V,
                                      const HeadTeacherPtrs<T>* teachers, int K,
                                      const std::int32_t* labels, T* dh, T* dw, T* db,
                                      const DistillHeadParams& p, Impl impl, Bf16Gemm* bf16,
                                      Bf16Gemm* teacher_bf16) {
  if constexpr (!std::is_same_v<T, float>) bf16 = teacher_bf16 = nullptr;  // mixed precision is float32's
  check_args(h, w, N, H, V, teachers, K, labels, p);
  for (int k = 0; k < K; ++k)
    if (teachers[k].weight_bf16 && !teacher_bf16 && impl == Impl::fast)
      throw std::invalid_argument(std::string(kOp) + ": teacher " + std::to_string(k) +
                                  "'s weight is bf16, which needs bf16 teacher compute (teacher_compute)");
  const std::int64_t rows = count_distill_rows(labels, N, V, kOp);
  if (rows == 0) {  // every row ignored: zero loss and a zero gradient, as distill_loss
    if (dh) std::fill(dh, dh + N * H, T(0));
    return DistillLossResult{};
  }
  if (impl == Impl::reference)
    return head_reference(h, w, b, N, H, V, teachers, K, labels, dh, dw, db, p, rows, bf16 != nullptr,
                          teacher_bf16 != nullptr);
  return head_fast(h, w, b, N, H, V, teachers, K, labels, dh, dw, db, p, rows, bf16, teacher_bf16);
}

#define CODISTILL_HEAD(T)                                                                        \
  template DistillLossResult linear_distill_head<T>(                                             \
      const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,                    \
      const HeadTeacherPtrs<T>*, int, const std::int32_t*, T*, T*, T*, const DistillHeadParams&, \
      Impl, Bf16Gemm*, Bf16Gemm*);
CODISTILL_HEAD(float)
CODISTILL_HEAD(double)
#undef CODISTILL_HEAD

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

DistillLossResult CpuBackend::linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                                  const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                                  Tensor* dhidden, Tensor* dweight, Tensor* dbias,
                                                  const DistillHeadParams& p, Queue& q) {
  return run_op(*this, Op::linear_distill_head, hidden.dtype(), "linear_distill_head", [&]<class T>() {
    check_distill_head(hidden, weight, bias, teachers, labels, dhidden, dweight, dbias, "cpu");
    const std::int64_t N = hidden.dim(0), H = hidden.dim(1), V = weight.dim(0);
    std::vector<cpu::HeadTeacherPtrs<T>> ts;
    ts.reserve(teachers.size());
    for (const HeadTeacher& t : teachers) {
      if (t.weight && t.weight->dtype() == DType::bf16) {  // a teacher's weights held as bf16
        require_support(*this, Op::linear_distill_head_bf16_teachers, hidden.dtype(), "linear_distill_head");
        ts.push_back({t.hidden->data<T>(), nullptr, opt<T>(t.bias), t.hidden->dim(1),
                      static_cast<const std::uint16_t*>(t.weight->raw())});
        continue;
      }
      ts.push_back({t.hidden->data<T>(), t.weight->data<T>(), opt<T>(t.bias), t.hidden->dim(1)});
    }
    return cpu::linear_distill_head<T>(hidden.data<T>(), weight.data<T>(), opt<T>(bias), N, H, V, ts.data(),
                                       static_cast<int>(ts.size()), labels.data<std::int32_t>(), opt<T>(dhidden),
                                       opt<T>(dweight), opt<T>(dbias), p, impl_of(q), gemm_engine(q),
                                       gemm_engine(q, p.teacher_compute));
  });
}

}  // namespace codistill::kernels::cpu
