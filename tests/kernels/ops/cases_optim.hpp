#pragma once
// Op cases of the optimizer updates (kernels/ops.hpp): several steps of SGD (momentum 0 and
// 0.9, Nesterov on and off, with and without weight decay) and AdamW over flat tensors of
// odd sizes, an empty one and an unaligned one. See op_case.hpp.
#include <cmath>

#include "op_case.hpp"

namespace codistill::test::ops {

class SgdCase final : public OpCase {
 public:
  SgdCase(std::int64_t n, double momentum, bool nesterov, double weight_decay)
      : n_(n), mu_(momentum), nesterov_(nesterov), wd_(weight_decay) {}
  std::string name() const override {
    return "sgd_update " + sizes({{"n", n_}}) + " momentum=" + std::to_string(mu_).substr(0, 3) +
           " nesterov=" + std::to_string(nesterov_) + " wd=" + std::to_string(wd_).substr(0, 4) + " steps=3";
  }
  std::vector<Op> ops() const override { return {Op::sgd_update}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor p = c.random({n_}, seed), g = c.random({n_}, seed + 1, -0.1, 0.1);
    Tensor buf = mu_ != 0 ? c.random({n_}, seed + 2, -0.01, 0.01) : Tensor();
    for (int step = 0; step < 3; ++step) {
      const k::SgdScalars s{0.1 / (step + 1), wd_, mu_, nesterov_};
      c.backend().sgd_update(p, g, buf.defined() ? &buf : nullptr, s, c.q);
    }
    std::vector<Output> out{c.out("value", p, c.bound(3))};
    if (buf.defined()) out.push_back(c.out("momentum", buf, c.bound(3)));
    return out;
  }

 private:
  std::int64_t n_;
  double mu_;
  bool nesterov_;
  double wd_;
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
  AdamWCase(std::int64_t n, double weight_decay) : n_(n), wd_(weight_decay) {}
  std::string name() const override {
    return "adamw_update " + sizes({{"n", n_}}) + " wd=" + std::to_string(wd_).substr(0, 4) + " steps=4";
  }
  std::vector<Op> ops() const override { return {Op::adamw_update}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor p = c.random({n_}, seed), g = c.random({n_}, seed + 1, -0.1, 0.1);
    Tensor m = c.random({n_}, seed + 2, -0.01, 0.01), v = c.random({n_}, seed + 3, 0.0, 1e-4);  // v >= 0
    for (int t = 1; t <= 4; ++t) c.backend().adamw_update(p, g, m, v, adamw_scalars(t, 1e-3 * t, 0.9, 0.999, 1e-8, wd_), c.q);
    // v (about 1e-4, a sum of non-negative terms): judged on its own scale (floor 0).
    return {c.out("value", p, c.bound(4)), c.out("m", m, c.bound(4)), c.out("v", v, c.bound(4), 0.0)};
  }

 private:
  std::int64_t n_;
  double wd_;
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
  const std::size_t from = out.size();  // unaligned (the scalar prologue)
  add<SgdCase>(out, {DType::f32, DType::bf16}, std::int64_t{131}, 0.9, true, 1e-3);
  add<AdamWCase>(out, {DType::f32, DType::bf16}, std::int64_t{131}, 0.01);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->offset = 1;
  return out;
}

}  // namespace codistill::test::ops
