#pragma once
// A random distillation-loss problem for the [cuda] loss tests, its CPU reference, and the
// same problem on the device in float32 or bfloat16.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/distill_loss.hpp"
#include "kernels/cuda/distill_loss.hpp"

namespace codistill::test {

namespace cpu = codistill::kernels::cpu;

struct Problem {
  std::int64_t N, V;
  int K;
  std::vector<float> student;
  std::vector<std::vector<float>> teachers;
  std::vector<std::int32_t> labels;

  // bf16: every logit rounded to bfloat16, so that the float copies hold exactly the values
  // the bf16 kernel reads. Every fifth row is ignored (-1).
  Problem(std::int64_t n, std::int64_t v, int k, std::uint64_t seed, bool bf16 = false)
      : N(n), V(v), K(k) {
    student = random_vector<float>(N * V, seed, -6, 6);
    for (int i = 0; i < K; ++i)
      teachers.push_back(random_vector<float>(N * V, seed + 1 + i, -6, 6));
    if (bf16) {
      student = from_bf16(to_bf16(student));
      for (auto& t : teachers) t = from_bf16(to_bf16(t));
    }
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

// The problem on the device as T (float, or std::uint16_t holding bf16 bits). offset > 0
// shifts the student and the teachers off 16-byte alignment (the kernel's scalar path).
template <class T>
struct OnDevice {
  std::unique_ptr<DeviceVec<T>> student;
  std::vector<std::unique_ptr<DeviceVec<T>>> teachers;
  std::vector<const T*> tptr;
  DeviceVec<std::int32_t> labels;

  static std::vector<T> convert(const std::vector<float>& v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return to_bf16(v);
  }

  explicit OnDevice(const Problem& pb, std::size_t offset = 0) : labels(pb.labels) {
    student = std::make_unique<DeviceVec<T>>(convert(pb.student), offset);
    for (const auto& t : pb.teachers) {
      teachers.push_back(std::make_unique<DeviceVec<T>>(convert(t), offset));
      tptr.push_back(teachers.back()->ptr);
    }
  }

  // grad: device [N, V] of T, the student itself (in place) or null (forward only).
  cpu::DistillLossResult run(const Problem& pb, T* grad, const cpu::DistillLossParams& p) {
    if constexpr (std::is_same_v<T, float>)
      return kernels::cuda::distill_loss(student->ptr, tptr.data(), pb.K, labels.ptr, grad, pb.N,
                                         pb.V, p);
    else
      return kernels::cuda::distill_loss_bf16(student->ptr, tptr.data(), pb.K, labels.ptr, grad,
                                              pb.N, pb.V, p);
  }
};

inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-6); }

// Gradient error relative to the largest gradient entry (entries are mostly tiny).
inline double grad_error(const std::vector<float>& got, const std::vector<float>& want) {
  double big = 0;
  for (float w : want) big = std::max(big, std::abs(static_cast<double>(w)));
  return max_rel_error(got, want, std::max(big * 1e-2, 1e-30));
}

// The loss totals of a device run against the reference: within float32 accumulation.
inline void check_totals(const cpu::DistillLossResult& got, const cpu::DistillLossResult& want) {
  CHECK(got.rows == want.rows);
  CHECK(rel(got.loss, want.loss) < 1e-5);
  CHECK(rel(got.ce, want.ce) < 1e-5);
  CHECK(std::abs(got.distill - want.distill) < 1e-5 * std::max(1.0, want.distill));
}

}  // namespace codistill::test
