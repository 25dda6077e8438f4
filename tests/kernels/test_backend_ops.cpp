// One test driver for every op entry point of kernels::Backend (DESIGN.md section 9; ggml's
// test-backend-ops is the model). A table of op cases (tests/kernels/ops/cases_*.hpp: an
// op, a dtype, sizes including odd ones, a seed) runs on every registered backend that has
// a device, on a queue of its own with its inputs copied to its device, its outputs poisoned
// with NaN and its gradients pre-filled (accumulation), and is compared with the CPU
// reference queue within relative bounds (float32 1e-5 .. 1e-4 by what the op sums over,
// float64 1e-12 .. 1e-11, bfloat16 1e-2). A case a backend does not support fails unless it
// is one of that backend's known gaps (known_gap below: a backend that stops supporting an
// op must not pass by running fewer cases), and every (op, dtype), GEMM compute and layout
// a backend claims must have cases. Cases that promise determinism run twice and must
// agree bit for bit.
//
// The CPU backend (its fast queue) runs in the ordinary tests below; the CUDA backend in
// the one [cuda] test, which prints "skipped: no CUDA device" where there is none (CTest
// shows it skipped). Seeds are fresh per run and printed on failure; CODISTILL_TEST_SEED
// repeats a run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "kernels/cuda/backend.hpp"
#include "ops/cases_attention.hpp"
#include "ops/cases_conv.hpp"
#include "ops/cases_dense.hpp"
#include "ops/cases_head.hpp"
#include "ops/cases_loss.hpp"
#include "ops/cases_norm.hpp"
#include "ops/cases_optim.hpp"

using namespace codistill::test::ops;

namespace {

// A backend's device and the queue options every case starts from.
struct Target {
  std::string label;
  k::Backend* backend;
  k::Device device;
  bool reference = false;  // the CPU reference queue itself (contract tests only)
};

// Every registered backend with a device, of the kinds `want` accepts.
template <class Pred>
std::vector<Target> targets(Pred want) {
  std::vector<Target> out;
  for (k::Backend* b : k::backends())
    if (want(b->kind()) && b->device_count() > 0) {
      const k::Device d{b->kind(), 0};
      out.push_back({d.str(), b, d});
    }
  return out;
}

std::vector<Target> ordinary_targets() {
  return targets([](k::DeviceKind kind) { return kind != k::DeviceKind::cuda; });
}
std::vector<Target> cuda_targets() {
  return targets([](k::DeviceKind kind) { return kind == k::DeviceKind::cuda; });
}

std::unique_ptr<k::Queue> make_queue(const Target& t, k::QueueOptions o = {}) {
  o.reference = t.reference;
  return t.backend->make_queue(t.device, o);
}

bool supported(const k::Backend& b, const std::vector<Op>& ops, DType dtype) {
  for (Op op : ops)
    if (!b.supports(op, dtype)) return false;
  return true;
}

// What a backend is known not to run, stated here apart from its supports() so that a
// backend losing an op fails this driver instead of passing with fewer cases. CPU: no
// bfloat16 tensors (bf16 is a GEMM compute there). CUDA: float32, bfloat16 for the loss
// alone (and bf16-held weights beside float32); no softmax kernel, no synchronized batch
// norm, no channels-last maps, no bf16-compute flash attention.
std::string known_gap(const Target& t, const OpCase& c) {
  const Op op = c.ops().back();
  switch (t.backend->kind()) {
    case k::DeviceKind::cpu:
      if (c.dtype == DType::bf16) return "bfloat16 tensors";
      break;
    case k::DeviceKind::cuda:
      if (op == Op::softmax || op == Op::batchnorm_sync) return "no such kernel";
      if (c.dtype == DType::f64) return "float64";
      if (c.dtype == DType::bf16 && op != Op::distill_loss) return "bfloat16 outside the loss";
      if (c.channels_last()) return "channels-last";
      if (op == Op::flash_attention && c.options.compute != k::Compute::f32)
        return "flash attention's tiles compute in float32 only";
      break;
    default: break;
  }
  return {};
}

// Why target t skips case c ("" when it runs it).
std::string unsupported_reason(const Target& t, const OpCase& c) {
  if (!supported(*t.backend, c.ops(), c.dtype)) return std::string(k::dtype_name(c.dtype));
  if (c.channels_last() && !t.backend->supports_channels_last()) return "channels-last";
  if (!t.backend->supports_compute(c.options.compute))
    return std::string(k::compute_name(c.options.compute)) + " compute";
  for (Op op : c.ops())
    if (!t.backend->supports(op, c.dtype, c.options.compute))
      return std::string(k::compute_name(c.options.compute)) + " compute of " + k::op_name(op);
  return {};
}

std::uint64_t case_seed(std::uint64_t base, std::uint64_t index) {  // splitmix64
  std::uint64_t z = base + index * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The element that sets op_error (the largest difference relative to max(|want|, floor)),
// and the floor, for the failure message.
std::string worst(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  std::size_t at = 0;
  double big = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(std::abs(want[i]), floor);
    const double d = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : std::abs(got[i] - want[i]) / scale;
    if (d > big) big = d, at = i;
  }
  std::ostringstream s;
  s.precision(17);
  if (!got.empty())
    s << "worst element " << at << " of " << got.size() << ": got " << got[at] << ", want " << want[at]
      << " (floor " << floor << ")";
  return s.str();
}

// Checks every output against the reference's (by op_norm_error where the reference's
// output says normwise, else op_error); false when one is off.
bool compare(const std::vector<Output>& got, const std::vector<Output>& want) {
  bool ok = true;
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << got[i].name);
    REQUIRE(got[i].name == want[i].name);
    REQUIRE(got[i].values.size() == want[i].values.size());
    REQUIRE(got[i].normwise == want[i].normwise);
    const bool normwise = want[i].normwise;
    const double err = normwise ? op_norm_error(got[i].values, want[i].values, want[i].floor)
                                : op_error(got[i].values, want[i].values, want[i].floor);
    INFO((normwise ? "normwise " : "") << "relative error " << err << " (bound " << got[i].bound << "); "
                           << worst(got[i].values, want[i].values, op_error_floor(want[i].values, want[i].floor)));
    CHECK(err <= got[i].bound);
    ok = ok && err <= got[i].bound;
  }
  return ok;
}

bool bitwise_equal(const std::vector<Output>& a, const std::vector<Output>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].values.size() != b[i].values.size() ||
        (!a[i].values.empty() &&
         std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(double)) != 0))
      return false;
  return true;
}

struct Tally {
  int passed = 0, failed = 0;
  std::map<std::string, int> unsupported;  // "op dtype" -> cases
};

// Runs every case on every target against the reference queue, then prints per target
// one line: cases run, and the (op, dtype) pairs it does not support.
void run_cases(const char* family, Cases cases, const std::vector<Target>& ts) {
  const std::uint64_t seed = base_seed();
  INFO("seed " << seed << " (CODISTILL_TEST_SEED=" << seed << " repeats this run)");
  std::vector<Tally> tally(ts.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    OpCase& c = *cases[i];
    c.seed = case_seed(seed, i);
    INFO("case " << c.label() << ", case seed " << c.seed);
    std::optional<std::vector<Output>> want;  // the reference runs only when some target does
    for (std::size_t j = 0; j < ts.size(); ++j) {
      INFO("backend " << ts[j].label);
      if (const std::string why = unsupported_reason(ts[j], c); !why.empty()) {
        const std::string gap = known_gap(ts[j], c);
        if (gap.empty()) FAIL_CHECK("not supported (" << why << "), and not a known gap of this backend");
        ++tally[j].unsupported[std::string(k::op_name(c.ops().back())) + " " + why];
        continue;
      }
      try {
        if (!want) {
          // A bf16-compute case's reference rounds the same GEMM operands (its own queue).
          std::unique_ptr<k::Queue> bf16_ref;
          if (c.options.compute != k::Compute::f32)
            bf16_ref = k::backend_for(k::DeviceKind::cpu)
                           .make_queue(k::Device::cpu(), {.reference = true, .compute = c.options.compute});
          Ctx ref(bf16_ref ? *bf16_ref : k::default_cpu_queue(true), c.dtype);
          want = c.run(ref);
        }
        const auto q = make_queue(ts[j], c.options);
        Ctx ctx(*q, c.dtype, c.offset);
        const auto got = c.run(ctx);
        bool ok = compare(got, *want);
        if (c.reproducible()) {
          Ctx again(*q, c.dtype, c.offset);
          const bool same = bitwise_equal(c.run(again), got);
          CHECK(same);  // the same inputs: the same bits
          ok = ok && same;
        }
        ++(ok ? tally[j].passed : tally[j].failed);
      } catch (const std::exception& e) {
        ++tally[j].failed;
        FAIL_CHECK("threw: " << e.what());
      }
    }
  }
  for (std::size_t j = 0; j < ts.size(); ++j) {
    std::cout << "[backend ops] " << family << " on " << ts[j].label << ": " << tally[j].passed << " cases passed";
    if (tally[j].failed) std::cout << ", " << tally[j].failed << " FAILED";
    for (const auto& [what, n] : tally[j].unsupported) std::cout << "; not supported: " << what << " (" << n << " cases)";
    std::cout << std::endl;
  }
}

// Every registered backend, with a device or not (its claims are what supports() says):
// each (op, dtype) it claims, each GEMM compute and channels-last maps if it claims them,
// has at least one case in the tables above, so that no claim goes untested.
TEST_CASE("backend ops: every (op, dtype), compute and layout a backend claims has cases", "[ops]") {
  Cases all;
  for (Cases (*family)() : {linear_cases, elementwise_cases, conv_cases, pool_cases, norm_cases, attention_cases,
                            distill_cases, head_cases, optimizer_cases})
    for (auto& c : family()) all.push_back(std::move(c));
  for (const k::Backend* b : k::backends()) {
    const k::Device device{b->kind(), 0};
    INFO("backend " << device.str());
    for (Op op : k::kAllOps)
      for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
        if (!b->supports(op, dt)) continue;
        INFO("claims " << k::op_name(op) << " " << k::dtype_name(dt));
        const bool covered = std::any_of(all.begin(), all.end(), [&](const auto& c) {
          const std::vector<Op> ops = c->ops();  // by value: one copy to search
          return c->dtype == dt && std::find(ops.begin(), ops.end(), op) != ops.end();
        });
        CHECK(covered);
      }
    // A backend without a single op (the CUDA stub of a build without CUDA) has nothing
    // to compute with or lay out: its compute and layout claims are moot.
    const bool any_op = std::any_of(std::begin(k::kAllOps), std::end(k::kAllOps), [&](Op op) {
      return b->supports(op, DType::f32) || b->supports(op, DType::f64) || b->supports(op, DType::bf16);
    });
    if (!any_op) continue;
    for (k::Compute cm : {k::Compute::f32, k::Compute::bf16}) {
      if (!b->supports_compute(cm)) continue;
      INFO("claims " << k::compute_name(cm) << " compute");
      CHECK(std::any_of(all.begin(), all.end(), [&](const auto& c) {
        return c->options.compute == cm && supported(*b, c->ops(), c->dtype);
      }));
    }
    if (b->supports_channels_last())
      CHECK(std::any_of(all.begin(), all.end(), [&](const auto& c) {
        return c->channels_last() && supported(*b, c->ops(), c->dtype);
      }));
  }
}

// ---- contract tests (no reference run: the contract of kernels/ops.hpp itself) ----

// A label outside [-1, V) throws std::out_of_range naming the row and the label, before
// anything is written: not the gradient, not the student when the gradient aliases it.
void check_bad_labels(const std::vector<Target>& ts) {
  const std::uint64_t seed = base_seed();
  INFO("seed " << seed);
  const std::int64_t N = 40, V = 100;
  for (const Target& t : ts)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      if (!supported(*t.backend, {Op::distill_loss}, dtype)) continue;
      for (auto [row, label] : {std::pair{17, 100}, std::pair{3, -2}, std::pair{0, 1 << 30}}) {
        INFO(t.label << (t.reference ? " (reference)" : "") << " " << k::dtype_name(dtype) << ": row " << row
                     << " label " << label);
        const auto q = make_queue(t);
        Ctx c(*q, dtype);
        Tensor student = c.random({N, V}, seed, -6, 6), t0 = c.random({N, V}, seed + 1), t1 = c.random({N, V}, seed + 2);
        const std::vector<const Tensor*> teachers{&t0, &t1};
        auto lv = distill_labels(N, V, seed + 3);
        lv[static_cast<std::size_t>(row)] = label;
        Tensor labels = c.labels(lv), grad = c.random({N, V}, seed + 4);
        const auto student_before = c.values(student), grad_before = c.values(grad);
        const k::DistillLossParams p{2.0, 1.0, 1.0};
        const std::string row_is = "row " + std::to_string(row), label_is = "label " + std::to_string(label);
        CHECK_THROWS_AS(t.backend->distill_loss(student, teachers, labels, &grad, p, *q), std::out_of_range);
        CHECK_THROWS_WITH(t.backend->distill_loss(student, teachers, labels, &grad, p, *q),
                          Catch::Matchers::Contains(row_is) && Catch::Matchers::Contains(label_is));
        CHECK_THROWS_AS(t.backend->distill_loss(student, teachers, labels, nullptr, p, *q), std::out_of_range);
        CHECK_THROWS_AS(t.backend->distill_loss(student, teachers, labels, &student, p, *q), std::out_of_range);
        CHECK(c.values(grad) == grad_before);
        CHECK(c.values(student) == student_before);
      }
    }
}

// An embedding id outside [0, vocab) throws std::out_of_range naming the first bad row and
// its id, before anything is written: not y, not dtable.
void check_bad_ids(const std::vector<Target>& ts) {
  const std::uint64_t seed = base_seed();
  INFO("seed " << seed);
  const k::EmbeddingShape s{300, 50, 7};
  for (const Target& t : ts)
    for (DType dtype : {DType::f32, DType::f64}) {
      if (!supported(*t.backend, {Op::embedding}, dtype)) continue;
      for (auto [row, id] : {std::pair{217, 50}, std::pair{0, -1}, std::pair{299, 1 << 30}}) {
        INFO(t.label << (t.reference ? " (reference)" : "") << " " << k::dtype_name(dtype) << ": row " << row
                     << " id " << id);
        const auto q = make_queue(t);
        Ctx c(*q, dtype);
        std::vector<std::int32_t> idv(static_cast<std::size_t>(s.rows));
        for (std::size_t n = 0; n < idv.size(); ++n) idv[n] = static_cast<std::int32_t>(n * 7 % 50);
        idv[static_cast<std::size_t>(row)] = id;
        if (row != 299) idv[299] = -5;  // a later bad row: the first is named
        Tensor ids = c.labels(idv), table = c.random({s.vocab, s.dim}, seed), y = c.random({s.rows, s.dim}, seed + 1);
        Tensor dy = c.random({s.rows, s.dim}, seed + 2), dtable = c.random({s.vocab, s.dim}, seed + 3);
        const auto y_before = c.values(y), dtable_before = c.values(dtable);
        const auto names = Catch::Matchers::Contains("row " + std::to_string(row) + " has id " + std::to_string(id));
        CHECK_THROWS_AS(t.backend->embedding_forward(ids, table, y, s, *q), std::out_of_range);
        CHECK_THROWS_WITH(t.backend->embedding_forward(ids, table, y, s, *q), names);
        CHECK_THROWS_AS(t.backend->embedding_backward(ids, dy, dtable, s, *q), std::out_of_range);
        CHECK_THROWS_WITH(t.backend->embedding_backward(ids, dy, dtable, s, *q), names);
        CHECK(c.values(y) == y_before);
        CHECK(c.values(dtable) == dtable_before);
      }
    }
}

// max |got - want| / max(|want|, floor) over elements where both are numbers; infinite where
// exactly one is NaN.
double nan_aware_error(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (!std::isnan(want[i])) e = std::max(e, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor));
  }
  return e;
}

// A NaN in a window is the window's maximum (kernels/ops.hpp); with ties going to the
// first maximum, the window's gradient goes to its first NaN. Checked against that rule
// itself, on inputs with NaN at the first and at later positions of windows.
void check_maxpool_nan(const std::vector<Target>& ts) {
  const std::uint64_t seed = base_seed();
  INFO("seed " << seed);
  for (const Target& t : ts)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      if (!supported(*t.backend, {Op::maxpool2d}, dtype)) continue;
      for (const k::Pool2dShape& s : {pool(2, 3, 8, 8, 2, 2), pool(3, 5, 11, 9, 3, 2), pool(2, 3, 9, 7, 2, 1)}) {
        INFO(t.label << (t.reference ? " (reference)" : "") << " " << k::dtype_name(dtype) << " " << pool_str(s));
        const std::int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
        const std::int64_t planes = s.batch * s.channels;
        auto xv = uniform(static_cast<std::size_t>(planes * H * W), seed);
        const auto coin = uniform(xv.size(), seed + 1, 0, 1);
        for (std::size_t i = 0; i < xv.size(); ++i)
          if (coin[i] < 0.06) xv[i] = NAN;
        xv[1] = NAN;           // plane 0, window (0, 0): a NaN after a number
        xv[static_cast<std::size_t>(H * W + W)] = NAN;  // plane 1: a NaN on a window's second row
        xv[static_cast<std::size_t>(2 * H * W)] = NAN;  // plane 2: a NaN first in its window
        const auto dyv = uniform(static_cast<std::size_t>(planes * OH * OW), seed + 2);
        // The rule: the first NaN of the window, else the first of its largest numbers.
        std::vector<double> y_want(dyv.size()), dx_want(xv.size(), 0.0);
        for (std::int64_t p = 0; p < planes; ++p)
          for (std::int64_t o = 0; o < OH * OW; ++o) {
            std::int64_t arg = -1;
            for (std::int64_t kh = 0; kh < s.kernel; ++kh)
              for (std::int64_t kw = 0; kw < s.kernel; ++kw) {
                const std::int64_t i = p * H * W + (o / OW * s.stride + kh) * W + o % OW * s.stride + kw;
                const auto u = static_cast<std::size_t>(i);
                if (arg < 0 || (!std::isnan(xv[static_cast<std::size_t>(arg)]) && (std::isnan(xv[u]) || xv[u] > xv[static_cast<std::size_t>(arg)])))
                  arg = i;
              }
            y_want[static_cast<std::size_t>(p * OH * OW + o)] = round_to(dtype, xv[static_cast<std::size_t>(arg)]);
            dx_want[static_cast<std::size_t>(arg)] += round_to(dtype, dyv[static_cast<std::size_t>(p * OH * OW + o)]);
          }
        const auto q = make_queue(t);
        Ctx c(*q, dtype);
        const Shape xs{s.batch, s.channels, H, W}, ys{s.batch, s.channels, OH, OW};
        Tensor x = c.in(xv, xs), y = c.poison(ys), argmax = Tensor::empty(ys, DType::i32, q->device());
        t.backend->maxpool2d_forward(x, y, argmax, s, *q);
        Tensor dy = c.in(dyv, ys), dx = c.poison(xs);
        t.backend->maxpool2d_backward(x, y, argmax, dy, dx, s, *q);
        const auto y_got = c.values(y), dx_got = c.values(dx);
        INFO("y: " << worst(y_got, y_want, 1e-300));
        CHECK(nan_aware_error(y_got, y_want, 1e-300) == 0);
        INFO("dx: " << worst(dx_got, dx_want, 1.0));
        CHECK(nan_aware_error(dx_got, dx_want, 1.0) <= c.bound(4));
      }
    }
}

}  // namespace

// ---- the CPU backend (and any other registered backend but CUDA) ----

TEST_CASE("backend ops: linear forward and backward (fused activations) match the CPU reference",
          "[ops][linear]") {
  run_cases("linear", linear_cases(), ordinary_targets());
}

TEST_CASE("backend ops: activation, softmax, multiply and add match the CPU reference", "[ops][elementwise]") {
  run_cases("elementwise", elementwise_cases(), ordinary_targets());
}

TEST_CASE("backend ops: conv2d forward and backward match the CPU reference", "[ops][conv2d]") {
  run_cases("conv2d", conv_cases(), ordinary_targets());
}

TEST_CASE("backend ops: maxpool2d forward and backward match the CPU reference", "[ops][maxpool2d]") {
  run_cases("maxpool2d", pool_cases(), ordinary_targets());
}

TEST_CASE("backend ops: batchnorm (train and eval), layernorm and global_avgpool match the CPU reference",
          "[ops][batchnorm]") {
  run_cases("batchnorm", norm_cases(), ordinary_targets());
}

TEST_CASE("backend ops: distill_loss matches the CPU reference", "[ops][distill_loss]") {
  run_cases("distill_loss", distill_cases(), ordinary_targets());
}

TEST_CASE("backend ops: linear_distill_head matches the CPU reference", "[ops][distill_head]") {
  run_cases("linear_distill_head", head_cases(), ordinary_targets());
}

TEST_CASE("backend ops: embedding and causal attention match the CPU reference", "[ops][attention]") {
  run_cases("attention", attention_cases(), ordinary_targets());
}

TEST_CASE("backend ops: sgd_update and adamw_update match the CPU reference", "[ops][optimizer]") {
  run_cases("optimizer", optimizer_cases(), ordinary_targets());
}

TEST_CASE("backend ops: distill_loss rejects a label out of range before writing anything",
          "[ops][distill_loss]") {
  auto ts = ordinary_targets();
  ts.push_back({"cpu", &k::backend_for(k::DeviceKind::cpu), k::Device::cpu(), true});
  check_bad_labels(ts);
}

TEST_CASE("backend ops: embedding rejects an id out of range before writing anything", "[ops][attention]") {
  auto ts = ordinary_targets();
  ts.push_back({"cpu", &k::backend_for(k::DeviceKind::cpu), k::Device::cpu(), true});
  check_bad_ids(ts);
}

// kernels/ops.hpp: a NaN in a window is its maximum (the first NaN wins), on every backend.
TEST_CASE("backend ops: a NaN in a maxpool2d window is the window's maximum", "[ops][maxpool2d]") {
  auto ts = ordinary_targets();
  ts.push_back({"cpu", &k::backend_for(k::DeviceKind::cpu), k::Device::cpu(), true});
  check_maxpool_nan(ts);
}

// ---- CUDA ----

// Not inside the [cuda] test below: a check before a skip cannot fail where CTest reports
// the skip instead.
TEST_CASE("backend ops: a CUDA backend without devices says why, one with devices says nothing", "[ops]") {
  const k::Backend& cuda = k::cuda_backend();
  INFO("devices " << cuda.device_count() << ", reason '" << cuda.unavailable_reason() << "'");
  CHECK(cuda.unavailable_reason().empty() == (cuda.device_count() > 0));
}

TEST_CASE("backend ops: every op case on the CUDA backend matches the CPU reference", "[cuda][ops]") {
  const k::Backend& cuda = k::cuda_backend();
  if (cuda.device_count() == 0) {
    std::cout << "skipped: no CUDA device (" << cuda.unavailable_reason() << ")" << std::endl;
    SUCCEED("skipped: no CUDA device");
    return;
  }
  const auto ts = cuda_targets();
  run_cases("linear", linear_cases(), ts);
  run_cases("elementwise", elementwise_cases(), ts);
  run_cases("conv2d", conv_cases(), ts);
  run_cases("maxpool2d", pool_cases(), ts);
  run_cases("batchnorm", norm_cases(), ts);
  run_cases("attention", attention_cases(), ts);
  run_cases("distill_loss", distill_cases(), ts);
  run_cases("linear_distill_head", head_cases(), ts);
  run_cases("optimizer", optimizer_cases(), ts);
  check_bad_labels(ts);
  check_bad_ids(ts);
  check_maxpool_nan(ts);
}
