#include "codistill/teachers/teacher_sharing.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace codistill {

std::string shared_teacher_path(const TeacherSharing& s, int peer, std::int64_t step, const std::string& weights) {
  return shared_file_path(s.dir, s.writer_pid, fmt::format("{}.p{}.s{}.{}", s.name, peer, step, weights));
}

std::string meta_text(const SharedTeacherMeta& m) {
  return nlohmann::json{{"model", m.model_yaml},
                        {"fingerprint", m.fingerprint},
                        {"source", m.source},
                        {"teacher_file", m.teacher_file},
                        {"step", m.step}}
      .dump();
}

SharedTeacherMeta parse_meta(const std::string& text, const std::string& path) {
  try {
    const auto j = nlohmann::json::parse(text);
    SharedTeacherMeta m;
    m.model_yaml = j.at("model").get<std::string>();
    m.fingerprint = j.at("fingerprint").get<std::string>();
    m.source = j.at("source").get<std::string>();
    m.teacher_file = j.at("teacher_file").get<bool>();
    m.step = j.at("step").get<std::int64_t>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw SharedFileError("shared file " + path + ": its description does not read: " + e.what());
  }
}

namespace {

// The arena's blocks in file order: values, buffers, matrices (an absent one: empty).
std::vector<kernels::Tensor*> blocks_of(ParamArena& a) { return {&a.values(), &a.buffers(), &a.matrices()}; }

}  // namespace

std::shared_ptr<SharedFileOwner> publish_teacher(Model& model, const std::string& path, const SharedTeacherMeta& meta) {
  ParamArena& arena = model.arena();
  if (arena.grads().defined()) throw std::logic_error("publish_teacher: the model still has gradients");
  std::vector<std::span<const std::byte>> spans;
  for (kernels::Tensor* t : blocks_of(arena)) {
    if (t->defined() && !t->device().is_cpu())
      throw SharedFileError("shared file " + path + ": only host-memory teachers are shared, this one is on " +
                            t->device().str());
    spans.emplace_back(static_cast<const std::byte*>(t->defined() ? t->raw() : nullptr), t->defined() ? t->nbytes() : 0);
  }
  publish_shared_file(path, meta_text(meta), spans);
  auto owner = std::make_shared<SharedFileOwner>(path);  // removes the file should the mapping fail
  adopt_shared(model, SharedMapping::open(path));
  return owner;
}

void adopt_shared(Model& model, const std::shared_ptr<SharedMapping>& mapping) {
  ParamArena& arena = model.arena();
  const auto mine = blocks_of(arena);
  if (mapping->block_count() != mine.size())
    throw SharedFileError(fmt::format("shared file {}: {} blocks, a teacher has {}", mapping->path(),
                                      mapping->block_count(), mine.size()));
  std::vector<kernels::Tensor> theirs;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto span = mapping->block(i);
    const kernels::Tensor& t = *mine[i];
    const std::size_t want = t.defined() ? t.nbytes() : 0;
    if (span.size() != want)
      throw SharedFileError(fmt::format("shared file {}: block {} holds {} bytes, this teacher's {} (another layout: "
                                        "codistill.teacher_weights differs?)",
                                        mapping->path(), i, span.size(), want));
    if (!t.defined()) {
      theirs.emplace_back();
      continue;
    }
    // An aliasing pointer: the tensor (and every view of it) keeps the whole mapping alive.
    // const_cast only to fit Tensor's type; the pages are PROT_READ, so a write faults.
    std::shared_ptr<std::byte> bytes(mapping, const_cast<std::byte*>(span.data()));
    theirs.push_back(kernels::Tensor::adopt(std::move(bytes), t.shape(), t.dtype(), t.device()));
  }
  try {
    arena.adopt_blocks(model.root(), std::move(theirs[0]), std::move(theirs[1]), std::move(theirs[2]));
  } catch (const std::exception& e) {
    throw SharedFileError("shared file " + mapping->path() + ": " + e.what());
  }
}

}  // namespace codistill
