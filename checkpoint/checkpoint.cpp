#include "checkpoint/checkpoint.hpp"

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace codistill::checkpoint {

const char* section_group(Section s) {
  switch (s) {
    case Section::params: return "params";
    case Section::buffers: return "buffers";
    case Section::optimizer: return "optimizer";
    case Section::state: return "state";
  }
  return "?";
}

std::vector<TensorRef>& CheckpointView::section(Section s) {
  switch (s) {
    case Section::params: return params;
    case Section::buffers: return buffers;
    case Section::optimizer: return optimizer;
    case Section::state: return state;
  }
  throw std::logic_error("CheckpointView::section: bad section");
}

const std::vector<TensorRef>& CheckpointView::section(Section s) const {
  return const_cast<CheckpointView*>(this)->section(s);
}

std::vector<TensorValue>& CheckpointData::section(Section s) {
  switch (s) {
    case Section::params: return params;
    case Section::buffers: return buffers;
    case Section::optimizer: return optimizer;
    case Section::state: return state;
  }
  throw std::logic_error("CheckpointData::section: bad section");
}

const std::vector<TensorValue>& CheckpointData::section(Section s) const {
  return const_cast<CheckpointData*>(this)->section(s);
}

const TensorValue* CheckpointData::find(Section s, const std::string& name) const {
  for (const auto& t : section(s))
    if (t.name == name) return &t;
  return nullptr;
}

CheckpointView CheckpointData::view() const {
  CheckpointView v;
  v.meta = meta;
  for (Section s : kSections)
    for (const auto& t : section(s)) v.section(s).push_back(t.ref());
  return v;
}

namespace {
// Copies refs into values, reusing each value's buffer when name, shape and type match.
void copy_section(const std::vector<TensorRef>& refs, std::vector<TensorValue>& values) {
  bool same = refs.size() == values.size();
  for (std::size_t i = 0; same && i < refs.size(); ++i)
    same = refs[i].name == values[i].name && refs[i].shape == values[i].shape && refs[i].type == values[i].type;
  if (!same) {
    values.clear();
    for (const auto& t : refs) values.push_back(TensorValue::copy_of(t));
    return;
  }
  for (std::size_t i = 0; i < refs.size(); ++i)
    if (values[i].nbytes() > 0) std::memcpy(values[i].data(), refs[i].data, values[i].nbytes());
}
}  // namespace

void snapshot_into(const CheckpointView& view, CheckpointData& reuse) {
  reuse.meta = view.meta;
  for (Section s : kSections) copy_section(view.section(s), reuse.section(s));
}

CheckpointData snapshot_sharing(const CheckpointView& view, const std::vector<kernels::Tensor>& blocks,
                                const std::vector<kernels::Tensor>* copies) {
  if (copies && copies->size() != blocks.size())
    throw std::invalid_argument("snapshot_sharing: " + std::to_string(copies->size()) + " copies of " +
                                std::to_string(blocks.size()) + " blocks");
  auto elem_of = [](kernels::DType d) -> std::optional<ElemType> {
    if (d == kernels::DType::f32) return ElemType::f32;
    if (d == kernels::DType::f64) return ElemType::f64;
    return std::nullopt;
  };
  auto inside = [&](const TensorRef& r) -> TensorValue {
    const auto p = reinterpret_cast<std::uintptr_t>(r.data);
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const kernels::Tensor& b = blocks[k];
      const auto base = reinterpret_cast<std::uintptr_t>(b.raw());
      if (!base || r.nbytes() == 0 || elem_of(b.dtype()) != r.type || p < base || p + r.nbytes() > base + b.nbytes())
        continue;
      const std::uintptr_t offset = p - base, elem = elem_size(r.type);
      if (offset % elem != 0) continue;
      const kernels::Tensor& source = copies ? (*copies)[k] : b;
      return TensorValue::from_tensor(r.name, source.view(static_cast<std::int64_t>(offset / elem), r.shape));
    }
    return TensorValue::copy_of(r);
  };
  CheckpointData d;
  d.meta = view.meta;
  for (Section s : kSections)
    for (const auto& t : view.section(s)) d.section(s).push_back(inside(t));
  return d;
}

CheckpointData snapshot(const CheckpointView& view) {
  CheckpointData d;
  d.meta = view.meta;
  for (Section s : kSections)
    for (const auto& t : view.section(s)) d.section(s).push_back(TensorValue::copy_of(t));
  return d;
}

}  // namespace codistill::checkpoint
