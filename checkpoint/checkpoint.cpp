#include "checkpoint/checkpoint.hpp"

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

CheckpointData snapshot(const CheckpointView& view) {
  CheckpointData d;
  d.meta = view.meta;
  for (const auto& t : view.params) d.params.push_back(TensorValue::copy_of(t));
  for (const auto& t : view.optimizer) d.optimizer.push_back(TensorValue::copy_of(t));
  for (const auto& t : view.state) d.state.push_back(TensorValue::copy_of(t));
  return d;
}

}  // namespace codistill::checkpoint
