#include "checkpoint/checkpoint.hpp"

#include <cstring>
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

CheckpointData snapshot_sharing(const CheckpointView& view, const std::vector<kernels::Tensor>& blocks) {
  auto inside = [&](const TensorRef& r) -> TensorValue {
    const auto* p = static_cast<const std::byte*>(r.data);
    for (const kernels::Tensor& b : blocks) {
      const auto* base = static_cast<const std::byte*>(b.raw());
      const std::size_t elem = kernels::dtype_size(b.dtype());
      if (!base || r.nbytes() == 0 || elem != elem_size(r.type) || p < base || p + r.nbytes() > base + b.nbytes())
        continue;
      const auto offset = static_cast<std::size_t>(p - base);
      if (offset % elem != 0) continue;
      return TensorValue::from_tensor(r.name, b.view(static_cast<std::int64_t>(offset / elem), r.shape));
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
