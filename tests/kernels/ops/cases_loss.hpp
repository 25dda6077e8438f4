#pragma once
// Op cases of the fused distillation loss (DESIGN.md section 6, kernels/ops.hpp): V from
// 1 to 131072 (not a multiple of 4 too), K 0..4 teachers and 300, T in {1, 2, 4}, every
// fifth row ignored (-1) or all of them; each case runs the gradient out of place
// (poisoned first), forward only, and in place (the gradient overwrites the student).
// Bad labels are a test of their own in test_backend_ops.cpp. See op_case.hpp.
#include <random>

#include "op_case.hpp"

namespace codistill::test::ops {

// Labels of a random problem: every fifth row ignored, or all rows when all_ignored.
inline std::vector<std::int32_t> distill_labels(std::int64_t N, std::int64_t V, std::uint64_t seed,
                                                bool all_ignored = false) {
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> labels;
  for (std::int64_t r = 0; r < N; ++r)
    labels.push_back(all_ignored || r % 5 == 3 ? -1 : static_cast<std::int32_t>(gen() % static_cast<std::uint64_t>(V)));
  return labels;
}

class DistillLossCase final : public OpCase {
 public:
  DistillLossCase(std::int64_t n, std::int64_t v, int teachers, double temperature, bool all_ignored = false)
      : n_(n), v_(v), k_(teachers), t_(temperature), all_ignored_(all_ignored) {}
  std::string name() const override {
    return "distill_loss " + sizes({{"N", n_}, {"V", v_}, {"K", k_}}) + " T=" + std::to_string(t_).substr(0, 3) +
           (all_ignored_ ? " all rows ignored" : "");
  }
  std::vector<Op> ops() const override { return {Op::distill_loss}; }
  bool reproducible() const override { return true; }

  std::vector<Output> run(Ctx& c) const override {
    const k::DistillLossParams p{t_, 0.7, 1.3};
    Tensor student = c.random({n_, v_}, seed, -6, 6);
    std::vector<Tensor> teachers;
    std::vector<const Tensor*> tp;
    for (int i = 0; i < k_; ++i) teachers.push_back(c.random({n_, v_}, seed + 1 + static_cast<std::uint64_t>(i), -6, 6));
    for (const Tensor& t : teachers) tp.push_back(&t);
    const auto lv = distill_labels(n_, v_, seed + 999, all_ignored_);
    Tensor labels = c.labels(lv);
    k::Backend& b = c.backend();

    std::vector<Output> out;
    Tensor grad = c.poison({n_, v_});
    const auto res = b.distill_loss(student, tp, labels, &grad, p, c.q);
    // Entries of about 1 / (rows V): judged on the gradient's scale alone (floor 0).
    const Output g = c.out("grad", grad, c.bound(static_cast<double>(v_)), 0.0);
    totals(out, "", res, c);
    out.push_back(g);
    out.push_back(ignored_rows(g, lv));
    if (c.reference()) {  // by contract, the same results forward only and in place
      totals(out, " (forward only)", res, c);
      totals(out, " (in place)", res, c);
      out.push_back({"grad (in place)", g.values, g.bound, g.floor});
      return out;
    }
    totals(out, " (forward only)", b.distill_loss(student, tp, labels, nullptr, p, c.q), c);
    totals(out, " (in place)", b.distill_loss(student, tp, labels, &student, p, c.q), c);
    out.push_back(c.out("grad (in place)", student, g.bound, g.floor));
    return out;
  }

  // The gradient rows of ignored labels: exactly zero.
  Output ignored_rows(const Output& g, const std::vector<std::int32_t>& labels) const {
    Output o{"grad of ignored rows", {}, 0.0, 0.0};
    for (std::int64_t r = 0; r < n_; ++r)
      if (labels[static_cast<std::size_t>(r)] == -1)
        o.values.insert(o.values.end(), g.values.begin() + r * v_, g.values.begin() + (r + 1) * v_);
    return o;
  }

 private:
  // The totals as one-element outputs. bfloat16 logits are computed on in float32: the
  // totals (returned in double) are held to the float32 bound, the gradient to bf16's.
  static void totals(std::vector<Output>& out, const std::string& how, const k::DistillLossResult& r, const Ctx& c) {
    const double bound = c.dtype() == DType::bf16 ? bound_for(DType::f32) : c.bound();
    out.push_back({"loss" + how, {r.loss}, bound});
    out.push_back({"ce" + how, {r.ce}, bound});
    out.push_back({"distill" + how, {r.distill}, bound});
    out.push_back({"rows" + how, {static_cast<double>(r.rows)}, 0.0});
  }

  std::int64_t n_, v_;
  int k_;
  double t_;
  bool all_ignored_;
};

// ---- the table ----

inline Cases distill_cases() {
  Cases out;
  // V: 1, odd, around the vector widths and block sizes, 131072; N: odd row counts.
  const std::pair<std::int64_t, std::int64_t> shapes[] = {
      {1, 1},     {7, 33},    {300, 257}, {37, 1000}, {9, 4000},  {4, 4001},
      {6, 12000}, {3, 12001}, {5, 33333}, {40, 32768}, {3, 131072}};
  for (auto [N, V] : shapes)
    for (int K : {0, 1, 2, 3, 4})
      for (double T : {1.0, 2.0, 4.0}) {
        // Past 100k logits a diagonal of the K x T grid (every K, every T) keeps the driver
        // quick; the smaller shapes take the whole grid.
        const int t = T == 1.0 ? 0 : T == 2.0 ? 1 : 2;
        if (N * V > 100000 && t != K % 3) continue;
        if (N * V > 1000000 && K % 2) continue;
        // float64 (the CPU fast path against the reference) on a subset.
        const bool f64 = K % 2 == 0 && T != 2.0;
        if (f64) add<DistillLossCase>(out, {DType::f32, DType::bf16, DType::f64}, N, V, K, T);
        else add<DistillLossCase>(out, {DType::f32, DType::bf16}, N, V, K, T);
      }
  // Many teachers (more teacher statistics than a warp holds).
  add<DistillLossCase>(out, {DType::f32, DType::bf16}, std::int64_t{5}, std::int64_t{100}, 300, 3.0);
  add<DistillLossCase>(out, {DType::f32, DType::bf16}, std::int64_t{5}, std::int64_t{3000}, 300, 3.0);
  // Every row ignored: zero loss, zero rows, a zero gradient.
  add<DistillLossCase>(out, {DType::f32, DType::bf16, DType::f64}, std::int64_t{9}, std::int64_t{300}, 1, 2.0, true);
  // Rows that start off 16 bytes (V % 4 == 0 but the tensors one element off).
  const std::size_t from = out.size();
  for (std::int64_t V : {1000, 32768})
    add<DistillLossCase>(out, {DType::f32, DType::bf16}, std::int64_t{11}, V, 2, 2.0);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->offset = 1;
  return out;
}

}  // namespace codistill::test::ops
