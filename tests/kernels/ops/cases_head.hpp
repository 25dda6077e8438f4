#pragma once
// Op cases of the fused linear + distillation head (kernels/ops.hpp, DistillHeadParams):
// odd sizes, chunk sizes that do not divide N (the workspace set to exactly that many rows),
// the default workspace, every fifth row ignored or all of them, K = 0, 1, 4 teachers with
// hidden sizes of their own, biases or none, V up to 131072 with few rows. Each case runs
// with every gradient (dh poisoned first; dW and db pre-filled, as they accumulate), then
// forward only, then with dh alone: the loss must not change, nor dh. See op_case.hpp.
#include "cases_loss.hpp"
#include "op_case.hpp"

namespace codistill::test::ops {

class DistillHeadCase final : public OpCase {
 public:
  // chunk: rows per chunk (the workspace is sized to exactly that many), 0 for the default.
  DistillHeadCase(std::int64_t n, std::int64_t h, std::int64_t v, std::vector<std::int64_t> teacher_dims, double t,
                  std::int64_t chunk, bool bias, bool all_ignored = false)
      : n_(n), h_(h), v_(v), dims_(std::move(teacher_dims)), t_(t), chunk_(chunk), bias_(bias),
        all_ignored_(all_ignored) {}
  std::string name() const override {
    std::string s = "linear_distill_head " + sizes({{"N", n_}, {"H", h_}, {"V", v_}, {"K", k()}});
    for (std::int64_t d : dims_) s += " H_k=" + std::to_string(d);
    if (teacher_compute == k::Compute::bf16) s += " teachers bf16";
    if (teacher_weights_bf16) s += " (weights held as bf16)";
    s += " T=" + std::to_string(t_).substr(0, 3) + (chunk_ ? " chunk=" + std::to_string(chunk_) : " default workspace");
    return s + (bias_ ? " bias" : "") + (all_ignored_ ? " all rows ignored" : "");
  }
  std::vector<Op> ops() const override {
    if (teacher_weights_bf16) return {Op::linear_distill_head, Op::linear_distill_head_bf16_teachers};
    return {Op::linear_distill_head};
  }
  bool reproducible() const override { return true; }
  // DistillHeadParams::teacher_compute (the student's is the queue's, OpCase::options).
  k::Compute teacher_compute = k::Compute::f32;
  // The teachers' weights as bf16 tensors (a teacher with codistill.teacher_weights: bf16),
  // on the reference too; with teacher_compute bf16 the products are the same as float32
  // weights rounded.
  bool teacher_weights_bf16 = false;

  std::vector<Output> run(Ctx& c) const override {
    k::DistillHeadParams p;
    p.loss = {t_, 0.7, 1.3};
    p.teacher_compute = teacher_compute;
    const std::size_t elem = c.dtype() == DType::f64 ? 8 : 4;
    if (chunk_) p.workspace_bytes = static_cast<std::size_t>((k() + 1) * chunk_ * v_) * elem;
    // Weights of about 3 / sqrt(fan-in): logits of a few units, as a trained head's.
    auto weight = [&](std::int64_t dim, std::uint64_t s, bool bf16 = false) {
      const double a = 3.0 / std::sqrt(static_cast<double>(dim));
      return bf16 ? c.random_bf16({v_, dim}, s, -a, a) : c.random({v_, dim}, s, -a, a);
    };
    Tensor hidden = c.random({n_, h_}, seed), w = weight(h_, seed + 1);
    Tensor b = bias_ ? c.random({v_}, seed + 2) : Tensor{};
    std::vector<Tensor> th, tw, tb;
    for (std::size_t i = 0; i < dims_.size(); ++i) {
      const std::uint64_t s = seed + 10 + 3 * i;
      th.push_back(c.random({n_, dims_[i]}, s));
      tw.push_back(weight(dims_[i], s + 1, teacher_weights_bf16));
      tb.push_back(bias_ && i == 0 ? c.random({v_}, s + 2) : Tensor{});  // a bias on the first teacher only
    }
    std::vector<k::HeadTeacher> teachers;
    for (std::size_t i = 0; i < dims_.size(); ++i)
      teachers.push_back({&th[i], &tw[i], bias_ && i == 0 ? &tb[i] : nullptr});
    const auto lv = distill_labels(n_, v_, seed + 999, all_ignored_);
    Tensor labels = c.labels(lv);
    // dW and db accumulate: pre-filled on the scale of their increments (about 1 / V).
    const double a = 1.0 / static_cast<double>(v_);
    Tensor dh = c.poison({n_, h_}), dw = c.random({v_, h_}, seed + 3, -a, a);
    Tensor db = c.random({v_}, seed + 4, -a, a);
    k::Backend& be = c.backend();
    const k::Tensor* bp = bias_ ? &b : nullptr;

    std::vector<Output> out;
    const auto res = be.linear_distill_head(hidden, w, bp, teachers, labels, &dh, &dw, bias_ ? &db : nullptr, p, c.q);
    totals(out, "", res, c);
    // dh sums V products per element, dW and db N; entries of about 1 / (rows V): judged on
    // the output's own scale (floor 0).
    // The student's bf16 GEMMs take the loss gradient rounded, which the reference computes
    // in double and the backend in float32: judged in the norm (Output::normwise).
    const bool normwise = c.q.options().compute == k::Compute::bf16;
    const Output g = c.out("dh", dh, c.bound(static_cast<double>(v_)), 0.0, normwise);
    out.push_back(g);
    out.push_back(c.out("dW", dw, c.bound(static_cast<double>(n_)), 0.0, normwise));
    if (bias_) out.push_back(c.out("db", db, c.bound(static_cast<double>(n_)), 0.0));
    if (c.reference()) {  // by contract, the same loss forward only, the same dh alone
      totals(out, " (forward only)", res, c);
      out.push_back({"dh (alone)", g.values, g.bound, g.floor, g.normwise});
      return out;
    }
    totals(out, " (forward only)", be.linear_distill_head(hidden, w, bp, teachers, labels, nullptr, nullptr, nullptr,
                                                          p, c.q), c);
    Tensor dh2 = c.poison({n_, h_});
    be.linear_distill_head(hidden, w, bp, teachers, labels, &dh2, nullptr, nullptr, p, c.q);
    out.push_back(c.out("dh (alone)", dh2, g.bound, g.floor, normwise));
    return out;
  }

 private:
  std::int64_t k() const { return static_cast<std::int64_t>(dims_.size()); }
  static void totals(std::vector<Output>& out, const std::string& how, const k::DistillLossResult& r, const Ctx& c) {
    out.push_back({"loss" + how, {r.loss}, c.bound()});
    out.push_back({"ce" + how, {r.ce}, c.bound()});
    out.push_back({"distill" + how, {r.distill}, c.bound()});
    out.push_back({"rows" + how, {static_cast<double>(r.rows)}, 0.0});
  }

  std::int64_t n_, h_, v_;
  std::vector<std::int64_t> dims_;
  double t_;
  std::int64_t chunk_;
  bool bias_, all_ignored_;
};

inline Cases head_cases() {
  using D = std::vector<std::int64_t>;
  const auto f32_f64 = {DType::f32, DType::f64};
  Cases out;
  add<DistillHeadCase>(out, f32_f64, std::int64_t{1}, std::int64_t{1}, std::int64_t{1}, D{}, 1.0, std::int64_t{0}, true);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{7}, std::int64_t{16}, std::int64_t{33}, D{}, 1.0, std::int64_t{1}, false);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{13}, std::int64_t{24}, std::int64_t{257}, D{24}, 2.0, std::int64_t{4}, true);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{10}, std::int64_t{8}, std::int64_t{1000}, D{8, 12, 5, 16}, 2.0,
                       std::int64_t{3}, true);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{9}, std::int64_t{32}, std::int64_t{4001}, D{20}, 4.0, std::int64_t{2},
                       false);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{37}, std::int64_t{16}, std::int64_t{1000}, D{16}, 2.0, std::int64_t{0},
                       false);
  add<DistillHeadCase>(out, {DType::f32}, std::int64_t{5}, std::int64_t{16}, std::int64_t{32768}, D{16, 8, 24, 16}, 1.0,
                       std::int64_t{2}, true);
  add<DistillHeadCase>(out, {DType::f32}, std::int64_t{3}, std::int64_t{8}, std::int64_t{131072}, D{8}, 2.0,
                       std::int64_t{2}, false);
  add<DistillHeadCase>(out, f32_f64, std::int64_t{3}, std::int64_t{8}, std::int64_t{131072}, D{8, 4, 8, 6}, 2.0,
                       std::int64_t{2}, true);
  // bf16 compute: the student's GEMMs (its queue), the teachers' (teacher_compute), or both,
  // against the reference on the same rounded operands; chunks that do not divide N.
  const auto mixed = [&](std::int64_t n, std::int64_t h, std::int64_t v, D dims, std::int64_t chunk, bool bias,
                         bool student, bool teachers) {
    add<DistillHeadCase>(out, {DType::f32}, n, h, v, std::move(dims), 2.0, chunk, bias);
    auto& c = static_cast<DistillHeadCase&>(*out.back());
    if (student) c.options.compute = k::Compute::bf16;
    if (teachers) c.teacher_compute = k::Compute::bf16;
  };
  for (auto [student, teachers] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    mixed(13, 24, 257, D{24}, 4, true, student, teachers);
    mixed(10, 8, 1000, D{8, 12, 5, 16}, 3, true, student, teachers);
    mixed(64, 128, 8192, D{128}, 0, false, student, teachers);
  }
  mixed(7, 16, 33, D{}, 1, false, true, false);
  // Teachers whose weights are held as bf16 (Op::linear_distill_head_bf16_teachers), with the
  // student in float32 or bf16, one or several teachers, chunks that do not divide N.
  for (bool student : {false, true})
    for (const D& dims : {D{24}, D{8, 12, 5, 16}}) {
      mixed(13, 24, 257, dims, 4, true, student, true);
      static_cast<DistillHeadCase&>(*out.back()).teacher_weights_bf16 = true;
    }
  mixed(64, 128, 8192, D{128}, 0, false, false, true);
  static_cast<DistillHeadCase&>(*out.back()).teacher_weights_bf16 = true;
  // Every row ignored: zero loss and rows, dh zero, dW and db as they were.
  add<DistillHeadCase>(out, f32_f64, std::int64_t{6}, std::int64_t{8}, std::int64_t{300}, D{8}, 2.0, std::int64_t{4},
                       true, true);
  return out;
}

}  // namespace codistill::test::ops
