// The CUDA fused distillation loss on bfloat16 logits against the CPU reference run on the
// same values in float32: the totals within float32 accumulation (the kernel computes in
// float32), the bf16 gradient within bf16 rounding (1e-2); separate and in-place gradients
// agree bit for bit; ignored rows get zero gradients; bad labels throw before writing.
// Without a CUDA device every case prints "skipped: no CUDA device" (CTest: skipped).
#include <vector>

#include "distill_test_util.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

const std::uint16_t kBf16NaN = 0x7fc0;

std::vector<std::uint16_t> poisoned_bf16(std::size_t n) {
  return std::vector<std::uint16_t>(n, kBf16NaN);
}

}  // namespace

TEST_CASE("cuda distill_loss_bf16 matches the CPU reference", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {7, 33}, {37, 1000}, {9, 4000}, {6, 12001}, {5, 33333}, {40, 32768}, {3, 131072}};
  for (auto [N, V] : shapes)
    for (int K : {0, 1, 2, 3, 4})
      for (double temp : {1.0, 2.0, 4.0}) {
        INFO("N " << N << " V " << V << " K " << K << " T " << temp);
        const Problem pb(N, V, K, seed + N * 7 + V + K, /*bf16=*/true);
        const cpu::DistillLossParams p{temp, 0.7, 1.3};
        std::vector<float> want;
        const auto ref = pb.reference(want, p);
        OnDevice<std::uint16_t> dev(pb);

        DeviceVec<std::uint16_t> grad(poisoned_bf16(N * V));
        const auto out = dev.run(pb, grad.ptr, p);
        check_totals(out, ref);
        const auto got = grad.host();
        CHECK(grad_error(from_bf16(got), want) < 1e-2);
        for (std::int64_t r = 0; r < N; ++r)  // ignored rows: exactly zero
          if (pb.labels[r] == -1)
            CHECK(std::vector<std::uint16_t>(got.begin() + r * V, got.begin() + (r + 1) * V) ==
                  std::vector<std::uint16_t>(V, 0));

        CHECK(dev.run(pb, nullptr, p).loss == out.loss);  // forward only
        const auto in = dev.run(pb, dev.student->ptr, p);  // in place
        CHECK(in.loss == out.loss);
        CHECK(dev.student->host() == got);
      }
}

TEST_CASE("cuda distill_loss_bf16 on unaligned rows", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (std::int64_t V : {1000, 32768}) {
    INFO("V " << V);
    const Problem pb(11, V, 2, seed + V, true);
    const cpu::DistillLossParams p{2.0, 1.0, 1.0};
    std::vector<float> want;
    const auto ref = pb.reference(want, p);
    OnDevice<std::uint16_t> dev(pb, 1);  // 2 bytes past an aligned start
    DeviceVec<std::uint16_t> grad(poisoned_bf16(pb.N * V), 1);
    check_totals(dev.run(pb, grad.ptr, p), ref);
    CHECK(grad_error(from_bf16(grad.host()), want) < 1e-2);
  }
}

TEST_CASE("cuda distill_loss_bf16 rejects bad labels before writing", "[cuda][distill_loss]") {
  if (no_cuda_device()) return;
  Problem pb(40, 100, 1, fresh_seed(), true);
  pb.labels[3] = -2;
  OnDevice<std::uint16_t> dev(pb);
  const auto before = dev.student->host();
  CHECK_THROWS_WITH(dev.run(pb, dev.student->ptr, cpu::DistillLossParams{}),
                    Catch::Matchers::Contains("row 3") && Catch::Matchers::Contains("label -2"));
  CHECK(dev.student->host() == before);
}
