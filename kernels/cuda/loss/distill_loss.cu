// The fused distillation loss on CUDA (see distill_loss.hpp) for float32 and bfloat16
// logits, modelled on llm.c's fused classifier; the kernels are in device/distill_loss.cuh,
// their launch shapes in launch_shapes.hpp. Here: argument checks, the queue's scratch, the
// launches and the one synchronization.
//
// Per call, on the queue's stream: one upload (label-check header, teacher pointers), the
// label check, the loss kernel (which writes nothing when a label is bad and reads the row
// count for the gradient scale on the device), the row sums, one download of header and
// sums, one host synchronization. A bad label throws after that synchronization, with
// nothing written, as on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/distill_loss.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/loss/distill_loss.hpp"
#include "kernels/cuda/loss/distill_loss_launch.cuh"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
using device::Args;
using device::kLog2e;

template <class T>
void check_args(const T* student, const T* const* teachers, int K, const std::int32_t* labels,
                std::int64_t N, std::int64_t V, const DistillLossParams& p) {
  if (N <= 0 || V <= 0 || N > INT32_MAX || V > INT32_MAX)
    throw std::invalid_argument("distill_loss (cuda): need 0 < N, V < 2^31, got N=" +
                                std::to_string(N) + " V=" + std::to_string(V));
  if (K < 0 || K > 4096)
    throw std::invalid_argument("distill_loss (cuda): K must be in [0, 4096], got " +
                                std::to_string(K));
  if (!(p.temperature > 0) || !std::isfinite(p.temperature))
    throw std::invalid_argument("distill_loss (cuda): temperature must be finite and > 0, got " +
                                std::to_string(p.temperature));
  if (!student || !labels)
    throw std::invalid_argument("distill_loss (cuda): null student or labels");
  for (int k = 0; k < K; ++k)
    if (!teachers || !teachers[k])
      throw std::invalid_argument("distill_loss (cuda): teacher " + std::to_string(k) + " is null");
}

bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

void queue_check_labels_t(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                          unsigned long long* header, cudaStream_t stream) {
  const auto check = shapes::check_labels(N);
  device::check_labels_kernel<<<check.grid.x, check.block.x, 0, stream>>>(labels, N, V, header);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void queue_sum_rows_t(const float* terms, std::int64_t N, double* sums, cudaStream_t stream) {
  const auto reduce = shapes::sum_rows();
  device::sum_rows_kernel<<<reduce.grid.x, reduce.block.x, 0, stream>>>(terms, N, sums);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

// The loss kernel over rows [0, N): teachers on the host (alignment), ptrs on the device.
template <class T>
void launch_loss(const T* student, const T* const* teachers, const T* const* ptrs, int K,
                 const std::int32_t* labels, T* grad, std::int64_t N, std::int64_t V,
                 const DistillLossParams& p, const unsigned long long* header, float* terms,
                 const Context& ctx, cudaStream_t stream) {
  const bool shared = K == 0 || p.temperature == 1.0;
  Args<T> args{student, ptrs, K, labels, grad, static_cast<int>(N), static_cast<int>(V), shared,
               kLog2e, shared ? kLog2e : static_cast<float>(1.4426950408889634 / p.temperature),
               static_cast<float>(p.temperature * p.temperature), p.hard_weight, p.weight,
               p.temperature, header, terms};
  bool teachers_aligned = true;
  for (int k = 0; k < K; ++k) teachers_aligned = teachers_aligned && aligned(teachers[k], 4 * sizeof(T));
  const bool vec = V % 4 == 0 && aligned(student, 4 * sizeof(T)) &&
                   aligned(grad, 4 * sizeof(T)) && teachers_aligned;
  const auto variant = shapes::distill_loss_variant(V, K, vec);
  const auto kernel = device::distill_kernel_for<T>(variant);
  const std::size_t smem = shapes::distill_loss_smem(variant, K);
  int per_sm = 1;
  CODISTILL_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, variant.threads, smem));
  const auto& info = detail::device_info(ctx.device);
  const auto shape = shapes::distill_loss(variant, N, V, K, sizeof(T),
                                          shapes::DeviceProps{info.sms, info.l2_bytes}, per_sm);
  kernel<<<shape.grid.x, shape.block.x, shape.smem, stream>>>(args);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

// Device scratch: 2 u64 header | 2 double sums | K teacher pointers | 2N float row terms.
// Pinned host: the upload (header init, unused sums, pointers) then the download (header,
// sums) at kDownload.
constexpr std::size_t kSums = 16, kPtrs = 32;

template <class T>
DistillLossResult run(const T* student, const T* const* teachers, int K,
                      const std::int32_t* labels, T* grad, std::int64_t N, std::int64_t V,
                      const DistillLossParams& p, const Context& ctx) {
  check_args(student, teachers, K, labels, N, V, p);
  auto& res = resources_of(ctx, "distill_loss");
  detail::use_device(ctx);
  const cudaStream_t stream = detail::stream_of(ctx);
  const std::size_t off_terms = kPtrs + 8 * static_cast<std::size_t>(K);
  auto* base = static_cast<char*>(res.scratch(off_terms + 8 * static_cast<std::size_t>(N)));
  auto* header = reinterpret_cast<unsigned long long*>(base);
  auto* sums = reinterpret_cast<double*>(base + kSums);
  auto* ptrs = reinterpret_cast<const T**>(base + kPtrs);
  auto* terms = reinterpret_cast<float*>(base + off_terms);
  // The host side of the scratch is idle here: the previous call ended with a sync.
  const std::size_t download = (off_terms + 15) / 16 * 16;
  auto* host = static_cast<char*>(res.pinned_scratch(download + 32));
  const unsigned long long init[2] = {0, static_cast<unsigned long long>(N)};
  std::memcpy(host, init, sizeof init);
  if (K > 0) std::memcpy(host + kPtrs, teachers, sizeof(T*) * K);
  CODISTILL_CUDA_CHECK(
      cudaMemcpyAsync(base, host, off_terms, cudaMemcpyHostToDevice, stream));

  queue_check_labels_t(labels, N, V, header, stream);
  launch_loss<T>(student, teachers, ptrs, K, labels, grad, N, V, p, header, terms, ctx, stream);
  queue_sum_rows_t(terms, N, sums, stream);
  CODISTILL_CUDA_CHECK(
      cudaMemcpyAsync(host + download, base, 32, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));

  unsigned long long got[2];
  double host_sums[2];
  std::memcpy(got, host + download, sizeof got);
  std::memcpy(host_sums, host + download + kSums, sizeof host_sums);
  if (got[1] < static_cast<unsigned long long>(N)) {  // the error path may wait once more
    std::int32_t bad = 0;
    CODISTILL_CUDA_CHECK(cudaMemcpy(&bad, labels + got[1], sizeof bad, cudaMemcpyDeviceToHost));
    throw std::out_of_range("distill_loss (cuda): row " + std::to_string(got[1]) + " has label " +
                            std::to_string(bad) + ", expected -1 (ignore) or a class in [0, " +
                            std::to_string(V) + ")");
  }
  DistillLossResult out;
  const auto rows = static_cast<std::int64_t>(got[0]);
  if (rows == 0) return out;  // every row ignored: zero gradient, no terms
  const double scale = 1.0 / static_cast<double>(rows);
  out.rows = rows;
  out.ce = host_sums[0] * scale;
  out.distill = host_sums[1] * scale;
  out.loss = p.hard_weight * out.ce + p.weight * out.distill;
  return out;
}

}  // namespace

namespace detail {

void queue_check_labels(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                        unsigned long long* header, const Context& ctx) {
  queue_check_labels_t(labels, N, V, header, stream_of(ctx));
}

void queue_distill_rows(const float* student, const float* const* teachers_host,
                        const float* const* teachers_dev, int K, const std::int32_t* labels,
                        float* grad, std::int64_t N, std::int64_t V,
                        const DistillLossParams& p, const unsigned long long* header,
                        float* row_terms, const Context& ctx) {
  check_args(student, teachers_host, K, labels, N, V, p);
  launch_loss<float>(student, teachers_host, teachers_dev, K, labels, grad, N, V, p, header,
                     row_terms, ctx, stream_of(ctx));
}

void queue_sum_rows(const float* row_terms, std::int64_t N, double* sums, const Context& ctx) {
  queue_sum_rows_t(row_terms, N, sums, stream_of(ctx));
}

}  // namespace detail

DistillLossResult distill_loss(const float* student, const float* const* teachers, int K,
                               const std::int32_t* labels, float* grad, std::int64_t N,
                               std::int64_t V, const DistillLossParams& p,
                               const Context& ctx) {
  return run<float>(student, teachers, K, labels, grad, N, V, p, ctx);
}

DistillLossResult distill_loss_bf16(const std::uint16_t* student,
                                    const std::uint16_t* const* teachers, int K,
                                    const std::int32_t* labels, std::uint16_t* grad,
                                    std::int64_t N, std::int64_t V,
                                    const DistillLossParams& p, const Context& ctx) {
  // Raw bf16 bits and __nv_bfloat16 have the same size and layout.
  static_assert(sizeof(bf16) == sizeof(std::uint16_t));
  return run<bf16>(reinterpret_cast<const bf16*>(student),
                   reinterpret_cast<const bf16* const*>(teachers), K, labels,
                   reinterpret_cast<bf16*>(grad), N, V, p, ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::expect;
using ops::f32;

DistillLossResult CudaBackend::distill_loss(const Tensor& student,
                                            const std::vector<const Tensor*>& teachers,
                                            const Tensor& labels, Tensor* grad,
                                            const DistillLossParams& p, kernels::Queue& q) {
  const char* op = "distill_loss";
  const DType dt = student.dtype();
  CudaQueue& cq = enter(q, Op::distill_loss, dt, op);
  if (student.ndim() != 2)
    throw std::invalid_argument("distill_loss (cuda): student logits must be [N, V], got " +
                                shape_str(student.shape()));
  const Device dev = cq.device();
  const std::int64_t N = student.dim(0), V = student.dim(1);
  expect(student, dev, dt, N * V, op, "student");
  for (const Tensor* t : teachers) {
    if (!t) throw std::invalid_argument("distill_loss (cuda): a teacher is null");
    expect(*t, dev, dt, N * V, op, "teacher");
  }
  ops::expect(dev, op, {{labels, N, "labels", DType::i32}, {grad, N * V, "grad", dt}});
  const auto K = static_cast<int>(teachers.size());
  const auto* y = static_cast<const std::int32_t*>(labels.raw());
  const cuda::Context ctx = cq.context();
  // The launcher validates the labels, runs the loss and waits for the result.
  if (dt == DType::bf16) {
    std::vector<const std::uint16_t*> ts;
    ts.reserve(teachers.size());
    for (const Tensor* t : teachers) ts.push_back(static_cast<const std::uint16_t*>(t->raw()));
    return cuda::distill_loss_bf16(static_cast<const std::uint16_t*>(student.raw()), ts.data(), K,
                                   y, grad ? static_cast<std::uint16_t*>(grad->raw()) : nullptr,
                                   N, V, p, ctx);
  }
  std::vector<const float*> ts;
  ts.reserve(teachers.size());
  for (const Tensor* t : teachers) ts.push_back(f32(*t));
  return cuda::distill_loss(f32(student), ts.data(), K, y, f32(grad), N, V, p, ctx);
}

}  // namespace codistill::kernels::cuda
