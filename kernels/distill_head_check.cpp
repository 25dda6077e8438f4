// Shape checks of Backend::linear_distill_head, shared by every backend (the op is called
// directly by a head module or a benchmark, with no layer in front to validate it).
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace codistill::kernels {
namespace {

[[noreturn]] void fail(const char* backend, const std::string& why) {
  throw std::invalid_argument(std::string("linear_distill_head (") + backend + "): " + why);
}

void expect(const Tensor& t, const Shape& want, DType dtype, const char* backend, const std::string& name) {
  if (t.shape() != want || t.dtype() != dtype)
    fail(backend, name + " is " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) + ", expected " +
                      shape_str(want) + " " + dtype_name(dtype));
}

}  // namespace

void check_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                        const std::vector<HeadTeacher>& teachers, const Tensor& labels, const Tensor* dhidden,
                        const Tensor* dweight, const Tensor* dbias, const char* backend) {
  if (hidden.ndim() != 2 || weight.ndim() != 2)
    fail(backend, "hidden must be [N, H] and weight [V, H], got " + shape_str(hidden.shape()) + " and " +
                      shape_str(weight.shape()));
  const DType dt = hidden.dtype();
  const std::int64_t N = hidden.dim(0), H = hidden.dim(1), V = weight.dim(0);
  expect(weight, {V, H}, dt, backend, "weight");
  if (bias) expect(*bias, {V}, dt, backend, "bias");
  expect(labels, {N}, DType::i32, backend, "labels");
  if (dhidden) expect(*dhidden, {N, H}, dt, backend, "dhidden");
  if (dweight) expect(*dweight, {V, H}, dt, backend, "dweight");
  if (dbias) expect(*dbias, {V}, dt, backend, "dbias");
  for (std::size_t k = 0; k < teachers.size(); ++k) {
    const HeadTeacher& t = teachers[k];
    const std::string name = "teacher " + std::to_string(k);
    if (!t.hidden || !t.weight) fail(backend, name + " has a null hidden or weight");
    if (t.hidden->ndim() != 2 || t.hidden->dim(0) != N)
      fail(backend, name + "'s hidden is " + shape_str(t.hidden->shape()) + ", expected [" + std::to_string(N) +
                        ", H_k]");
    const std::int64_t Hk = t.hidden->dim(1);
    expect(*t.hidden, {N, Hk}, dt, backend, name + "'s hidden");
    // A teacher's weight may be held as bf16 beside float32 activations (Op::
    // linear_distill_head_bf16_teachers; the backend's entry checks it supports that).
    const bool bf16_weight = dt == DType::f32 && t.weight->dtype() == DType::bf16;
    expect(*t.weight, {V, Hk}, bf16_weight ? DType::bf16 : dt, backend, name + "'s weight");
    if (t.bias) expect(*t.bias, {V}, dt, backend, name + "'s bias");
  }
}

}  // namespace codistill::kernels
