// Optimizers against PyTorch over 3 steps and resume through state() (schedules: test_schedule.cpp).
//
// Expected numbers come from PyTorch 1.13 in float64, produced by:
//   a = [0.5, 1.0, 2.0, 0.1]; b = [0.1, -0.3, 0.2, 0.0]; p0 = [1.0, -2.0, 0.5, 3.0]
//   for each step: loss = sum(0.5 * a * p^2 + b * p); loss.backward(); opt.step()
// (so grad = a * p + b), with the optimizer and learning rates named in each case.
#include <cmath>
#include <cstring>

#include "codistill/models/model.hpp"
#include "codistill/optim/adamw.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/optim/sgd.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::DType;
using codistill::kernels::Tensor;

namespace {

const std::vector<double> kA = {0.5, 1.0, 2.0, 0.1}, kB = {0.1, -0.3, 0.2, 0.0};
const std::vector<double> kP0 = {1.0, -2.0, 0.5, 3.0};

// A module that is just one parameter vector "w" (the model's arena holds it).
class Weights : public Layer {
 public:
  explicit Weights(DType dtype) : w_(Tensor::from_vector({4}, kP0).to(dtype)), dw_(Tensor::zeros({4}, dtype)) {}
  std::string kind() const override { return "weights"; }
  std::vector<Param> params() override { return {{"w", &w_, &dw_}}; }
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }

 protected:
  Tensor do_forward(const Tensor& x, bool) override { return x; }
  Tensor do_backward(const Tensor& dy, bool) override { return dy; }

 private:
  Tensor w_, dw_;
};

struct Problem {
  Model model;
  Tensor* value;
  Tensor* grad;
  explicit Problem(DType dtype) {
    model.add("weights", std::make_unique<Weights>(dtype));
    model.finalize();
    auto p = model.params();
    value = p.at(0).value;
    grad = p.at(0).grad;
  }
  void compute_grad() {
    kernels::dispatch_floating(value->dtype(), [&]<class T>() {
      for (int i = 0; i < 4; ++i)
        grad->data<T>()[i] = static_cast<T>(kA[i] * double(value->data<T>()[i]) + kB[i]);
    });
  }
  std::vector<double> p() const {
    Tensor d = value->to(DType::f64);
    return {d.data<double>(), d.data<double>() + 4};
  }
};

std::vector<double> values(const Tensor* t) {
  Tensor d = t->to(DType::f64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

struct Case {
  const char* name;
  OptimizerConfig cfg;
  std::vector<double> lrs, p, slot1, slot2;  // slot1: momentum | adam_m, slot2: adam_v
};

OptimizerConfig sgd(double momentum, bool nesterov, double wd) {
  OptimizerConfig c;
  c.kind = "sgd";
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

OptimizerConfig adamw(double b1, double b2, double eps, double wd) {
  OptimizerConfig c;
  c.kind = "adamw";
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = eps;
  c.weight_decay = wd;
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      {"sgd plain", sgd(0, false, 0), {0.1, 0.1, 0.1},
       {0.8288499999999999, -1.3767, 0.20719999999999997, 2.9108970000000003}, {}, {}},
      {"sgd momentum 0.9", sgd(0.9, false, 0), {0.1, 0.1, 0.1},
       {0.67765, -0.8177999999999997, -0.06280000000000001, 2.833137},
       {1.5134999999999998, -5.382000000000001, 2.388, 0.8016300000000003}, {}},
      {"sgd nesterov 0.9", sgd(0.9, true, 0), {0.1, 0.1, 0.1},
       {0.5577551499999999, -0.4528382999999999, -0.16501120000000005, 2.762681823},
       {1.4418150000000003, -4.86243, 1.9084800000000002, 0.7941483}, {}},
      {"sgd momentum 0.9, weight decay 0.01", sgd(0.9, false, 0.01), {0.1, 0.1, 0.1},
       {0.6725641389999999, -0.808586968, -0.06461492050000005, 2.8166084070000004},
       {1.53646861, -5.4204503200000005, 2.3938542050000002, 0.8805459300000001}, {}},
      {"adamw (0.9, 0.999), eps 1e-8, wd 0.01", adamw(0.9, 0.999, 1e-8, 0.01), {0.1, 0.1, 0.1},
       {0.6985418951606841, -1.6948428099015027, 0.20237013221802844, 2.6917036590789487},
       {0.1479763089864997, -0.5937445891514137, 0.26710804731948523, 0.07831509302570673},
       {0.0009101423690086564, 0.014500044923958767, 0.0030740931974197927, 0.0002517383102010128}},
      {"adamw (0.8, 0.99), eps 1e-3, wd 0.1, lr 0.1/0.05/0.02", adamw(0.8, 0.99, 1e-3, 0.1), {0.1, 0.05, 0.02},
       {0.8147198096824144, -1.7973173623380974, 0.32379632742189474, 2.780836042170595},
       {0.26762468099166137, -1.067372031511789, 0.4895813826601231, 0.14045089997131302},
       {0.00915363431248069, 0.14387692925025994, 0.03170111581837602, 0.0024852522064698333}},
  };
  return k;
}

}  // namespace

TEST_CASE("optimizers match PyTorch over three steps", "[optim]") {
  for (const Case& c : cases()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(c.name << ", " << kernels::dtype_name(dtype));
      const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
      Problem prob(dtype);
      auto opt = make_optimizer(c.cfg, prob.model);
      CHECK(opt->kind() == c.cfg.kind);
      for (double lr : c.lrs) {
        prob.compute_grad();
        opt->step(lr);
      }
      CHECK(opt->steps_taken() == 3);
      check_close(prob.p(), c.p, tol);
      auto state = opt->state();
      if (c.cfg.kind == "sgd" && c.slot1.empty()) {
        CHECK(state.empty());  // no momentum, no state (as PyTorch)
      } else if (c.cfg.kind == "sgd") {
        check_close(values(state.at("weights/w").at("momentum")), c.slot1, tol);
      } else {
        check_close(values(state.at("weights/w").at("adam_m")), c.slot1, tol);
        check_close(values(state.at("weights/w").at("adam_v")), c.slot2, tol);
      }
    }
  }
}

// The same problem with torch.nn.utils.clip_grad_norm_(params, 1.0) before each step
// (float64): the norms 2.68, 2.56 and 2.35 (SGD) are all clipped.
TEST_CASE("gradient clipping by global norm matches PyTorch's clip_grad_norm_", "[optim]") {
  struct Clipped {
    OptimizerConfig cfg;
    std::vector<double> p, slot, norms;
  };
  OptimizerConfig s = sgd(0.9, false, 0), a = adamw(0.9, 0.999, 1e-8, 0.01);
  s.clip_grad_norm = a.clip_grad_norm = 1.0;
  const std::vector<Clipped> cases = {
      {s, {0.8714995937827764, -1.5158768431398393, 0.25613194620018587, 2.93486013174013},
       {0.6298738110759193, -2.346640637609177, 1.154624433003947, 0.3220865972373134},
       {2.679552201394852, 2.563514497008399, 2.3460867907835046}},
      {a, {0.6974909971081138, -1.6940834820656128, 0.20068734299953828, 2.691015499144379},
       {0.059533357726830015, -0.2394194879096121, 0.1068578531376733, 0.031596516386912944},
       {2.679552201394852, 2.4930064895655386, 2.3149658763381553}},
  };
  for (const Clipped& c : cases) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(c.cfg.kind << ", " << kernels::dtype_name(dtype));
      const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
      Problem prob(dtype);
      auto opt = make_optimizer(c.cfg, prob.model);
      for (int t = 0; t < 3; ++t) {
        prob.compute_grad();
        opt->step(0.1);
        REQUIRE(opt->last_grad_norm().has_value());
        CHECK(*opt->last_grad_norm() == Approx(c.norms[static_cast<std::size_t>(t)]).epsilon(tol));
      }
      check_close(prob.p(), c.p, tol);
      check_close(values(opt->state().at("weights/w").at(c.cfg.kind == "sgd" ? "momentum" : "adam_m")), c.slot, tol);
    }
  }
  SECTION("a bound above the norm changes nothing, bit for bit; off records no norm") {
    Problem clipped(DType::f32), plain(DType::f32);
    OptimizerConfig loose = a;
    loose.clip_grad_norm = 100;
    auto o1 = make_optimizer(loose, clipped.model), o2 = make_optimizer(adamw(0.9, 0.999, 1e-8, 0.01), plain.model);
    for (int t = 0; t < 3; ++t) {
      clipped.compute_grad();
      plain.compute_grad();
      o1->step(0.1);
      o2->step(0.1);
    }
    CHECK(std::memcmp(clipped.value->raw(), plain.value->raw(), clipped.value->nbytes()) == 0);
    CHECK_FALSE(o2->last_grad_norm().has_value());
    CHECK_THROWS_WITH(o2->set_clip_grad_norm(-1), Catch::Contains("clip_grad_norm must be >= 0"));
  }
}

// A matrix [2, 2] and a vector [4], both starting at kP0 with the gradient a * p + b.
class MatrixAndVector : public Layer {
 public:
  MatrixAndVector()
      : w_(Tensor::from_vector({2, 2}, kP0).to(DType::f32)), dw_(Tensor::zeros({2, 2}, DType::f32)),
        b_(Tensor::from_vector({4}, kP0).to(DType::f32)), db_(Tensor::zeros({4}, DType::f32)) {}
  std::string kind() const override { return "matrix_and_vector"; }
  std::vector<Param> params() override { return {{"w", &w_, &dw_}, {"b", &b_, &db_}}; }
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }

 protected:
  Tensor do_forward(const Tensor& x, bool) override { return x; }
  Tensor do_backward(const Tensor& dy, bool) override { return dy; }

 private:
  Tensor w_, dw_, b_, db_;
};

// After three steps of `cfg` with optimizer.decay `which`: the values of w then b.
std::vector<double> train_matrix_and_vector(OptimizerConfig cfg, const std::string& which) {
  Model model;
  model.add("layer", std::make_unique<MatrixAndVector>());
  model.finalize();
  cfg.decay = which;
  auto opt = make_optimizer(cfg, model);
  auto params = model.params();
  for (int t = 0; t < 3; ++t) {
    for (const auto& p : params)
      for (int i = 0; i < 4; ++i)
        p.grad->data<float>()[i] = static_cast<float>(kA[i] * double(p.value->data<float>()[i]) + kB[i]);
    opt->step(0.1);
  }
  std::vector<double> out = values(params.at(0).value), b = values(params.at(1).value);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST_CASE("optimizer.decay matrices: weight decay on parameters of 2 or more dimensions only", "[optim]") {
  for (const OptimizerConfig& cfg : {sgd(0.9, true, 0.1), adamw(0.9, 0.999, 1e-8, 0.1)}) {
    INFO(cfg.kind);
    OptimizerConfig no_decay = cfg;
    no_decay.weight_decay = 0;
    const auto all = train_matrix_and_vector(cfg, "all"), none = train_matrix_and_vector(no_decay, "all");
    const auto matrices = train_matrix_and_vector(cfg, "matrices");
    // Elementwise updates with the same gradients: the matrix as with decay, the vector as
    // without, bit for bit.
    for (int i = 0; i < 4; ++i) CHECK(matrices[static_cast<std::size_t>(i)] == all[static_cast<std::size_t>(i)]);
    for (int i = 4; i < 8; ++i) CHECK(matrices[static_cast<std::size_t>(i)] == none[static_cast<std::size_t>(i)]);
    CHECK(all[4] != none[4]);  // decay does change the vector when it applies
  }
  Problem prob(DType::f32);
  OptimizerConfig bad = sgd(0.9, false, 0.1);
  bad.decay = "vectors";
  CHECK_THROWS_WITH(make_optimizer(bad, prob.model), Catch::Contains("valid: all, matrices"));
}

TEST_CASE("first SGD-momentum step by hand", "[optim]") {
  // buf = g = a*p0 + b; p1 = p0 - lr * buf
  Problem prob(DType::f64);
  auto opt = make_optimizer(sgd(0.9, false, 0), prob.model);
  prob.compute_grad();
  opt->step(0.1);
  for (int i = 0; i < 4; ++i) CHECK(prob.p()[i] == Approx(kP0[i] - 0.1 * (kA[i] * kP0[i] + kB[i])));
}

TEST_CASE("resuming from state() and steps_taken continues bit for bit", "[optim]") {
  for (const Case& c : cases()) {
    INFO(c.name);
    Problem straight(DType::f32), resumed(DType::f32);
    auto a = make_optimizer(c.cfg, straight.model);
    auto b = make_optimizer(c.cfg, resumed.model);
    for (int s = 0; s < 2; ++s) {
      straight.compute_grad();
      a->step(c.lrs[s]);
    }
    // "Checkpoint": parameters, slots and step count into a fresh optimizer.
    resumed.value->copy_from(*straight.value);
    for (auto& [path, slots] : a->state())
      for (auto& [slot, tensor] : slots) b->state().at(path).at(slot)->copy_from(*tensor);
    b->set_steps_taken(a->steps_taken());
    straight.compute_grad();
    a->step(c.lrs[2]);
    resumed.compute_grad();
    b->step(c.lrs[2]);
    CHECK(std::memcmp(straight.value->raw(), resumed.value->raw(), straight.value->nbytes()) == 0);
  }
}

TEST_CASE("optimizer kinds and hyperparameters are validated", "[optim]") {
  Problem prob(DType::f32);
  OptimizerConfig bad;
  bad.kind = "rmsprop";
  CHECK(optimizer_kinds() == std::vector<std::string>{"adamw", "sgd"});
  CHECK_THROWS_WITH(make_optimizer(bad, prob.model), "unknown optimizer kind 'rmsprop' (valid: adamw, sgd)");
  CHECK_THROWS_AS(make_optimizer(sgd(0, true, 0), prob.model), std::invalid_argument);
  CHECK_THROWS_AS(make_optimizer(sgd(1.0, false, 0), prob.model), std::invalid_argument);
  CHECK_THROWS_AS(make_optimizer(adamw(0.9, 1.0, 1e-8, 0), prob.model), std::invalid_argument);
  CHECK_THROWS_AS(make_optimizer(adamw(0.9, 0.999, 0, 0), prob.model), std::invalid_argument);
}

// What an asynchronous checkpoint relies on (persist/checkpointing.hpp): an out-of-place step
// is the step in place, bit for bit, its result lands in the given blocks, which the model
// and the optimizer use from then on, and the blocks it read come back holding the state
// before it.
TEST_CASE("step_into is step, written into new blocks, the old ones kept as they were", "[optim]") {
  for (const Case& c : cases()) {
    INFO(c.name);
    Problem straight(DType::f32), swapped(DType::f32);
    auto a = make_optimizer(c.cfg, straight.model);
    auto b = make_optimizer(c.cfg, swapped.model);
    for (int s = 0; s < 3; ++s) {
      straight.compute_grad();
      a->step(c.lrs[s]);
      swapped.compute_grad();
      if (s != 1) {
        b->step(c.lrs[s]);
        continue;
      }
      b->state();  // the per-parameter slot views are cached: they must follow the new blocks
      const OptimizerBlocks live = b->live_blocks();
      const Tensor values_kept = live.values.clone();
      std::map<std::string, Tensor> slots_kept;
      for (const auto& [name, t] : live.slots) slots_kept[name] = t.clone();
      OptimizerBlocks into = b->blocks_like();
      into.values.fill(std::nan(""));  // every element must be written
      for (auto& [name, t] : into.slots) t.fill(std::nan(""));
      const void* into_values = into.values.raw();
      OptimizerBlocks before = b->step_into(c.lrs[s], std::move(into));
      CHECK(before.values.same_memory(live.values));
      CHECK(std::memcmp(before.values.raw(), values_kept.raw(), values_kept.nbytes()) == 0);
      for (const auto& [name, t] : slots_kept) {
        INFO(name);
        CHECK(std::memcmp(before.slots.at(name).raw(), t.raw(), t.nbytes()) == 0);
      }
      CHECK(swapped.value->raw() == into_values);  // the model's view follows the new block
      CHECK(swapped.model.arena().values().raw() == into_values);
      for (auto& [path, slots] : b->state())
        for (auto& [slot, tensor] : slots) CHECK(tensor->raw() != before.slots.at(slot).raw());
    }
    CHECK(a->steps_taken() == b->steps_taken());
    CHECK(std::memcmp(straight.value->raw(), swapped.value->raw(), straight.value->nbytes()) == 0);
    for (auto& [path, slots] : a->state())
      for (auto& [slot, tensor] : slots)
        CHECK(std::memcmp(tensor->raw(), b->state().at(path).at(slot)->raw(), tensor->nbytes()) == 0);
  }
}

TEST_CASE("step_into refuses blocks of another layout and changes nothing", "[optim]") {
  Problem prob(DType::f32);
  auto opt = make_optimizer(sgd(0.9, false, 0), prob.model);
  prob.compute_grad();
  const Tensor kept = prob.value->clone();
  OptimizerBlocks wrong = opt->blocks_like();
  wrong.values = Tensor::zeros({5});
  CHECK_THROWS_WITH(opt->step_into(0.1, std::move(wrong)), Catch::Matchers::Contains("laid out like the live one"));
  OptimizerBlocks no_slot = opt->blocks_like();
  no_slot.slots.clear();
  CHECK_THROWS_WITH(opt->step_into(0.1, std::move(no_slot)), Catch::Matchers::Contains("another set of slots"));
  CHECK_THROWS_WITH(opt->step_into(0.1, opt->live_blocks()), Catch::Matchers::Contains("is the live block"));
  CHECK(std::memcmp(prob.value->raw(), kept.raw(), kept.nbytes()) == 0);
  CHECK(opt->steps_taken() == 0);
}
