#pragma once
// Inner loops of the fast CPU distillation loss; private to distill_loss.cpp.
//
// Everything here is always_inline on purpose: distill_loss.cpp instantiates rows::run
// inside one function per ISA (target attributes), and only code inlined into such a
// function is compiled for that ISA. A non-inlined helper here would silently fall back
// to baseline SSE2.
//
// Per row (z = student logits, t_k = teacher logits, T = temperature):
//   pass 1  max of z, then of each t_k
//   pass 2  s1 = sum exp(z - max), st = sum exp((z - max) / T) (one sum when T == 1),
//           sk = sum exp((t_k - max_k) / T); the terms go to per-thread scratch rows, and
//           for K = 1 the KL is summed here too (in closed form, without a log)
//   pass 3  the gradient from the scratch rows (grad may alias the student: z_j is read, if
//           at all, before g_j is written), plus the KL's sum of q (log q - z/T) when
//           K >= 2 (the only log per element)
// Each exp is computed once per element (but in a forward-only K = 1 row with masks, whose
// first masked chunk is summed twice); a row of logits is at most a few hundred KiB, so
// passes 2 and 3 read from cache, not memory.
// 0 log 0 = 0: a masked or underflowed probability adds nothing to the KL, even where the
// other side is masked too and the plain product is 0 * inf = NaN. That costs a select per
// element (1-2% of the loss). K = 1 pays for it only where a row has masks: a chunk whose
// plain KL sum is NaN is summed again with it (teacher_sums); K >= 2 takes it throughout.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/vec_math.hpp"

namespace codistill::kernels::cpu::rows {

template <class T>
struct Job {
  const T* student;
  const T* const* teachers;
  int K;
  const std::int32_t* labels;
  T* grad;  // may be null (forward only) or alias student
  std::int64_t V;
  double temperature, weight, hard_weight;
  double scale;     // 1 / rows counted
  double* row_ce;   // out: per-row cross-entropy (0 for ignored rows)
  double* row_kl;   // out: per-row T^2 * KL
};

// Per-thread scratch rows of V elements, filled in pass 2 and read in pass 3, so that
// every exponential is computed once (the exps dominate the cost: ~15 vector ops each).
template <class T>
struct Scratch {
  T* et;   // exp((z - zmax) / T), unnormalized softmax(z / T)
  T* e1;   // exp(z - zmax), unnormalized softmax(z); unused when shared with et
  T* q;    // K = 1: unnormalized teacher softmax; K >= 2: the teachers' average q
  T* tmp;  // K >= 2: the current teacher's unnormalized softmax
};

// Float partial sums live in vector lanes for this many elements, then move to double,
// so the float error stays at the level of a 256-term sum whatever V is. Each chunk also
// prefetches the same span of the next row: a row starts on a new page, where the
// hardware prefetcher starts cold, and the max pass would otherwise wait on memory.
constexpr std::int64_t kChunk = 256;

// Prefetches [p + c, p + end) into cache, one request per 64-byte line; p may be null.
// kL1: into L1 (prefetcht0); else into L2 only (prefetcht1). A K >= 2 row's own working set
// (its K + 1 logit rows and four scratch rows: 36 KiB at K = 4, V = 1000) nearly fills a
// 48 KiB L1, and the next row's logit and gradient rows pulled in beside it evict it (a
// guess, not measured with counters): prefetching them to L2 measured 1-2.6% faster at
// K = 4, about 2% in docs/results.md's runs, and all rows to L2 1.5% slower at
// K = 1, whose rows still fit. (A write prefetch built with PRFCHW, e.g. -march=native,
// becomes prefetchw and ignores the hint; this build's targets do not enable it.)
template <class T, bool kL1, bool kWrite = false>
[[gnu::always_inline]] inline void prefetch(const T* p, std::int64_t c, std::int64_t end) {
  if (!p) return;
  for (std::int64_t i = c; i < end; i += 64 / static_cast<std::int64_t>(sizeof(T)))
    __builtin_prefetch(p + i, kWrite ? 1 : 0, kL1 ? 3 : 2);
}

template <class T>
[[gnu::always_inline]] inline T row_max(const T* x, std::int64_t V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Student: s1 = sum exp(z - zmax), st = sum exp((z - zmax) / T) (st = s1 when shared),
// storing the terms when a gradient is wanted; prefetches the next row's z and gradient.
template <class T, bool kShared, bool kStore, bool kL1>
[[gnu::always_inline]] inline void student_sums(const T* z, std::int64_t V, T zmax, T inv_t,
                                                Scratch<T> s, const T* next_z, const T* next_g,
                                                double& s1, double& st) {
  // Local copies: pointers read through a reference inside the loop turn the stores
  // into scatters (GCC cannot prove they are loop invariant).
  T* const et_out = s.et;
  T* const e1_out = s.e1;
  s1 = st = 0;
  for (std::int64_t c = 0; c < V; c += kChunk) {
    const std::int64_t end = std::min(V, c + kChunk);
    prefetch<T, kL1>(next_z, c, end);
    prefetch<T, kL1, true>(next_g, c, end);
    T a1 = 0, at = 0;
#pragma omp simd reduction(+ : a1, at)
    for (std::int64_t j = c; j < end; ++j) {
      const T d = z[j] - zmax;
      const T e1 = vec::exp_nonpositive(d);
      a1 += e1;
      if constexpr (kShared) {
        if constexpr (kStore) et_out[j] = e1;
      } else {
        const T et = vec::exp_nonpositive(d * inv_t);
        at += et;
        if constexpr (kStore) {
          et_out[j] = et;
          e1_out[j] = e1;
        }
      }
    }
    s1 += a1;
    st += at;
  }
  if constexpr (kShared) st = s1;
}

// One chunk [c, end) of a teacher row t: stores e_j = exp(lt_j), lt_j = (t_j - tmax) / T,
// into out and adds sum e_j to a and, when kOne (K == 1), sum e_j (lt_j - zs_j) with
// zs_j = (z_j - zmax) / T to b. kMasked (K == 1): the term is +0 where e_j is 0 whatever
// lt_j - zs_j is (a NaN e_j keeps its NaN).
template <class T, bool kOne, bool kStore, bool kMasked>
[[gnu::always_inline]] inline void teacher_chunk(const T* t, const T* z, std::int64_t c,
                                                 std::int64_t end, T tmax, T zmax, T inv_t,
                                                 T* out, T& a, T& b) {
  T sa = 0, sb = 0;
#pragma omp simd reduction(+ : sa, sb)
  for (std::int64_t j = c; j < end; ++j) {
    const T lt = (t[j] - tmax) * inv_t;
    const T e = vec::exp_nonpositive(lt);
    sa += e;
    if constexpr (kOne) {
      const T term = e * (lt - (z[j] - zmax) * inv_t);
      sb += kMasked ? vec::zero_where_nonpositive(e, term) : term;
    }
    if constexpr (kStore) out[j] = e;
  }
  a = sa;
  b = sb;
}

// K == 1: a chunk's sum of e_j (lt_j - zs_j) again, with the select, from the e_j stored in
// out (kStored) or recomputed.
template <class T, bool kStored>
[[gnu::always_inline]] inline T teacher_kl_masked(const T* t, const T* z, std::int64_t c,
                                                  std::int64_t end, T tmax, T zmax, T inv_t,
                                                  const T* out) {
  T b = 0;
#pragma omp simd reduction(+ : b)
  for (std::int64_t j = c; j < end; ++j) {
    const T lt = (t[j] - tmax) * inv_t;
    const T e = kStored ? out[j] : vec::exp_nonpositive(lt);
    b += vec::zero_where_nonpositive(e, e * (lt - (z[j] - zmax) * inv_t));
  }
  return b;
}

// One teacher row t: stores e_j into out (kStore) and returns sq = sum e_j and, when kOne
// (K == 1), w = sum e_j (lt_j - zs_j), so that KL = w / sq - log sq + log st with no log per
// element. Prefetches the next row.
// K == 1 and 0 log 0 = 0: the plain term is 0 * inf = NaN where a masked teacher entry
// (e_j = 0, lt_j = -inf, or a finite mask such as -FLT_MAX overflowing at T < 1) meets any
// student entry, or an underflowed one meets a masked student entry. A chunk whose plain
// sum is NaN is summed again with the select (z is not written before pass 3), and the
// rest of the row takes the select from the start: a row pays at most one chunk twice, and
// rows without masks never pay for the select. Where the plain sum is not NaN its terms are
// the select's (an e_j of 0 times a finite difference is a zero).
template <class T, bool kOne, bool kStore>
[[gnu::always_inline]] inline void teacher_sums(const T* t, const T* z, std::int64_t V, T zmax,
                                                T inv_t, T* out, const T* next_t, double& sq,
                                                double& w) {
  const T tmax = row_max(t, V);
  sq = w = 0;
  bool masked = false;
  for (std::int64_t c = 0; c < V; c += kChunk) {
    const std::int64_t end = std::min(V, c + kChunk);
    prefetch<T, kOne>(next_t, c, end);  // K >= 2 (not kOne): to L2 only, see prefetch
    T a, b = 0;
    if (!kOne || !masked) {
      teacher_chunk<T, kOne, kStore, false>(t, z, c, end, tmax, zmax, inv_t, out, a, b);
      if (kOne && std::isnan(b)) {
        b = teacher_kl_masked<T, kStore>(t, z, c, end, tmax, zmax, inv_t, out);
        masked = true;
      }
    } else {
      teacher_chunk<T, kOne, kStore, true>(t, z, c, end, tmax, zmax, inv_t, out, a, b);
    }
    sq += a;
    w += b;
  }
}

// One row. kTeachers: 0 (hard term only), 1, or 2 meaning K >= 2 (q averaged in scratch).
// kShared: softmax(z) == softmax(z / T) (T == 1, or no soft term), computed once.
template <class T, int kTeachers, bool kShared, bool kGrad>
[[gnu::always_inline]] inline void one_row(const Job<T>& job, std::int64_t r, bool last,
                                           Scratch<T> s) {
  const std::int64_t V = job.V;
  const T* z = job.student + r * V;
  T* g = kGrad ? job.grad + r * V : nullptr;
  // The next row of this task, to prefetch (null for the last one).
  auto next = [&](const T* x) -> const T* { return last ? nullptr : x + (r + 1) * V; };
  const std::int64_t y = job.labels[r];
  if (y < 0) {
    if constexpr (kGrad) std::fill(g, g + V, T(0));
    job.row_ce[r] = job.row_kl[r] = 0;
    return;
  }
  const double temp = job.temperature;
  const T inv_t = static_cast<T>(1.0 / temp);
  const int K = job.K;
  T* const et = s.et;
  T* const e1 = s.e1;
  T* const qs = s.q;
  T* const tmp = s.tmp;

  // Passes 1 and 2 over the student, then over each teacher (all before g is written).
  const T zmax = row_max(z, V);
  double s1, st;
  student_sums<T, kShared, kGrad, kTeachers < 2>(z, V, zmax, inv_t, s, next(job.student),
                                  kGrad && g != z ? next(job.grad) : nullptr, s1, st);
  job.row_ce[r] = std::log(s1) - (static_cast<double>(z[y]) - static_cast<double>(zmax));
  double kl = 0, sq = 1;
  if constexpr (kTeachers == 1) {
    double w;
    teacher_sums<T, true, kGrad>(job.teachers[0] + r * V, z, V, zmax, inv_t, qs,
                                 next(job.teachers[0]), sq, w);
    kl = w / sq - std::log(sq) + std::log(st);
  } else if constexpr (kTeachers == 2) {
    double w0 = 0;
    for (int k = 0; k < K; ++k) {
      double sk, unused;  // teacher_sums<.., false, ..> leaves its second sum at 0
      teacher_sums<T, false, true>(job.teachers[k] + r * V, z, V, zmax, inv_t,
                                   k == 0 ? qs : tmp, next(job.teachers[k]), sk, unused);
      const double wk = 1.0 / (K * sk);  // teacher k's weight in q
      if (k == 0) {
        w0 = wk;
        continue;
      }
      const T a = static_cast<T>(k == 1 ? w0 : 1.0), b = static_cast<T>(wk);
#pragma omp simd
      for (std::int64_t j = 0; j < V; ++j) qs[j] = qs[j] * a + tmp[j] * b;
    }
    // KL = sum q (log q - zs) + log st, the sum left to pass 3 (sum q = 1).
    kl = std::log(st);
  }

  // Pass 3: the gradient (and for K >= 2 the KL's sum) from the scratch rows; where z is
  // read, z_j is read before g_j is written, so g may be z.
  const T rt = static_cast<T>(1.0 / st), r1 = static_cast<T>(1.0 / s1);
  const T rq = static_cast<T>(1.0 / sq);
  const T hs = static_cast<T>(job.scale * job.hard_weight);
  const T as = static_cast<T>(job.scale * job.weight * temp);
  if constexpr (kTeachers == 2) {
    double sum = 0;
    for (std::int64_t c = 0; c < V; c += kChunk) {
      const std::int64_t end = std::min(V, c + kChunk);
      T acc = 0;
#pragma omp simd reduction(+ : acc)
      for (std::int64_t j = c; j < end; ++j) {
        const T q = qs[j], zs = (z[j] - zmax) * inv_t;
        // 0 where q is 0 (underflowed or masked), even where the student is masked (zs = -inf).
        // A select per element: summing a NaN chunk again, as K = 1 does, would need z_j
        // after g_j has overwritten it in place, and a per-row choice measured no faster.
        acc += vec::zero_where_nonpositive(q, q * (vec::log_nonnegative(q) - zs));
        if constexpr (kGrad) {
          const T pt = et[j] * rt, p = kShared ? pt : e1[j] * r1;
          g[j] = hs * p + as * (pt - q);
        }
      }
      sum += acc;
    }
    kl += sum;
  } else if constexpr (kGrad) {
#pragma omp simd
    for (std::int64_t j = 0; j < V; ++j) {
      const T pt = et[j] * rt, p = kShared ? pt : e1[j] * r1;
      if constexpr (kTeachers == 0) g[j] = hs * p;
      else g[j] = hs * p + as * (pt - qs[j] * rq);
    }
  }
  job.row_kl[r] = kTeachers == 0 ? 0.0 : temp * temp * kl;
  if constexpr (kGrad) g[y] -= hs;  // the one-hot part of softmax(z) - onehot(y)
}

template <class T, int kTeachers, bool kShared, bool kGrad>
[[gnu::always_inline]] inline void row_range(const Job<T>& job, std::int64_t r0, std::int64_t r1,
                                             const Scratch<T>& s) {
  for (std::int64_t r = r0; r < r1; ++r)
    one_row<T, kTeachers, kShared, kGrad>(job, r, r + 1 == r1, s);
}

template <class T, int kTeachers>
[[gnu::always_inline]] inline void run_teachers(const Job<T>& job, std::int64_t r0,
                                                std::int64_t r1, const Scratch<T>& s) {
  const bool shared = kTeachers == 0 || job.temperature == 1.0;
  const bool grad = job.grad != nullptr;
  if (shared && grad) row_range<T, kTeachers, true, true>(job, r0, r1, s);
  else if (shared) row_range<T, kTeachers, true, false>(job, r0, r1, s);
  else if (grad) row_range<T, kTeachers, false, true>(job, r0, r1, s);
  else row_range<T, kTeachers, false, false>(job, r0, r1, s);
}

// Rows [r0, r1) of the batch, with this thread's scratch rows.
template <class T>
[[gnu::always_inline]] inline void run(const Job<T>& job, std::int64_t r0, std::int64_t r1,
                                       const Scratch<T>& s) {
  if (job.K == 0) run_teachers<T, 0>(job, r0, r1, s);
  else if (job.K == 1) run_teachers<T, 1>(job, r0, r1, s);
  else run_teachers<T, 2>(job, r0, r1, s);
}

}  // namespace codistill::kernels::cpu::rows
