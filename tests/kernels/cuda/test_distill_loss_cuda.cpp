// The CUDA fused distillation loss (float32) against the CPU reference, on fresh random
// inputs: rows not a multiple of the block size, V from 1 to 131072 (every launch shape,
// vector and scalar loads: V % 4 != 0 and unaligned rows), K 0..4 and many teachers,
// T in {1, 2, 4}, ignored rows, gradients poisoned first, in place and out of place,
// forward only; bad labels and all-ignored batches. The bf16 variant has its own file.
// Without a CUDA device every case prints "skipped: no CUDA device" (CTest: skipped).
#include <string>
#include <vector>

#include "distill_test_util.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

// One problem, all three ways of running it, against the reference.
void check_problem(const Problem& pb, const cpu::DistillLossParams& p, std::size_t offset = 0) {
  std::vector<float> want;
  const auto ref = pb.reference(want, p);
  OnDevice<float> dev(pb, offset);

  DeviceVec<float> grad(poisoned<float>(pb.N * pb.V), offset);  // out of place
  const auto out = dev.run(pb, grad.ptr, p);
  check_totals(out, ref);
  CHECK(grad_error(grad.host(), want) < 1e-4);

  const auto fwd = dev.run(pb, nullptr, p);  // forward only
  CHECK(fwd.loss == out.loss);

  const auto in = dev.run(pb, dev.student->ptr, p);  // in place: student becomes grad
  CHECK(in.loss == out.loss);
  CHECK(dev.student->host() == grad.host());
}

}  // namespace

TEST_CASE("cuda distill_loss matches the CPU reference", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1},    {7, 33},     {300, 257}, {37, 1000},  {9, 4000},   {4, 4001},
      {6, 12000}, {3, 12001}, {5, 33333}, {40, 32768}, {3, 131072}};
  for (auto [N, V] : shapes)
    for (int K : {0, 1, 2, 3, 4})
      for (double temp : {1.0, 2.0, 4.0}) {
        INFO("N " << N << " V " << V << " K " << K << " T " << temp);
        const Problem pb(N, V, K, seed + N * 7 + V + K);
        check_problem(pb, cpu::DistillLossParams{temp, 0.7, 1.3});
      }
}

TEST_CASE("cuda distill_loss on unaligned rows and with many teachers", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (std::int64_t V : {1000, 32768}) {  // V % 4 == 0, but the rows start off 16 bytes
    INFO("unaligned V " << V);
    check_problem(Problem(11, V, 2, seed + V), cpu::DistillLossParams{2.0, 1.0, 1.0}, 1);
  }
  for (std::int64_t V : {100, 3000}) {  // more teacher statistics than the warp shape holds
    INFO("K 300 V " << V);
    check_problem(Problem(5, V, 300, seed + 2 * V), cpu::DistillLossParams{3.0, 0.5, 1.0});
  }
}

TEST_CASE("cuda distill_loss is deterministic", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  const Problem pb(129, 5000, 3, fresh_seed());
  OnDevice<float> dev(pb);
  DeviceVec<float> g1(poisoned<float>(pb.N * pb.V)), g2(poisoned<float>(pb.N * pb.V));
  const cpu::DistillLossParams p{2.0, 1.0, 1.0};
  CHECK(dev.run(pb, g1.ptr, p).loss == dev.run(pb, g2.ptr, p).loss);
  CHECK(g1.host() == g2.host());
}

TEST_CASE("cuda distill_loss rejects bad labels before writing", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  Problem pb(40, 100, 2, fresh_seed());
  pb.labels[17] = 100;
  OnDevice<float> dev(pb);
  DeviceVec<float> grad(std::vector<float>(pb.N * pb.V, 42.0f));
  const cpu::DistillLossParams p{2.0, 1.0, 1.0};
  CHECK_THROWS_AS(dev.run(pb, grad.ptr, p), std::out_of_range);
  CHECK_THROWS_WITH(dev.run(pb, grad.ptr, p),
                    Catch::Matchers::Contains("row 17") && Catch::Matchers::Contains("label 100"));
  CHECK(grad.host() == std::vector<float>(pb.N * pb.V, 42.0f));
  const auto student = pb.student;
  CHECK_THROWS_AS(dev.run(pb, dev.student->ptr, p), std::out_of_range);  // in place too
  CHECK(dev.student->host() == student);
  CHECK_THROWS_AS(dev.run(pb, grad.ptr, cpu::DistillLossParams{0.0, 1.0, 1.0}),
                  std::invalid_argument);
}

TEST_CASE("cuda distill_loss with every row ignored is zero", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  Problem pb(9, 300, 1, fresh_seed());
  std::fill(pb.labels.begin(), pb.labels.end(), -1);
  OnDevice<float> dev(pb);
  DeviceVec<float> grad(poisoned<float>(pb.N * pb.V));
  const auto res = dev.run(pb, grad.ptr, cpu::DistillLossParams{2.0, 1.0, 1.0});
  CHECK(res.rows == 0);
  CHECK(res.loss == 0.0);
  CHECK(grad.host() == std::vector<float>(pb.N * pb.V, 0.0f));
}

TEST_CASE("cuda distill_loss in a build without CUDA says so", "[cuda][distill_loss]") {
  if (cuda::built_with_cuda()) {
    if (no_cuda_device()) return;
    SUCCEED("built with CUDA: covered by the cases above");
    return;
  }
  const float z[2] = {0.0f, 1.0f};
  const std::int32_t y[1] = {1};
  float g[2];
  CHECK_THROWS_WITH(cuda::distill_loss(z, nullptr, 0, y, g, 1, 2, cpu::DistillLossParams{}),
                    Catch::Matchers::Contains("built without CUDA"));
}
