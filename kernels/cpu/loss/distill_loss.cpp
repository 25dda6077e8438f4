// The fused distillation loss of DESIGN.md section 6 on the CPU.
//   reference: one row at a time in double with libm, written to be checked by eye.
//   fast:      per row a max pass, an exp-sum pass and a loss + gradient pass
//              (distill_loss_rows.hpp), rows shared out to OpenMP threads in tasks; the
//              inner loops are compiled once per ISA (AVX-512, AVX2 + FMA, baseline x86-64)
//              with the vectorizable exp/log of vec_math.hpp, and the variant is picked at
//              run time (the default build has no -march).
// Both write per-row terms and sum them in row order, so the result does not depend on
// the thread count and two calls are bit-identical.
#include "kernels/cpu/loss/distill_loss.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/loss/distill_loss_rows.hpp"

namespace codistill::kernels::cpu {
namespace {

// Every label in [-1, V); returns the number of rows counted.
std::int64_t check_labels(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                          const char* op) {
  std::int64_t rows = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    const std::int64_t y = labels[r];
    if (y == -1) continue;
    if (y < -1 || y >= V)
      throw std::out_of_range(std::string(op) + ": row " + std::to_string(r) + " has label " +
                              std::to_string(y) + ", expected -1 (ignore) or a class in [0, " +
                              std::to_string(V) + ")");
    ++rows;
  }
  return rows;
}

// Validates everything before any output is written; returns the number of rows counted.
template <class T>
std::int64_t check_args(const T* student, const T* const* teachers, int K,
                        const std::int32_t* labels, std::int64_t N, std::int64_t V,
                        const DistillLossParams& p) {
  if (N <= 0 || V <= 0)
    throw std::invalid_argument("distill_loss: need N > 0 and V > 0, got N=" +
                                std::to_string(N) + " V=" + std::to_string(V));
  if (K < 0) throw std::invalid_argument("distill_loss: K must be >= 0, got " + std::to_string(K));
  if (!(p.temperature > 0) || !std::isfinite(p.temperature))
    throw std::invalid_argument("distill_loss: temperature must be finite and > 0, got " +
                                std::to_string(p.temperature));
  if (!student || !labels) throw std::invalid_argument("distill_loss: null student or labels");
  for (int k = 0; k < K; ++k)
    if (!teachers || !teachers[k])
      throw std::invalid_argument("distill_loss: teacher " + std::to_string(k) + " is null");
  return check_labels(labels, N, V, "distill_loss");
}

DistillLossResult finish(DistillLossSums sums, std::int64_t rows, const DistillLossParams& p) {
  const double ce_sum = sums.ce, kl_sum = sums.kl;
  DistillLossResult res;
  res.rows = rows;
  res.ce = ce_sum / static_cast<double>(rows);
  res.distill = kl_sum / static_cast<double>(rows);
  res.loss = p.hard_weight * res.ce + p.weight * res.distill;
  return res;
}

// ---- reference --------------------------------------------------------------------

// out[j] = log softmax(x * mul)_j, in double.
template <class T>
void log_softmax(const T* x, std::int64_t V, double mul, std::vector<double>& out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j] * mul);
  double sum = 0;
  for (std::int64_t j = 0; j < V; ++j) sum += std::exp(x[j] * mul - mx);
  const double lse = mx + std::log(sum);
  for (std::int64_t j = 0; j < V; ++j) out[j] = x[j] * mul - lse;
}

template <class T>
DistillLossSums distill_reference(const T* student, const T* const* teachers, int K,
                                    const std::int32_t* labels, T* grad, std::int64_t N,
                                    std::int64_t V, const DistillLossParams& p,
                                    std::int64_t rows) {
  const double temp = p.temperature, scale = 1.0 / static_cast<double>(rows);
  std::vector<double> lp(V), lp_t(V), lq(V), q(V);
  double ce_sum = 0, kl_sum = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    T* g = grad ? grad + r * V : nullptr;
    const std::int64_t y = labels[r];
    if (y == -1) {
      if (g) std::fill(g, g + V, T(0));
      continue;
    }
    // Everything is read into the double buffers before g (which may be z) is written.
    const T* z = student + r * V;
    log_softmax(z, V, 1.0, lp);
    log_softmax(z, V, 1.0 / temp, lp_t);
    ce_sum += -lp[y];
    std::fill(q.begin(), q.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      log_softmax(teachers[k] + r * V, V, 1.0 / temp, lq);
      for (std::int64_t j = 0; j < V; ++j) q[j] += std::exp(lq[j]) / K;
    }
    double kl = 0;
    for (std::int64_t j = 0; j < V && K > 0; ++j)
      if (q[j] > 0) kl += q[j] * (std::log(q[j]) - lp_t[j]);
    kl_sum += temp * temp * kl;
    if (!g) continue;
    for (std::int64_t j = 0; j < V; ++j) {
      double d = p.hard_weight * (std::exp(lp[j]) - (j == y ? 1.0 : 0.0));
      if (K > 0) d += p.weight * temp * (std::exp(lp_t[j]) - q[j]);
      g[j] = static_cast<T>(scale * d);
    }
  }
  return {ce_sum, kl_sum};
}

// ---- fast path: ISA dispatch --------------------------------------------------------

// Each entry point is the only non-inlined function between the OpenMP region and the
// inner loops, so everything below it (distill_loss_rows.hpp is all always_inline) is
// compiled for its target (kernels/cpu/isa.hpp).
template <class T>
CODISTILL_TARGET_AVX512
void rows_avx512(const rows::Job<T>& job, std::int64_t r0, std::int64_t r1,
                 const rows::Scratch<T>& s) {
  rows::run(job, r0, r1, s);
}
template <class T>
CODISTILL_TARGET_AVX2 void rows_avx2(const rows::Job<T>& job, std::int64_t r0, std::int64_t r1,
                                     const rows::Scratch<T>& s) {
  rows::run(job, r0, r1, s);
}
template <class T>
void rows_baseline(const rows::Job<T>& job, std::int64_t r0, std::int64_t r1,
                   const rows::Scratch<T>& s) {
  rows::run(job, r0, r1, s);
}

template <class T>
using RowsFn = void (*)(const rows::Job<T>&, std::int64_t, std::int64_t, const rows::Scratch<T>&);

template <class T>
RowsFn<T> rows_fn(Isa isa) {
  switch (isa) {
    case Isa::avx512: return rows_avx512<T>;
    case Isa::avx2: return rows_avx2<T>;
    default: return rows_baseline<T>;
  }
}

// Below this much work a second thread costs more than it saves. The work of a row is its
// logits (student + teachers) plus a fixed cost in logits' worth (the row's max, log and
// sums, latency bound for short rows): fmnist_mlp's 128 rows of 10 logits took 11 us on
// one thread.
constexpr std::int64_t kParallelMin = 1 << 15;
constexpr std::int64_t kRowCost = 256;
// Rows are handed to threads in tasks of about this many logits, dynamically: a thread
// slowed down (a busy core, ignored rows elsewhere) takes fewer tasks instead of making
// the others wait. Results do not depend on who ran which row.
constexpr std::int64_t kTaskLogits = 1 << 18;

template <class T>
DistillLossSums distill_fast(const T* student, const T* const* teachers, int K,
                               const std::int32_t* labels, T* grad, std::int64_t N,
                               std::int64_t V, const DistillLossParams& p, std::int64_t rows) {
  std::vector<double> row_ce(N), row_kl(N);
  rows::Job<T> job{student, teachers, K, labels, grad, V, p.temperature, p.weight,
                   p.hard_weight, 1.0 / static_cast<double>(rows), row_ce.data(), row_kl.data()};
  const RowsFn<T> fn = rows_fn<T>(chosen_isa());
  int threads = 1;
  if (!omp_in_parallel() && N * (V * (K + 1) + kRowCost) >= kParallelMin)
    threads = static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), N));
  // Four scratch rows per thread (rows::Scratch); left uninitialized, and the ones a
  // configuration does not use are never touched.
  const std::size_t per_thread = 4 * static_cast<std::size_t>(V);
  const std::unique_ptr<T[]> scratch(new T[per_thread * threads]);
  // At least four tasks per thread, so that short rows are shared out too.
  const std::int64_t task_rows = std::max<std::int64_t>(
      1, std::min<std::int64_t>(kTaskLogits / (V * (K + 1)), (N + 4 * threads - 1) / (4 * threads)));
  const std::int64_t tasks = (N + task_rows - 1) / task_rows;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    T* base = scratch.get() + per_thread * omp_get_thread_num();
    const rows::Scratch<T> s{base, base + V, base + 2 * V, base + 3 * V};
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task)
      fn(job, task * task_rows, std::min(N, (task + 1) * task_rows), s);
  }
  double ce_sum = 0, kl_sum = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    ce_sum += row_ce[r];
    kl_sum += row_kl[r];
  }
  return {ce_sum, kl_sum};
}

}  // namespace

template <class T>
DistillLossResult distill_loss(const T* student, const T* const* teachers, int K,
                               const std::int32_t* labels, T* grad, std::int64_t N,
                               std::int64_t V, const DistillLossParams& p, Impl impl) {
  const std::int64_t rows = check_args(student, teachers, K, labels, N, V, p);
  if (rows == 0) {  // every row ignored: nothing to average
    if (grad) std::fill(grad, grad + N * V, T(0));
    return DistillLossResult{};
  }
  if (impl == Impl::reference)
    return finish(distill_reference(student, teachers, K, labels, grad, N, V, p, rows), rows, p);
  return finish(distill_fast(student, teachers, K, labels, grad, N, V, p, rows), rows, p);
}

std::int64_t count_distill_rows(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                                const char* op) {
  return check_labels(labels, N, V, op);
}

template <class T>
DistillLossSums distill_loss_rows(const T* student, const T* const* teachers, int K,
                                  const std::int32_t* labels, T* grad, std::int64_t N,
                                  std::int64_t V, const DistillLossParams& p,
                                  std::int64_t batch_rows, Impl impl) {
  if (batch_rows <= 0 || N <= 0)
    throw std::invalid_argument("distill_loss_rows: need N > 0 and batch_rows > 0, got N=" +
                                std::to_string(N) + " batch_rows=" + std::to_string(batch_rows));
  if (impl == Impl::reference)
    return distill_reference(student, teachers, K, labels, grad, N, V, p, batch_rows);
  return distill_fast(student, teachers, K, labels, grad, N, V, p, batch_rows);
}

template DistillLossResult distill_loss<float>(const float*, const float* const*, int,
                                               const std::int32_t*, float*, std::int64_t,
                                               std::int64_t, const DistillLossParams&, Impl);
template DistillLossResult distill_loss<double>(const double*, const double* const*, int,
                                                const std::int32_t*, double*, std::int64_t,
                                                std::int64_t, const DistillLossParams&, Impl);
template DistillLossSums distill_loss_rows<float>(const float*, const float* const*, int,
                                                  const std::int32_t*, float*, std::int64_t,
                                                  std::int64_t, const DistillLossParams&,
                                                  std::int64_t, Impl);
template DistillLossSums distill_loss_rows<double>(const double*, const double* const*, int,
                                                   const std::int32_t*, double*, std::int64_t,
                                                   std::int64_t, const DistillLossParams&,
                                                   std::int64_t, Impl);

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

DistillLossResult CpuBackend::distill_loss(const Tensor& student, const std::vector<const Tensor*>& teachers,
                                           const Tensor& labels, Tensor* grad, const DistillLossParams& p, Queue& q) {
  return run_op(*this, Op::distill_loss, student.dtype(), "distill_loss", [&]<class T>() {
    const std::int64_t N = student.dim(0), V = student.dim(1);
    // Up to a handful of teachers: a small array on the stack of this call.
    std::vector<const T*> ts;
    ts.reserve(teachers.size());
    for (const Tensor* t : teachers) ts.push_back(t->data<T>());
    return cpu::distill_loss<T>(student.data<T>(), ts.data(), static_cast<int>(ts.size()),
                                labels.data<std::int32_t>(), opt<T>(grad), N, V, p, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
