#pragma once
// Op cases of the dense and elementwise entry points: linear (with the fused activations),
// activation, softmax, multiply and add. See op_case.hpp for what a case is.
#include <random>

#include "op_case.hpp"

namespace codistill::test::ops {

using k::Activation;

struct LinearShape {
  std::int64_t M, N, K;  // y[M,N] = x[M,K] w[N,K]^T
};

// gelu' crosses zero near x = -0.75 (silu' near -1.28), where the float fast path is off by
// up to ~3e-7 of its O(1) terms: outputs through it are judged relative to at least a tenth
// of a term.
inline double backward_floor(Activation act) { return k::keeps_input(act) ? kTermFloor : kFloor; }

inline std::vector<Op> linear_ops(Activation act) {
  if (act == Activation::none) return {Op::linear};
  return {Op::linear, Op::linear_activation};
}

// y = act(x w^T + b), and the pre-activation where gelu or silu keeps it.
class LinearForward final : public OpCase {
 public:
  LinearForward(LinearShape s, bool bias, Activation act) : s_(s), bias_(bias), act_(act) {}
  std::string name() const override {
    return "linear_forward " + sizes({{"M", s_.M}, {"N", s_.N}, {"K", s_.K}, {"bias", bias_}}) +
           " act=" + k::activation_name(act_);
  }
  std::vector<Op> ops() const override { return linear_ops(act_); }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor x = c.random({s_.M, s_.K}, seed), w = c.random({s_.N, s_.K}, seed + 1);
    Tensor b = c.random({s_.N}, seed + 2), y = c.poison({s_.M, s_.N});
    Tensor pre = k::keeps_input(act_) ? c.poison({s_.M, s_.N}) : Tensor();
    c.backend().linear_forward(x, w, bias_ ? &b : nullptr, y, act_, pre.defined() ? &pre : nullptr, c.q);
    // y sums K products and a bias, all O(1). Where they cancel the output can be far
    // smaller than its terms: a relu after three strongly negative biases keeps only the
    // rare row that overcomes them (run seed 13348382524858549299, case seed
    // 12872877084651872894, left 70000 x 3 x 2's y an RMS of 8e-4, and one float32 rounding
    // of a 0.9 term was 1.6e-5 of its 2.4e-3 element, replayed on the CPU); a 1 x 1 x 1
    // case can land near zero alone. So y is judged against a tenth of a term.
    std::vector<Output> out{c.out("y", y, c.bound(s_.K), kTermFloor)};
    if (pre.defined()) out.push_back(c.out("pre", pre, c.bound(s_.K), kTermFloor));
    return out;
  }

 private:
  LinearShape s_;
  bool bias_;
  Activation act_;
};

// y = act(x w^T + b) with w held as bf16 (Op::linear_bf16_weights: a teacher's weights with
// codistill.teacher_weights: bf16) and x, b, y float32, on bf16-compute queues: against the
// reference on the same operands (x rounded, w as stored).
class LinearForwardBf16Weights final : public OpCase {
 public:
  LinearForwardBf16Weights(LinearShape s, bool bias, Activation act) : s_(s), bias_(bias), act_(act) {
    options.compute = k::Compute::bf16;
  }
  std::string name() const override {
    return "linear_forward (bf16 weights) " + sizes({{"M", s_.M}, {"N", s_.N}, {"K", s_.K}, {"bias", bias_}}) +
           " act=" + k::activation_name(act_);
  }
  std::vector<Op> ops() const override {
    auto ops = linear_ops(act_);
    ops.push_back(Op::linear_bf16_weights);
    return ops;
  }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor x = c.random({s_.M, s_.K}, seed), w = c.random_bf16({s_.N, s_.K}, seed + 1);
    Tensor b = c.random({s_.N}, seed + 2), y = c.poison({s_.M, s_.N});
    Tensor pre = k::keeps_input(act_) ? c.poison({s_.M, s_.N}) : Tensor();
    c.backend().linear_forward(x, w, bias_ ? &b : nullptr, y, act_, pre.defined() ? &pre : nullptr, c.q);
    std::vector<Output> out{c.out("y", y, c.bound(s_.K), kTermFloor)};  // as LinearForward's y
    if (pre.defined()) out.push_back(c.out("pre", pre, c.bound(s_.K), kTermFloor));
    return out;
  }

 private:
  LinearShape s_;
  bool bias_;
  Activation act_;
};

// How dw and db come in: random and added to (accumulate), poisoned then Queue::zero'd and
// added to, or poisoned and written (accumulate = false: the poison must never be read).
enum class GradsIn { add, zeroed, overwrite };

// dx = dpre w, dw (+)= dpre^T x, db (+)= colsum(dpre), dpre = dy * act'(saved); dx poisoned
// (overwritten).
class LinearBackward final : public OpCase {
 public:
  LinearBackward(LinearShape s, bool dx, bool db, Activation act, GradsIn grads = GradsIn::add)
      : s_(s), dx_(dx), db_(db), act_(act), grads_(grads) {}
  std::string name() const override {
    return "linear_backward " + sizes({{"M", s_.M}, {"N", s_.N}, {"K", s_.K}, {"dx", dx_}, {"db", db_}}) +
           " act=" + k::activation_name(act_) +
           (grads_ == GradsIn::zeroed ? " dw,db zeroed" : grads_ == GradsIn::overwrite ? " dw,db written" : "");
  }
  std::vector<Op> ops() const override { return linear_ops(act_); }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    const std::int64_t M = s_.M, N = s_.N, K = s_.K;
    Tensor x = c.random({M, K}, seed), w = c.random({N, K}, seed + 1), dy = c.random({M, N}, seed + 2);
    // saved: relu's output (zeros included) or gelu's or silu's pre-activation.
    auto sv = uniform(static_cast<std::size_t>(M * N), seed + 3, -3, 3);
    Tensor saved = c.in(act_ == Activation::relu ? relu_of(sv) : sv, {M, N});
    Tensor dpre = act_ == Activation::none ? Tensor() : c.poison({M, N});  // scratch
    const bool fresh = grads_ != GradsIn::add;
    Tensor dx = c.poison({M, K}), dw = fresh ? c.poison({N, K}) : c.random({N, K}, seed + 4),
           db = fresh ? c.poison({N}) : c.random({N}, seed + 5);
    if (grads_ == GradsIn::zeroed) c.zero(dw), c.zero(db);
    c.backend().linear_backward(x, w, dy, dx_ ? &dx : nullptr, dw, db_ ? &db : nullptr, act_,
                                act_ == Activation::none ? nullptr : &saved, dpre.defined() ? &dpre : nullptr,
                                /*accumulate=*/grads_ != GradsIn::overwrite, c.q);
    // dw and db start at O(1) values (GradsIn::add) and add O(1) products; dx sums N of
    // them: at 1 x 1 x 1 one sum can cancel to near zero (kTermFloor, as linear_forward's y).
    const double floor = kTermFloor;
    // bf16 compute through gelu (or silu): the fast and reference gelu' differ by float32
    // ulps, so about one dpre element in 10^4 rounds to the other bf16 neighbour: judged in the norm
    // (op_norm_error), where at 129 x 65 and up such a flip stays far below the bound
    // (measured up to 2e-5); relu and none round dy itself, the same on both sides.
    const bool normwise = k::keeps_input(act_) && c.q.options().compute == k::Compute::bf16;
    std::vector<Output> out{c.out("dw", dw, c.bound(M), floor, normwise)};
    if (dx_) out.push_back(c.out("dx", dx, c.bound(N), floor, normwise));
    if (db_) out.push_back(c.out("db", db, c.bound(M), floor, normwise));
    return out;
  }

 private:
  LinearShape s_;
  bool dx_, db_;
  Activation act_;
  GradsIn grads_;
};

// y = act(x), then dx = dy * act'(saved) (saved: y for relu, x for gelu and silu), dx in
// place of dy or poisoned.
class ActivationCase final : public OpCase {
 public:
  ActivationCase(std::int64_t n, Activation act, bool in_place) : n_(n), act_(act), in_place_(in_place) {}
  std::string name() const override {
    return std::string("activation_forward+backward ") + sizes({{"n", n_}}) + " act=" + k::activation_name(act_) +
           (in_place_ ? " dx=dy" : "");
  }
  std::vector<Op> ops() const override { return {Op::activation}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor x = c.random({n_}, seed, -6, 6), y = c.poison({n_});
    c.backend().activation_forward(x, y, act_, c.q);
    Tensor dy = c.random({n_}, seed + 1);
    Tensor dx = in_place_ ? dy : c.poison({n_});
    c.backend().activation_backward(act_ == Activation::relu ? y : x, dy, dx, act_, c.q);
    return {c.out("y", y, c.bound()), c.out("dx", dx, c.bound(), backward_floor(act_))};
  }

 private:
  std::int64_t n_;
  Activation act_;
  bool in_place_;
};

// Row softmax (y in place of x or poisoned), then its backward from the backend's own y.
class SoftmaxCase final : public OpCase {
 public:
  SoftmaxCase(std::int64_t m, std::int64_t n, bool in_place) : m_(m), n_(n), in_place_(in_place) {}
  std::string name() const override {
    return "softmax_forward+backward " + sizes({{"M", m_}, {"N", n_}}) + (in_place_ ? " y=x" : "");
  }
  std::vector<Op> ops() const override { return {Op::softmax}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor x = c.random({m_, n_}, seed, -8, 8);
    Tensor y = in_place_ ? x : c.poison({m_, n_});
    c.backend().softmax_forward(x, y, c.q);
    Tensor dy = c.random({m_, n_}, seed + 1), dx = c.poison({m_, n_});
    c.backend().softmax_backward(y, dy, dx, c.q);
    // Entries of 1/N: judged on the output's scale alone (floor 0).
    return {c.out("y", y, c.bound(n_), 0.0), c.out("dx", dx, c.bound(n_), 0.0)};
  }

 private:
  std::int64_t m_, n_;
  bool in_place_;
};

// y = x * m with a dropout mask (0 or 1/0.7).
class MultiplyCase final : public OpCase {
 public:
  explicit MultiplyCase(std::int64_t n) : n_(n) {}
  std::string name() const override { return "multiply " + sizes({{"n", n_}}); }
  std::vector<Op> ops() const override { return {Op::multiply}; }
  std::vector<Output> run(Ctx& c) const override {
    auto mask = uniform(static_cast<std::size_t>(n_), seed + 1, 0, 1);
    for (double& m : mask) m = m < 0.3 ? 0.0 : 1.0 / 0.7;
    Tensor x = c.random({n_}, seed), m = c.in(mask, {n_}), y = c.poison({n_});
    c.backend().multiply(x, m, y, c.q);
    return {c.out("y", y, c.bound())};
  }

 private:
  std::int64_t n_;
};

// y = a + b, or with a fused relu y = relu(a + b) (Op::add_activation), y poisoned or
// aliasing a or b.
class AddCase final : public OpCase {
 public:
  enum Alias { none, a, b };
  AddCase(std::int64_t n, Alias alias, Activation act = Activation::none) : n_(n), alias_(alias), act_(act) {}
  std::string name() const override {
    return std::string(act_ == Activation::none ? "add " : "add+relu ") + sizes({{"n", n_}}) +
           (alias_ == a ? " y=a" : alias_ == b ? " y=b" : "");
  }
  std::vector<Op> ops() const override { return {act_ == Activation::none ? Op::add : Op::add_activation}; }
  std::vector<Output> run(Ctx& c) const override {
    Tensor ta = c.random({n_}, seed), tb = c.random({n_}, seed + 1);
    Tensor y = alias_ == a ? ta : alias_ == b ? tb : c.poison({n_});
    if (act_ == Activation::none) c.backend().add(ta, tb, y, c.q);
    else c.backend().add_activation(ta, tb, y, act_, c.q);
    return {c.out("y", y, c.bound())};
  }

 private:
  std::int64_t n_;
  Alias alias_;
  Activation act_;
};

// ---- the table ----

inline constexpr std::initializer_list<DType> kAllDtypes = {DType::f32, DType::f64, DType::bf16};

inline Cases linear_cases() {
  Cases out;
  const LinearShape shapes[] = {{1, 1, 1},    {7, 13, 33}, {129, 65, 300}, {300, 10, 784},
                                {33, 1000, 17}, {600, 45, 3}, {70000, 3, 2},  // many rows to reduce
                                {0, 5, 7}};                                   // an empty batch
  for (const auto& s : shapes)
    for (Activation act :
         {Activation::none, Activation::relu, Activation::gelu, Activation::silu, Activation::gelu_tanh}) {
      for (bool bias : {true, false}) add<LinearForward>(out, kAllDtypes, s, bias, act);
      add<LinearBackward>(out, kAllDtypes, s, true, true, act);
      add<LinearBackward>(out, kAllDtypes, s, false, false, act);
      add<LinearBackward>(out, kAllDtypes, s, true, true, act, GradsIn::overwrite);
      if (act == Activation::none) {
        add<LinearBackward>(out, kAllDtypes, s, true, false, act);
        add<LinearBackward>(out, kAllDtypes, s, false, true, act);
        add<LinearBackward>(out, kAllDtypes, s, true, true, act, GradsIn::zeroed);
        add<LinearBackward>(out, kAllDtypes, s, false, false, act, GradsIn::overwrite);
      }
    }
  // Large enough for split reductions (atomics would show as run-to-run differences).
  add<LinearBackward>(out, {DType::f32}, LinearShape{1000, 300, 200}, true, true, Activation::none);
  // fmnist_mlp's first layer as the trainer runs it (the CPU's matmul forward with the relu
  // in its kernel, the fused backward's two-thread split).
  for (bool bias : {true, false})
    add<LinearForward>(out, {DType::f32}, LinearShape{128, 256, 784}, bias, Activation::relu);
  for (GradsIn g : {GradsIn::add, GradsIn::overwrite}) {  // the step writes (Model::zero_grad_lazily)
    add<LinearBackward>(out, {DType::f32}, LinearShape{128, 256, 784}, false, true, Activation::relu, g);
    add<LinearBackward>(out, {DType::f32}, LinearShape{128, 256, 784}, true, true, Activation::relu, g);
  }
  // TF32 where a backend has it (the CPU ignores the option): within TF32 precision.
  const std::size_t from = out.size();
  add<LinearForward>(out, {DType::f32}, LinearShape{129, 65, 300}, true, Activation::relu);
  add<LinearBackward>(out, {DType::f32}, LinearShape{129, 65, 300}, true, true, Activation::none);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->options.allow_tf32 = true;
  // bf16 compute (mixed precision): float32 tensors, bf16 GEMM operands, against the
  // reference on the same rounded operands. Odd sizes, the fused activations, dx and db on
  // and off, accumulation, and shapes the step has (its 1024-row batches, 4 x d_model).
  // gelu's backward from 129 x 65 up: below, one flipped dpre operand (see LinearBackward)
  // weighs enough in the norm to fail a correct run now and then.
  const std::size_t bf = out.size();
  for (const LinearShape& s : {LinearShape{1, 1, 1}, LinearShape{7, 13, 33}, LinearShape{129, 65, 300},
                               LinearShape{1024, 512, 128}, LinearShape{0, 5, 7}})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
      add<LinearForward>(out, {DType::f32}, s, true, act);
      if (act != Activation::gelu || s.M * s.N >= 129 * 65 || s.M == 0)
        add<LinearBackward>(out, {DType::f32}, s, true, true, act);
    }
  add<LinearForward>(out, {DType::f32}, LinearShape{33, 1000, 17}, false, Activation::none);
  add<LinearBackward>(out, {DType::f32}, LinearShape{300, 10, 784}, false, false, Activation::none);
  add<LinearBackward>(out, {DType::f32}, LinearShape{600, 45, 3}, true, true, Activation::none, GradsIn::zeroed);
  for (Activation act : {Activation::none, Activation::relu})
    for (const LinearShape& s : {LinearShape{129, 65, 300}, LinearShape{0, 5, 7}})
      add<LinearBackward>(out, {DType::f32}, s, true, true, act, GradsIn::overwrite);
  for (std::size_t i = bf; i < out.size(); ++i) out[i]->options.compute = k::Compute::bf16;
  // Weights held as bf16 (bf16 compute by construction): odd sizes, the fused activations,
  // GPT-2's shapes (d_model 768 -> 3 x 768 and 4 x 768 at 256 rows), an empty batch.
  for (const LinearShape& s : {LinearShape{1, 1, 1}, LinearShape{7, 13, 33}, LinearShape{129, 65, 300},
                               LinearShape{256, 2304, 768}, LinearShape{0, 5, 7}})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu})
      for (bool bias : {true, false}) add<LinearForwardBf16Weights>(out, {DType::f32}, s, bias, act);
  return out;
}

inline Cases elementwise_cases() {
  Cases out;
  // 1 and 7: below any vector width; 4099 an odd tail; 100003 over the threading thresholds.
  for (std::int64_t n : {1, 7, 4099, 100003})
    for (Activation act : {Activation::relu, Activation::gelu, Activation::silu, Activation::gelu_tanh})
      for (bool in_place : {false, true}) add<ActivationCase>(out, kAllDtypes, n, act, in_place);
  const std::pair<std::int64_t, std::int64_t> rows[] = {{1, 1}, {7, 33}, {64, 10}, {300, 257}, {3, 4001}};
  for (auto [m, n] : rows)
    for (bool in_place : {false, true}) add<SoftmaxCase>(out, kAllDtypes, m, n, in_place);
  for (std::int64_t n : {1, 7, 77777}) add<MultiplyCase>(out, kAllDtypes, n);
  for (std::int64_t n : {1, 13, 65537, 100003})
    for (auto alias : {AddCase::none, AddCase::a, AddCase::b})
      for (Activation act : {Activation::none, Activation::relu}) add<AddCase>(out, kAllDtypes, n, alias, act);
  // Unaligned starts (the scalar prologue of vector loops).
  const std::size_t from = out.size();
  add<MultiplyCase>(out, {DType::f32, DType::bf16}, std::int64_t{1001});
  add<AddCase>(out, {DType::f32, DType::bf16}, std::int64_t{1001}, AddCase::none);
  add<ActivationCase>(out, {DType::f32, DType::bf16}, std::int64_t{1001}, Activation::gelu, false);
  add<ActivationCase>(out, {DType::f32, DType::bf16}, std::int64_t{1001}, Activation::silu, false);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->offset = 1;
  return out;
}

}  // namespace codistill::test::ops
