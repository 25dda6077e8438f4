#include "checkpoint/tensors.hpp"

#include <cstring>

namespace codistill::checkpoint {

std::size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::f32: return 4;
    case ElemType::f64: return 8;
    case ElemType::i64: return 8;
    case ElemType::u64: return 8;
    case ElemType::bf16: return 2;
  }
  throw std::logic_error("elem_size: bad element type");
}

const char* elem_name(ElemType t) {
  switch (t) {
    case ElemType::f32: return "float32";
    case ElemType::f64: return "float64";
    case ElemType::i64: return "int64";
    case ElemType::u64: return "uint64";
    case ElemType::bf16: return "bfloat16";
  }
  return "?";
}

TensorRef TensorRef::of(std::string name, const kernels::Tensor& t) {
  if (!t.device().is_cpu())
    throw std::invalid_argument("checkpoint tensor " + name + " is not on the CPU: copy it there first");
  ElemType type;
  switch (t.dtype()) {
    case kernels::DType::f32: type = ElemType::f32; break;
    case kernels::DType::f64: type = ElemType::f64; break;
    default:
      throw std::invalid_argument("checkpoint tensor " + name + " has dtype " + kernels::dtype_name(t.dtype()) +
                                  " (valid: float32, float64)");
  }
  return TensorRef{std::move(name), t.shape(), type, t.raw()};
}

TensorValue TensorValue::allocate(std::string name, kernels::Shape shape, ElemType type) {
  TensorValue v;
  v.name = std::move(name);
  v.type = type;
  switch (type) {
    case ElemType::f32: v.real = kernels::Tensor::zeros(shape, kernels::DType::f32); break;
    case ElemType::f64: v.real = kernels::Tensor::zeros(shape, kernels::DType::f64); break;
    case ElemType::i64: v.int64.assign(static_cast<std::size_t>(kernels::shape_numel(shape)), 0); break;
    case ElemType::u64: v.uint64.assign(static_cast<std::size_t>(kernels::shape_numel(shape)), 0); break;
    case ElemType::bf16: throw std::invalid_argument("tensor " + v.name + ": bfloat16 datasets are read as float32");
  }
  v.shape = std::move(shape);
  return v;
}

TensorValue TensorValue::copy_of(const TensorRef& ref) {
  TensorValue v = allocate(ref.name, ref.shape, ref.type);
  if (v.nbytes() > 0) std::memcpy(v.data(), ref.data, v.nbytes());
  return v;
}

TensorValue TensorValue::from_tensor(std::string name, kernels::Tensor t) {
  TensorRef ref = TensorRef::of(name, t);  // checks device and dtype
  TensorValue v;
  v.name = std::move(name);
  v.shape = t.shape();
  v.type = ref.type;
  v.real = std::move(t);
  return v;
}

void* TensorValue::data() {
  switch (type) {
    case ElemType::f32:
    case ElemType::f64: return real.raw();
    case ElemType::i64: return int64.data();
    case ElemType::u64: return uint64.data();
    case ElemType::bf16: break;  // never held (read() widens it)
  }
  return nullptr;
}

const void* TensorValue::data() const { return const_cast<TensorValue*>(this)->data(); }

}  // namespace codistill::checkpoint
