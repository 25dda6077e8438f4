#pragma once
// Runs the CUDA fused loss (kernels/cuda/device/distill_loss.cuh) under the SIMT executor
// the way distill_loss.cu launches it: header upload, check_labels_kernel, the variant and
// grid of launch_shapes.hpp, distill_loss_kernel, sum_rows_kernel, and the host's reading
// of the result.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/loss/distill_loss.hpp"
#include "kernels/cuda/device/distill_loss.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "simt/executor.hpp"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace codistill::test::simt_kernels {

namespace dev = kernels::cuda::device;

struct LossRun {
  kernels::DistillLossResult result;
  std::uint64_t bad_row = 0;  // N when every label is valid
  shapes::DistillVariant variant;
  shapes::Launch launch;
};

inline bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

template <class T>
LossRun run_loss(const T* student, const std::vector<const T*>& teachers,
                 const std::int32_t* labels, T* grad, std::int64_t N, std::int64_t V,
                 const kernels::DistillLossParams& p, const shapes::DeviceProps& props,
                 std::uint64_t seed) {
  const int K = static_cast<int>(teachers.size());
  simt::DeviceBuffer<unsigned long long> header(
      std::vector<unsigned long long>{0, static_cast<unsigned long long>(N)});
  simt::DeviceBuffer<double> sums(2);
  simt::DeviceBuffer<const T*> ptrs(teachers);
  simt::DeviceBuffer<float> terms(static_cast<std::size_t>(2 * N));

  const auto check = shapes::check_labels(N);
  simt::launch(dev::check_labels_kernel, config(check, seed), labels, N, V, header.data());

  bool vec = V % 4 == 0 && aligned(student, 4 * sizeof(T)) && aligned(grad, 4 * sizeof(T));
  for (const T* t : teachers) vec = vec && aligned(t, 4 * sizeof(T));
  LossRun run;
  run.variant = shapes::distill_loss_variant(V, K, vec);
  const auto kernel = dev::distill_kernel_for<T>(run.variant);
  if (!kernel) throw std::logic_error("run_loss: no kernel for the chosen variant");
  const bool shared = K == 0 || p.temperature == 1.0;
  const dev::Args<T> args{student, ptrs.data(), K, labels, grad, static_cast<int>(N),
                          static_cast<int>(V), shared, dev::kLog2e,
                          shared ? dev::kLog2e : static_cast<float>(1.4426950408889634 / p.temperature),
                          static_cast<float>(p.temperature * p.temperature), p.hard_weight, p.weight,
                          p.temperature, header.data(), terms.data()};
  const std::size_t smem = shapes::distill_loss_smem(run.variant, K);
  const int occ = occupancy(run.variant.threads, smem, sizeof(dev::Stat) * 32 + 4 * 32);
  run.launch = shapes::distill_loss(run.variant, N, V, K, sizeof(T), props, occ);
  simt::launch(kernel, config(run.launch, seed), args);
  simt::launch(dev::sum_rows_kernel, config(shapes::sum_rows(), seed), terms.data(), N,
               sums.data());

  const auto h = header.download();
  const auto s = sums.download();
  run.bad_row = h[1];
  if (h[1] < static_cast<unsigned long long>(N) || h[0] == 0) return run;
  const double scale = 1.0 / static_cast<double>(h[0]);
  run.result.rows = static_cast<std::int64_t>(h[0]);
  run.result.ce = s[0] * scale;
  run.result.distill = s[1] * scale;
  run.result.loss = p.hard_weight * run.result.ce + p.weight * run.result.distill;
  return run;
}

}  // namespace codistill::test::simt_kernels
