#pragma once
// Named tensors as the checkpoint format sees them: a name, a row-major shape, an element
// type and bytes. Writing takes borrowed views (TensorRef: the writer never copies);
// reading returns owning values (TensorValue).
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace codistill::checkpoint {

// Element types of checkpoint datasets. kernels::DType has no integers, and /state needs
// them (RNG words, epoch, cursor), so the format keeps its own small enum. bf16 (bfloat16,
// the upper half of a float32) exists only in files: teacher files may store /params and
// /buffers in it (WriteOptions::model_type); read() widens it to float32, exactly, so no
// TensorRef or TensorValue ever holds it.
enum class ElemType : std::uint8_t { f32, f64, i64, u64, bf16 };

std::size_t elem_size(ElemType t);
const char* elem_name(ElemType t);  // "float32", "float64", "int64", "uint64", "bfloat16"

template <class T> constexpr ElemType elem_type_of();
template <> constexpr ElemType elem_type_of<float>() { return ElemType::f32; }
template <> constexpr ElemType elem_type_of<double>() { return ElemType::f64; }
template <> constexpr ElemType elem_type_of<std::int64_t>() { return ElemType::i64; }
template <> constexpr ElemType elem_type_of<std::uint64_t>() { return ElemType::u64; }

// A borrowed, read-only view: `data` must stay valid and unchanged until write() returns.
struct TensorRef {
  std::string name;  // "fc1/weight": the path under its section's group
  kernels::Shape shape;
  ElemType type = ElemType::f32;
  const void* data = nullptr;

  std::int64_t numel() const { return kernels::shape_numel(shape); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * elem_size(type); }

  // A view of a CPU float32/float64 tensor (a CUDA tensor must be copied to the CPU first:
  // throws std::invalid_argument).
  static TensorRef of(std::string name, const kernels::Tensor& t);
  template <class T>
  static TensorRef of(std::string name, kernels::Shape shape, const T* data) {
    return TensorRef{std::move(name), std::move(shape), elem_type_of<T>(), data};
  }
  // A 1-D view of a vector, e.g. the four words of an RNG state.
  template <class T>
  static TensorRef of(std::string name, const std::vector<T>& v) {
    return of<T>(std::move(name), {static_cast<std::int64_t>(v.size())}, v.data());
  }
};

// An owning tensor read from a checkpoint. float32/float64 data lives in `real` (a CPU
// kernels::Tensor, so that parameters load with no further copy); int64/uint64 in `int64`
// or `uint64`. Exactly one of the three holds the data, according to `type`.
struct TensorValue {
  std::string name;
  kernels::Shape shape;
  ElemType type = ElemType::f32;
  kernels::Tensor real;
  std::vector<std::int64_t> int64;
  std::vector<std::uint64_t> uint64;

  // Zero-filled storage of the right kind for shape and type.
  static TensorValue allocate(std::string name, kernels::Shape shape, ElemType type);
  // A deep copy of a view (e.g. a snapshot taken for an asynchronous write).
  static TensorValue copy_of(const TensorRef& ref);
  // Takes a CPU float32/float64 tensor as it is (no copy): a GPU parameter snapshots as
  // from_tensor(path, t.to(kernels::Device::cpu())), a CPU one as from_tensor(path, t.clone()).
  static TensorValue from_tensor(std::string name, kernels::Tensor t);

  std::int64_t numel() const { return kernels::shape_numel(shape); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * elem_size(type); }
  void* data();
  const void* data() const;
  TensorRef ref() const { return TensorRef{name, shape, type, data()}; }

  // Typed access; throws std::invalid_argument when T does not match `type`.
  template <class T>
  std::span<const T> values() const {
    if (elem_type_of<T>() != type)
      throw std::invalid_argument("tensor " + name + " holds " + elem_name(type) + ", not " +
                                  elem_name(elem_type_of<T>()));
    return {static_cast<const T*>(data()), static_cast<std::size_t>(numel())};
  }
};

}  // namespace codistill::checkpoint
