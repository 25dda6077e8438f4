#pragma once
// Op cases of the optimizer updates (kernels/ops.hpp): several steps of SGD (momentum 0 and
// 0.9, Nesterov on and off, with and without weight decay) and AdamW over flat tensors of
// odd sizes, an empty one and an unaligned one; some with their second step out of place
// (kernels::UpdateSource) into poisoned tensors, whose sources must come out unchanged; some
// with their gradients scaled (grad_scale, gradient clipping). And the gradients' sum of
// squares (the clipping's norm). See op_case.hpp.
#include <algorithm>
#include <cmath>
#include <utility>

#include "op_case.hpp"

namespace codistill::test::ops {

class SgdCase final : public OpCase {
 public:
  SgdCase(std::int64_t n, double momentum, bool nesterov, double weight_decay, bool out_of_place = false,
          double grad_scale = 1)
      : n_(n), mu_(momentum), nesterov_(nesterov), wd_(weight_decay), out_of_place_(out_of_place), gs_(grad_scale) {}
  std::string name() const override {
    return "sgd_update " + sizes({{"n", n_}}) + " momentum=" + std::to_string(mu_).substr(0, 3) +
           " nesterov=" + std::to_string(nesterov_) + " wd=" + std::to_string(wd_).substr(0, 4) + " steps=3" +
           (out_of_place_ ? " out_of_place" : "") + (gs_ != 1 ? " grad_scale=" + std::to_string(gs_).substr(0, 4) : "");
  }
  std::vector<Op> ops() const override { return {Op::sgd_update}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor p = c.random({n_}, seed), g = c.random({n_}, seed + 1, -0.1, 0.1);
    Tensor buf = mu_ != 0 ? c.random({n_}, seed + 2, -0.01, 0.01) : Tensor();
    Tensor p_before, buf_before;  // what the out-of-place step read
    for (int step = 0; step < 3; ++step) {
      const k::SgdScalars s{0.1 / (step + 1), wd_, mu_, nesterov_, gs_};
      if (out_of_place_ && step == 1) {
        p_before = std::exchange(p, c.poison({n_}));
        if (buf.defined()) buf_before = std::exchange(buf, c.poison({n_}));
        const k::UpdateSource from{&p_before, buf.defined() ? &buf_before : nullptr, nullptr};
        c.backend().sgd_update(p, g, buf.defined() ? &buf : nullptr, s, from, c.q);
      } else {
        c.backend().sgd_update(p, g, buf.defined() ? &buf : nullptr, s, {}, c.q);
      }
    }
    std::vector<Output> out{c.out("value", p, c.bound(3))};
    if (buf.defined()) out.push_back(c.out("momentum", buf, c.bound(3)));
    if (p_before.defined()) out.push_back(c.out("source value", p_before, c.bound(1)));
    if (buf_before.defined()) out.push_back(c.out("source momentum", buf_before, c.bound(1)));
    return out;
  }

 private:
  std::int64_t n_;
  double mu_;
  bool nesterov_;
  double wd_;
  bool out_of_place_;
  double gs_;
};

// AdamW::step's scalars for step t (1-based), as codistill/optim computes them.
inline k::AdamWScalars adamw_scalars(int t, double lr, double b1, double b2, double eps, double wd) {
  k::AdamWScalars s;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  s.decay = 1.0 - lr * wd;
  s.beta1 = b1;
  s.beta2 = b2;
  s.step_size = lr / bc1;
  s.inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  s.eps = eps;
  return s;
}

class AdamWCase final : public OpCase {
 public:
  AdamWCase(std::int64_t n, double weight_decay, bool out_of_place = false, double grad_scale = 1)
      : n_(n), wd_(weight_decay), out_of_place_(out_of_place), gs_(grad_scale) {}
  std::string name() const override {
    return "adamw_update " + sizes({{"n", n_}}) + " wd=" + std::to_string(wd_).substr(0, 4) + " steps=4" +
           (out_of_place_ ? " out_of_place" : "") + (gs_ != 1 ? " grad_scale=" + std::to_string(gs_).substr(0, 4) : "");
  }
  std::vector<Op> ops() const override { return {Op::adamw_update}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor p = c.random({n_}, seed), g = c.random({n_}, seed + 1, -0.1, 0.1);
    Tensor m = c.random({n_}, seed + 2, -0.01, 0.01), v = c.random({n_}, seed + 3, 0.0, 1e-4);  // v >= 0
    Tensor p_before, m_before, v_before;  // what the out-of-place step read
    for (int t = 1; t <= 4; ++t) {
      k::AdamWScalars s = adamw_scalars(t, 1e-3 * t, 0.9, 0.999, 1e-8, wd_);
      s.grad_scale = gs_;
      k::UpdateSource from;
      if (out_of_place_ && t == 2) {
        p_before = std::exchange(p, c.poison({n_}));
        m_before = std::exchange(m, c.poison({n_}));
        v_before = std::exchange(v, c.poison({n_}));
        from = {&p_before, &m_before, &v_before};
      }
      c.backend().adamw_update(p, g, m, v, s, from, c.q);
    }
    // v (about 1e-4, a sum of non-negative terms): judged on its own scale (floor 0).
    std::vector<Output> out{c.out("value", p, c.bound(4)), c.out("m", m, c.bound(4)),
                            c.out("v", v, c.bound(4), 0.0)};
    if (out_of_place_) {
      out.push_back(c.out("source value", p_before, c.bound(1)));
      out.push_back(c.out("source m", m_before, c.bound(1)));
      out.push_back(c.out("source v", v_before, c.bound(1), 0.0));
    }
    return out;
  }

 private:
  std::int64_t n_;
  double wd_;
  bool out_of_place_;
  double gs_;
};

// The sum of squares of a flat tensor, in double, returned on the host.
class SumSquaresCase final : public OpCase {
 public:
  explicit SumSquaresCase(std::int64_t n) : n_(n) {}
  std::string name() const override { return "sum_squares " + sizes({{"n", n_}}); }
  std::vector<Op> ops() const override { return {Op::sum_squares}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor x = c.random({n_}, seed);
    const double s = c.backend().sum_squares(x, c.q);
    // A sum of n non-negative terms each exact in double: judged relative to itself.
    return {{"sum", {s}, c.bound(static_cast<double>(std::max<std::int64_t>(n_, 1))), 0.0}};
  }

 private:
  std::int64_t n_;
};

// ---- the table ----

inline Cases optimizer_cases() {
  Cases out;
  const std::initializer_list<DType> dtypes = {DType::f32, DType::f64, DType::bf16};
  // 40001 and 300001: over the CPU's threading threshold, with odd tails; 0: empty.
  for (std::int64_t n : {1, 3, 4096, 4097, 10000, 0, 40001, 300001}) {
    for (double wd : {0.0, 0.01}) {
      add<SgdCase>(out, dtypes, n, 0.0, false, wd);
      add<SgdCase>(out, dtypes, n, 0.9, false, wd);
      add<SgdCase>(out, dtypes, n, 0.9, true, wd);
    }
    for (double wd : {0.0, 0.01}) add<AdamWCase>(out, dtypes, n, wd);
  }
  for (std::int64_t n : {1, 4097, 0, 40001}) {  // the second step out of place
    add<SgdCase>(out, dtypes, n, 0.0, false, 0.01, true);
    add<SgdCase>(out, dtypes, n, 0.9, true, 0.01, true);
    add<SgdCase>(out, dtypes, n, 0.9, false, 0.0, true);
    add<AdamWCase>(out, dtypes, n, 0.01, true);
  }
  for (std::int64_t n : {1, 4097, 40001}) {  // gradients scaled (clipping)
    add<SgdCase>(out, dtypes, n, 0.9, true, 0.01, false, 0.37);
    add<AdamWCase>(out, dtypes, n, 0.01, false, 0.37);
  }
  for (std::int64_t n : {0, 1, 3, 4096, 16385, 40001, 300001}) add<SumSquaresCase>(out, dtypes, n);
  const std::size_t from = out.size();  // unaligned (the scalar prologue)
  add<SgdCase>(out, {DType::f32, DType::bf16}, std::int64_t{131}, 0.9, true, 1e-3);
  add<AdamWCase>(out, {DType::f32, DType::bf16}, std::int64_t{131}, 0.01);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->offset = 1;
  return out;
}

}  // namespace codistill::test::ops
