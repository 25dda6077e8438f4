// The CUDA fused distillation loss against the CPU reference, on fresh random inputs:
// rows not a multiple of the block size, V up to 131072, K up to 4, gradients poisoned
// first, in place and out of place, forward only; bad labels and all-ignored batches.
// Without a CUDA device every case prints "skipped: no CUDA device" (CTest: skipped).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/distill_loss.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/memory.hpp"
#include "support/test_util.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

bool no_device() {
  if (cuda::device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("skipped: no CUDA device");
  return true;
}

// A device copy of a host vector, freed on scope exit.
template <class T>
struct DeviceVec {
  std::size_t n;
  T* ptr;
  explicit DeviceVec(const std::vector<T>& host)
      : n(host.size()), ptr(static_cast<T*>(cuda::device_malloc(n * sizeof(T), 0))) {
    cuda::memcpy_host_to_device(ptr, host.data(), n * sizeof(T), 0);
  }
  ~DeviceVec() { cuda::device_free(ptr, 0); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  std::vector<T> host() const {
    std::vector<T> out(n);
    cuda::memcpy_device_to_host(out.data(), ptr, n * sizeof(T), 0);
    return out;
  }
};

struct Problem {
  std::int64_t N, V;
  int K;
  std::vector<float> student;
  std::vector<std::vector<float>> teachers;
  std::vector<std::int32_t> labels;

  Problem(std::int64_t n, std::int64_t v, int k, std::uint64_t seed) : N(n), V(v), K(k) {
    student = random_vector<float>(N * V, seed, -6, 6);
    for (int i = 0; i < K; ++i)
      teachers.push_back(random_vector<float>(N * V, seed + 1 + i, -6, 6));
    std::mt19937_64 gen(seed + 99);
    for (std::int64_t r = 0; r < N; ++r)
      labels.push_back(r % 5 == 3 ? -1 : static_cast<std::int32_t>(gen() % V));
  }
  cpu::DistillLossResult reference(std::vector<float>& grad,
                                   const cpu::DistillLossParams& p) const {
    std::vector<const float*> tp;
    for (const auto& t : teachers) tp.push_back(t.data());
    grad = poisoned<float>(N * V);
    return cpu::distill_loss(student.data(), tp.data(), K, labels.data(), grad.data(), N, V, p,
                             cpu::Impl::reference);
  }
};

// The problem on the device, run with grad out of place, in place or absent.
struct OnDevice {
  DeviceVec<float> student;
  std::vector<std::unique_ptr<DeviceVec<float>>> teachers;
  std::vector<const float*> tptr;
  DeviceVec<std::int32_t> labels;
  explicit OnDevice(const Problem& pb) : student(pb.student), labels(pb.labels) {
    for (const auto& t : pb.teachers) {
      teachers.push_back(std::make_unique<DeviceVec<float>>(t));
      tptr.push_back(teachers.back()->ptr);
    }
  }
  cpu::DistillLossResult run(const Problem& pb, float* grad, const cpu::DistillLossParams& p) {
    return cuda::distill_loss(student.ptr, tptr.data(), pb.K, labels.ptr, grad, pb.N, pb.V, p);
  }
};

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-6); }

double grad_error(const std::vector<float>& got, const std::vector<float>& want) {
  double big = 0;
  for (float w : want) big = std::max(big, std::abs(static_cast<double>(w)));
  return max_rel_error(got, want, std::max(big * 1e-2, 1e-30));
}

}  // namespace

TEST_CASE("cuda distill_loss matches the CPU reference", "[cuda][distill_loss]") {
  if (no_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {7, 33}, {300, 257}, {37, 1000}, {5, 33333}, {3, 131072}};
  for (auto [N, V] : shapes)
    for (int K : {0, 1, 2, 4})
      for (double temp : {1.0, 2.5}) {
        INFO("N " << N << " V " << V << " K " << K << " T " << temp);
        const Problem pb(N, V, K, seed + N * 7 + V + K);
        const cpu::DistillLossParams p{temp, 0.7, 1.3};
        std::vector<float> want;
        const auto ref = pb.reference(want, p);
        OnDevice dev(pb);

        DeviceVec<float> grad(poisoned<float>(N * V));  // out of place
        const auto out = dev.run(pb, grad.ptr, p);
        CHECK(out.rows == ref.rows);
        CHECK(rel(out.loss, ref.loss) < 1e-5);
        CHECK(rel(out.ce, ref.ce) < 1e-5);
        CHECK(std::abs(out.distill - ref.distill) < 1e-5 * std::max(1.0, ref.distill));
        CHECK(grad_error(grad.host(), want) < 1e-4);

        const auto fwd = dev.run(pb, nullptr, p);  // forward only
        CHECK(fwd.loss == out.loss);

        const auto in = dev.run(pb, dev.student.ptr, p);  // in place: student becomes grad
        CHECK(in.loss == out.loss);
        CHECK(dev.student.host() == grad.host());
      }
}

TEST_CASE("cuda distill_loss is deterministic", "[cuda][distill_loss]") {
  if (no_device()) return;
  const Problem pb(129, 5000, 3, fresh_seed());
  OnDevice dev(pb);
  DeviceVec<float> g1(poisoned<float>(pb.N * pb.V)), g2(poisoned<float>(pb.N * pb.V));
  const cpu::DistillLossParams p{2.0, 1.0, 1.0};
  CHECK(dev.run(pb, g1.ptr, p).loss == dev.run(pb, g2.ptr, p).loss);
  CHECK(g1.host() == g2.host());
}

TEST_CASE("cuda distill_loss rejects bad labels before writing", "[cuda][distill_loss]") {
  if (no_device()) return;
  Problem pb(40, 100, 2, fresh_seed());
  pb.labels[17] = 100;
  OnDevice dev(pb);
  DeviceVec<float> grad(std::vector<float>(pb.N * pb.V, 42.0f));
  const cpu::DistillLossParams p{2.0, 1.0, 1.0};
  CHECK_THROWS_AS(dev.run(pb, grad.ptr, p), std::out_of_range);
  CHECK_THROWS_WITH(dev.run(pb, grad.ptr, p),
                    Catch::Matchers::Contains("row 17") && Catch::Matchers::Contains("label 100"));
  CHECK(grad.host() == std::vector<float>(pb.N * pb.V, 42.0f));
  CHECK_THROWS_AS(dev.run(pb, grad.ptr, cpu::DistillLossParams{0.0, 1.0, 1.0}),
                  std::invalid_argument);
}

TEST_CASE("cuda distill_loss with every row ignored is zero", "[cuda][distill_loss]") {
  if (no_device()) return;
  Problem pb(9, 300, 1, fresh_seed());
  std::fill(pb.labels.begin(), pb.labels.end(), -1);
  OnDevice dev(pb);
  DeviceVec<float> grad(poisoned<float>(pb.N * pb.V));
  const auto res = dev.run(pb, grad.ptr, cpu::DistillLossParams{2.0, 1.0, 1.0});
  CHECK(res.rows == 0);
  CHECK(res.loss == 0.0);
  CHECK(grad.host() == std::vector<float>(pb.N * pb.V, 0.0f));
}

TEST_CASE("cuda distill_loss in a build without CUDA says so", "[cuda][distill_loss]") {
  if (cuda::built_with_cuda()) {
    if (no_device()) return;
    SUCCEED("built with CUDA: covered by the cases above");
    return;
  }
  const float z[2] = {0.0f, 1.0f};
  const std::int32_t y[1] = {1};
  float g[2];
  CHECK_THROWS_WITH(cuda::distill_loss(z, nullptr, 0, y, g, 1, 2, cpu::DistillLossParams{}),
                    Catch::Matchers::Contains("built without CUDA"));
}
