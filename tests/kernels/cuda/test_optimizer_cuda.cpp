// The one-launch SGD and AdamW updates against the arithmetic of codistill/optim/sgd.cpp
// and adamw.cpp (restated here in float as those loops are written: this folder's tests
// link the kernels library only), over several steps and parameter slices of odd sizes,
// one of them misaligned (the scalar path) and one empty. The device table of slices is
// uploaded once per slice list (checked through the allocator's statistics).
// Without a CUDA device every case prints "skipped: no CUDA device".
#include <cmath>
#include <iterator>
#include <memory>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

// One parameter tensor with its gradient and two state slots, on the host and the device.
struct Param {
  std::vector<float> p, g, s0, s1;
  std::unique_ptr<DeviceVec<float>> dp, dg, d0, d1;
  Param(std::int64_t n, std::uint64_t seed, std::size_t offset) {
    p = random_vector<float>(n, seed);
    g = random_vector<float>(n, seed + 1, -0.1, 0.1);
    s0 = random_vector<float>(n, seed + 2, -0.01, 0.01);
    s1 = random_vector<float>(n, seed + 3, 0.0, 1e-4);  // adam's v is never negative
    dp = std::make_unique<DeviceVec<float>>(p, offset);
    dg = std::make_unique<DeviceVec<float>>(g, offset);
    d0 = std::make_unique<DeviceVec<float>>(s0, offset);
    d1 = std::make_unique<DeviceVec<float>>(s1, offset);
  }
  cuda::ParamSlice slice() const {
    return {dp->ptr, dg->ptr, d0->ptr, d1->ptr, static_cast<std::int64_t>(p.size())};
  }
};

std::vector<std::unique_ptr<Param>> make_params(std::uint64_t seed) {
  std::vector<std::unique_ptr<Param>> out;
  const std::int64_t sizes[] = {1, 3, 4096, 4097, 10000, 0, 131, 300001};
  for (std::size_t i = 0; i < std::size(sizes); ++i)  // slice 6 is misaligned
    out.push_back(std::make_unique<Param>(sizes[i], seed + 10 * i, i == 6 ? 1 : 0));
  return out;
}

// The loops of sgd.cpp, in float.
void sgd_reference(Param& q, const cuda::SgdScalars& s) {
  for (std::size_t i = 0; i < q.p.size(); ++i) {
    if (s.momentum == 0.0f) {
      q.p[i] -= s.lr * (q.g[i] + s.weight_decay * q.p[i]);
      continue;
    }
    const float d = q.g[i] + s.weight_decay * q.p[i];
    const float b = s.momentum * q.s0[i] + d;
    q.s0[i] = b;
    q.p[i] -= s.lr * (s.nesterov ? d + s.momentum * b : b);
  }
}

// The loop of adamw.cpp, in float.
void adamw_reference(Param& q, const cuda::AdamWScalars& s) {
  for (std::size_t i = 0; i < q.p.size(); ++i) {
    const float gi = q.g[i];
    const float mi = s.beta1 * q.s0[i] + (1.0f - s.beta1) * gi;
    const float vi = s.beta2 * q.s1[i] + (1.0f - s.beta2) * gi * gi;
    q.s0[i] = mi;
    q.s1[i] = vi;
    q.p[i] = q.p[i] * s.decay - s.step_size * mi / (std::sqrt(vi) * s.inv_sqrt_bc2 + s.eps);
  }
}

// AdamW::step's scalars for step t (1-based), computed in double and cast.
cuda::AdamWScalars adamw_scalars(int t, double lr, double b1, double b2, double eps, double wd) {
  cuda::AdamWScalars s;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  s.decay = static_cast<float>(1.0 - lr * wd);
  s.beta1 = static_cast<float>(b1);
  s.beta2 = static_cast<float>(b2);
  s.step_size = static_cast<float>(lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = static_cast<float>(eps);
  return s;
}

// The same arithmetic on both sides: expected equal up to the last bit; the bound leaves
// room for a compiler that contracts a multiply-add on the host.
void check_params(const std::vector<std::unique_ptr<Param>>& ps, bool slot0, bool slot1) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    INFO("slice " << i);
    CHECK(max_rel_error(ps[i]->dp->host(), ps[i]->p, 1e-12) < 1e-5);
    if (slot0) CHECK(max_rel_error(ps[i]->d0->host(), ps[i]->s0, 1e-12) < 1e-5);
    if (slot1) CHECK(max_rel_error(ps[i]->d1->host(), ps[i]->s1, 1e-12) < 1e-5);
  }
}

}  // namespace

TEST_CASE("cuda sgd_step matches the CPU SGD arithmetic", "[cuda][optimizer]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  const cuda::SgdScalars variants[] = {
      {0.1f, 0.01f, 0.0f, false}, {0.05f, 1e-3f, 0.9f, false}, {0.05f, 0.0f, 0.9f, true}};
  for (const auto& base : variants) {
    INFO("momentum " << base.momentum << " nesterov " << base.nesterov);
    auto ps = make_params(seed);
    std::vector<cuda::ParamSlice> slices;
    for (auto& p : ps) slices.push_back(p->slice());
    if (base.momentum == 0.0f)  // no momentum: the slot is not needed
      for (auto& s : slices) s.slot0 = nullptr;
    for (int step = 0; step < 3; ++step) {
      cuda::SgdScalars s = base;
      s.lr = base.lr / static_cast<float>(step + 1);
      cuda::sgd_step(slices, s, stream.context());
      for (auto& p : ps) sgd_reference(*p, s);
    }
    stream.synchronize();
    check_params(ps, base.momentum != 0.0f, false);
  }
}

TEST_CASE("cuda adamw_step matches the CPU AdamW arithmetic", "[cuda][optimizer]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  auto ps = make_params(seed);
  std::vector<cuda::ParamSlice> slices;
  for (auto& p : ps) slices.push_back(p->slice());
  for (int t = 1; t <= 4; ++t) {
    const auto s = adamw_scalars(t, 1e-3 * t, 0.9, 0.999, 1e-8, 0.01);
    cuda::adamw_step(slices, s, stream.context());
    for (auto& p : ps) adamw_reference(*p, s);
  }
  stream.synchronize();
  check_params(ps, true, true);
}

TEST_CASE("cuda optimizer uploads a slice table once per slice list", "[cuda][optimizer]") {
  if (no_cuda_device()) return;
  auto ps = make_params(fresh_seed());
  std::vector<cuda::ParamSlice> slices;
  for (auto& p : ps) slices.push_back(p->slice());
  cuda::Stream stream(0);
  const auto s = adamw_scalars(1, 1e-3, 0.9, 0.999, 1e-8, 0.0);
  cuda::adamw_step(slices, s, stream.context());
  const auto first = cuda::allocator_stats(0);
  cuda::adamw_step(slices, s, stream.context());  // same list: the cached table
  CHECK(cuda::allocator_stats(0).allocated_bytes == first.allocated_bytes);
  slices.pop_back();  // another list: a table of its own
  cuda::adamw_step(slices, s, stream.context());
  CHECK(cuda::allocator_stats(0).allocated_bytes > first.allocated_bytes);
  stream.synchronize();

  CHECK_THROWS_AS(cuda::adamw_step({cuda::ParamSlice{ps[0]->dp->ptr, ps[0]->dg->ptr, nullptr,
                                                      nullptr, 1}},
                                   s, stream.context()),
                  std::invalid_argument);  // adamw needs both slots
}
