#include "checkpoint/checkpoint.hpp"

#include <cstring>

namespace codistill::checkpoint {

const char* section_group(Section s) {
  switch (s) {
    case Section::params: return "params";
    case Section::optimizer: return "optimizer";
    case Section::state: return "state";
  }
  return "?";
}

const std::vector<TensorValue>& CheckpointData::section(Section s) const {
  return s == Section::params ? params : s == Section::optimizer ? optimizer : state;
}

const TensorValue* CheckpointData::find(Section s, const std::string& name) const {
  for (const auto& t : section(s))
    if (t.name == name) return &t;
  return nullptr;
}

CheckpointView CheckpointData::view() const {
  CheckpointView v;
  v.meta = meta;
  for (const auto& t : params) v.params.push_back(t.ref());
  for (const auto& t : optimizer) v.optimizer.push_back(t.ref());
  for (const auto& t : state) v.state.push_back(t.ref());
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
  copy_section(view.params, reuse.params);
  copy_section(view.optimizer, reuse.optimizer);
  copy_section(view.state, reuse.state);
}

CheckpointData snapshot(const CheckpointView& view) {
  CheckpointData d;
  d.meta = view.meta;
  for (const auto& t : view.params) d.params.push_back(TensorValue::copy_of(t));
  for (const auto& t : view.optimizer) d.optimizer.push_back(TensorValue::copy_of(t));
  for (const auto& t : view.state) d.state.push_back(TensorValue::copy_of(t));
  return d;
}

}  // namespace codistill::checkpoint
