#include "codistill/nn/arena.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace codistill {

using kernels::Tensor;

namespace {

constexpr std::int64_t kAlign = 16;  // elements: 64 bytes of float32, 128 of float64

std::vector<ArenaEntry> lay_out(const std::vector<std::pair<std::string, kernels::Shape>>& items, std::int64_t& total) {
  std::vector<ArenaEntry> out;
  total = 0;
  for (const auto& [path, shape] : items) {
    ArenaEntry e{path, shape, total, kernels::shape_numel(shape)};
    total += (e.numel + kAlign - 1) / kAlign * kAlign;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

void ParamArena::build(Module& root) {
  auto params = collect_params(root);
  auto buffers = collect_buffers(root);
  std::vector<std::pair<std::string, kernels::Shape>> p_items, b_items;
  for (auto& p : params) {
    if (p.value->dtype() != params.front().value->dtype() || p.value->device() != params.front().value->device())
      throw std::invalid_argument("parameter arena: '" + p.path + "' differs in dtype or device from '" +
                                  params.front().path + "'");
    p_items.emplace_back(p.path, p.value->shape());
  }
  for (auto& b : buffers) b_items.emplace_back(b.path, b.value->shape());
  std::int64_t np = 0, nb = 0;
  params_ = lay_out(p_items, np);
  buffer_entries_ = lay_out(b_items, nb);
  const kernels::DType dtype = params.empty() ? kernels::DType::f32 : params.front().value->dtype();
  const kernels::Device device = params.empty() ? kernels::Device::cpu() : params.front().value->device();
  values_ = Tensor::zeros({np}, dtype, device);
  grads_ = Tensor::zeros({np}, dtype, device);
  buffers_ = nb ? Tensor::zeros({nb}, dtype, device) : Tensor();
  // The current values move in (the modules' initialization), then everything is a view.
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor v = view(values_, params_[i]);
    v.copy_from(*params[i].value);
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    Tensor v = view(buffers_, buffer_entries_[i]);
    v.copy_from(*buffers[i].value);
  }
  rebind(root);
}

void ParamArena::rebind(Module& root) {
  auto params = collect_params(root);
  auto buffers = collect_buffers(root);
  if (params.size() != params_.size() || buffers.size() != buffer_entries_.size())
    throw std::logic_error("parameter arena: the module tree changed after the arena was built");
  for (std::size_t i = 0; i < params.size(); ++i) {
    *params[i].value = view(params_[i].bf16 ? matrices_ : values_, params_[i]);
    *params[i].grad = grads_.defined() ? view(grads_, params_[i]) : Tensor();
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) *buffers[i].value = view(buffers_, buffer_entries_[i]);
}

void ParamArena::to_dtype(Module& root, kernels::DType dtype) {
  if (matrices_.defined()) throw std::logic_error("parameter arena: bf16 matrices cannot change dtype");
  values_ = values_.to(dtype);
  if (grads_.defined()) grads_ = grads_.to(dtype);
  if (buffers_.defined()) buffers_ = buffers_.to(dtype);
  rebind(root);
}

void ParamArena::to_device(Module& root, kernels::Device device, bool copy) {
  auto move = [&](Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    t = copy ? t.to(device) : Tensor::empty(t.shape(), t.dtype(), device);
  };
  move(values_);
  move(grads_);
  move(buffers_);
  move(matrices_);
  rebind(root);
}

void ParamArena::drop_grads(Module& root) {
  grads_ = Tensor();
  rebind(root);
}

Tensor ParamArena::replace_values(Module& root, Tensor values) {
  auto layout = [](const Tensor& t) {
    return kernels::shape_str(t.shape()) + " " + kernels::dtype_name(t.dtype()) + " on " + t.device().str();
  };
  if (values.shape() != values_.shape() || values.dtype() != values_.dtype() || values.device() != values_.device())
    throw std::invalid_argument("parameter arena: a replacement value block must be laid out like the live one (" +
                                layout(values_) + "), got " + layout(values));
  std::swap(values, values_);
  try {
    rebind(root);
  } catch (...) {  // the module tree changed: the views stay on the block they were on
    std::swap(values, values_);
    throw;
  }
  return values;
}

void ParamArena::adopt_blocks(Module& root, Tensor values, Tensor buffers, Tensor matrices) {
  if (grads_.defined()) throw std::logic_error("parameter arena: external blocks are for forward-only copies (drop_grads first)");
  auto check = [](const Tensor& mine, const Tensor& theirs, const char* what) {
    const bool same = mine.defined() == theirs.defined() &&
                      (!mine.defined() || (mine.shape() == theirs.shape() && mine.dtype() == theirs.dtype() &&
                                           mine.device() == theirs.device()));
    if (!same)
      throw std::invalid_argument(std::string("parameter arena: an external ") + what + " block must be laid out like " +
                                  "the arena's (" + (mine.defined() ? kernels::shape_str(mine.shape()) : "none") +
                                  "), got " + (theirs.defined() ? kernels::shape_str(theirs.shape()) : "none"));
  };
  check(values_, values, "values");
  check(buffers_, buffers, "buffers");
  check(matrices_, matrices, "matrices");
  values_ = std::move(values);
  buffers_ = std::move(buffers);
  matrices_ = std::move(matrices);
  rebind(root);
}

namespace {

// The matrices to_bf16_matrices moves: rank-2 parameters.
bool is_matrix(const ArenaEntry& e) { return e.shape.size() == 2; }

// Element counts of the float32 values block and the bf16 matrices block, aligned as lay_out.
std::pair<std::int64_t, std::int64_t> split_sizes(const std::vector<ArenaEntry>& entries) {
  std::int64_t f = 0, m = 0;
  for (const auto& e : entries) (is_matrix(e) ? m : f) += (e.numel + kAlign - 1) / kAlign * kAlign;
  return {f, m};
}

}  // namespace

void ParamArena::to_bf16_matrices(Module& root) {
  if (grads_.defined()) throw std::logic_error("parameter arena: bf16 matrices are for forward-only copies (drop_grads first)");
  if (matrices_.defined()) return;
  if (!values_.device().is_cpu() || values_.dtype() != kernels::DType::f32)
    throw std::logic_error("parameter arena: bf16 matrices are made from float32 values on the host, got " +
                           std::string(kernels::dtype_name(values_.dtype())) + " on " + values_.device().str());
  const auto [nf, nm] = split_sizes(params_);
  Tensor values = Tensor::zeros({nf}, kernels::DType::f32), matrices = Tensor::zeros({nm}, kernels::DType::bf16);
  const float* old = values_.data<float>();
  std::int64_t of = 0, om = 0;
  for (ArenaEntry& e : params_) {
    const float* src = old + e.offset;
    const std::int64_t padded = (e.numel + kAlign - 1) / kAlign * kAlign;
    e.bf16 = is_matrix(e);
    e.offset = e.bf16 ? om : of;
    (e.bf16 ? om : of) += padded;
    if (e.bf16) {
      auto* dst = static_cast<std::uint16_t*>(matrices.raw()) + e.offset;
      for (std::int64_t i = 0; i < e.numel; ++i) dst[i] = kernels::bf16_round(src[i]);
    } else {
      std::copy(src, src + e.numel, values.data<float>() + e.offset);
    }
  }
  values_ = std::move(values);
  matrices_ = std::move(matrices);
  rebind(root);
}

std::int64_t ParamArena::held_bytes() const {
  std::int64_t n = 0;
  for (const Tensor* t : {&values_, &grads_, &buffers_, &matrices_})
    if (t->defined()) n += static_cast<std::int64_t>(t->nbytes());
  return n;
}

std::int64_t ParamArena::bf16_matrices_bytes() const {
  if (matrices_.defined()) return held_bytes() - (grads_.defined() ? static_cast<std::int64_t>(grads_.nbytes()) : 0);
  const auto [nf, nm] = split_sizes(params_);
  return nf * 4 + nm * 2 + (buffers_.defined() ? static_cast<std::int64_t>(buffers_.nbytes()) : 0);
}

std::int64_t ParamArena::num_params() const {
  std::int64_t n = 0;
  for (const auto& e : params_) n += e.numel;
  return n;
}

}  // namespace codistill
