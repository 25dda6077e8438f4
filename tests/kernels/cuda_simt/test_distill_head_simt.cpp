// The fused loss kernels as the fused linear + distillation head
// (kernels/cuda/loss/distill_head.cu) launches them, under the SIMT executor:
// check_labels_kernel once over the whole batch, then distill_loss_kernel once per chunk of
// rows — on the chunk's rows of the logits, labels and row terms, with the batch's header, so
// its gradient scale is 1 / (rows counted in the whole batch) — then sum_rows_kernel over
// every row. Against the CPU reference of the loss over the whole batch at once: the chunks
// must add up to exactly that loss and gradient. Chunk sizes that do not divide N, chunks of
// ignored rows only, K = 0, 1, 4, launch variants from a warp per row to a 1024-thread block
// per row.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/loss/distill_loss.hpp"
#include "kernels/cuda/device/distill_loss.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/plans/distill_head_plan.hpp"
#include "simt/executor.hpp"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
namespace plans = kernels::cuda::plans;

struct ChunkedRun {
  kernels::DistillLossResult result;
  std::vector<float> grad;  // [N, V], written chunk by chunk in place of the student's logits
};

// The head's sequence of launches over logits already computed for the whole batch (the
// head computes each chunk's just before its loss; the kernels see the same rows either way).
ChunkedRun run_chunked(const std::vector<float>& student, const std::vector<std::vector<float>>& teachers,
                       const std::vector<std::int32_t>& labels, std::int64_t N, std::int64_t V,
                       std::int64_t chunk, const kernels::DistillLossParams& p, std::uint64_t seed) {
  const int K = static_cast<int>(teachers.size());
  simt::DeviceBuffer<unsigned long long> header(std::vector<unsigned long long>{0, static_cast<unsigned long long>(N)});
  simt::DeviceBuffer<double> sums(2);
  simt::DeviceBuffer<float> terms(static_cast<std::size_t>(2 * N));
  simt::DeviceBuffer<std::int32_t> y(labels);
  simt::DeviceBuffer<float> z(student);  // gradient in place, as the head does
  std::vector<std::unique_ptr<simt::DeviceBuffer<float>>> t;
  for (const auto& tk : teachers) t.push_back(std::make_unique<simt::DeviceBuffer<float>>(tk));
  simt::launch(dev::check_labels_kernel, config(shapes::check_labels(N), seed), y.data(), N, V, header.data());

  const bool shared = K == 0 || p.temperature == 1.0;
  for (const plans::HeadChunk& c : plans::head_chunks(N, chunk)) {
    std::vector<const float*> rows_of;  // the chunk's rows of each teacher
    for (auto& tk : t) rows_of.push_back(tk->data() + c.row0 * V);
    simt::DeviceBuffer<const float*> ptrs(rows_of);
    float* zc = z.data() + c.row0 * V;
    bool vec = V % 4 == 0;  // rows start at multiples of V: aligned when V % 4 == 0
    const auto variant = shapes::distill_loss_variant(V, K, vec);
    const auto kernel = dev::distill_kernel_for<float>(variant);
    REQUIRE(kernel);
    dev::Args<float> args{zc, ptrs.data(), K, y.data() + c.row0, zc, static_cast<int>(c.rows), static_cast<int>(V),
                          shared, dev::kLog2e,
                          shared ? dev::kLog2e : static_cast<float>(1.4426950408889634 / p.temperature),
                          static_cast<float>(p.temperature * p.temperature), p.hard_weight, p.weight,
                          p.temperature, header.data(), terms.data() + 2 * c.row0};
    const std::size_t smem = shapes::distill_loss_smem(variant, K);
    const int occ = occupancy(variant.threads, smem, sizeof(dev::Stat) * 32 + 4 * 32);
    const auto launch = shapes::distill_loss(variant, c.rows, V, K, sizeof(float), kT4, occ);
    simt::launch(kernel, config(launch, seed + static_cast<std::uint64_t>(c.row0)), args);
  }
  simt::launch(dev::sum_rows_kernel, config(shapes::sum_rows(), seed), terms.data(), N, sums.data());

  ChunkedRun run;
  const auto h = header.download();
  const auto s = sums.download();
  REQUIRE(h[1] == static_cast<unsigned long long>(N));  // every label valid
  run.result.rows = static_cast<std::int64_t>(h[0]);
  run.result.ce = s[0] / static_cast<double>(h[0]);
  run.result.distill = s[1] / static_cast<double>(h[0]);
  run.result.loss = p.hard_weight * run.result.ce + p.weight * run.result.distill;
  run.grad = z.download();
  return run;
}

}  // namespace

TEST_CASE("the fused loss kernels on chunks of a batch add up to the loss over the whole batch",
          "[simt][distill_head]") {
  struct Shape {
    std::int64_t N, V, chunk;
    int K;
    double T;
  };
  // V: a warp per row (small), block-per-row variants (4000, 12000, 33333 not a multiple of 4).
  const Shape shapes_[] = {{7, 33, 3, 1, 2.0},   {10, 257, 4, 0, 1.0},   {9, 4000, 2, 4, 2.0},
                           {5, 12000, 2, 1, 4.0}, {4, 33333, 3, 4, 1.0}, {13, 100, 13, 4, 2.0}};
  for (const Shape& sh : shapes_)
    for (std::uint64_t seed : {kSeeds[0], kSeeds[3]}) {
      const std::int64_t N = sh.N, V = sh.V;
      INFO("N=" << N << " V=" << V << " chunk=" << sh.chunk << " K=" << sh.K << " T=" << sh.T << " seed " << seed);
      const auto student = random_floats(static_cast<std::size_t>(N * V), seed, -4, 4);
      std::vector<std::vector<float>> teachers;
      for (int k = 0; k < sh.K; ++k)
        teachers.push_back(random_floats(static_cast<std::size_t>(N * V), seed + 10 + static_cast<std::uint64_t>(k), -3, 3));
      // Every third row ignored, and the first chunk's rows all ignored.
      std::vector<std::int32_t> labels(static_cast<std::size_t>(N));
      for (std::int64_t r = 0; r < N; ++r)
        labels[static_cast<std::size_t>(r)] =
            (r % 3 == 1 || (r < sh.chunk && sh.chunk < N)) ? -1 : static_cast<std::int32_t>((r * 7919 + seed) % V);
      const kernels::DistillLossParams p{sh.T, 0.7, 1.3};

      std::vector<const float*> tp;
      for (const auto& tk : teachers) tp.push_back(tk.data());
      std::vector<float> want(static_cast<std::size_t>(N * V));
      const auto ref = kernels::cpu::distill_loss<float>(student.data(), tp.data(), sh.K, labels.data(), want.data(),
                                                         N, V, p, kernels::cpu::Impl::reference);
      const ChunkedRun got = run_chunked(student, teachers, labels, N, V, sh.chunk, p, seed);
      CHECK(got.result.rows == ref.rows);
      CHECK(got.result.ce == Approx(ref.ce).epsilon(1e-5));
      CHECK(got.result.distill == Approx(ref.distill).epsilon(1e-5).margin(1e-6));
      CHECK(got.result.loss == Approx(ref.loss).epsilon(1e-5));
      CHECK(scaled_error(got.grad, want) <= 1e-5);
      for (std::int64_t r = 0; r < N; ++r)  // ignored rows: exactly zero
        if (labels[static_cast<std::size_t>(r)] == -1)
          CHECK(std::all_of(got.grad.begin() + r * V, got.grad.begin() + (r + 1) * V, [](float g) { return g == 0.0f; }));
    }
}
