#include "codistill/teachers/fixed_teachers.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/source.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/util/run_errors.hpp"

namespace codistill {
namespace fs = std::filesystem;

namespace {

const char* kKey = "codistill.fixed_teachers";

[[noreturn]] void refuse(const std::string& entry, const std::string& why) {
  throw ConfigError(kKey, "", 0, fmt::format("entry '{}': {}", entry, why));
}

FixedTeacherFile freshest(const std::string& entry, const std::string& run_dir, int worker) {
  checkpoint::RunStore store(run_dir);
  std::vector<std::string> skipped;
  auto file = store.freshest_valid(worker, {}, &skipped);
  if (!file)
    refuse(entry, fmt::format("no valid checkpoint in {}{}", store.worker_dir(worker),
                              skipped.empty() ? "" : fmt::format(" ({})", fmt::join(skipped, "; "))));
  auto meta = checkpoint::read_meta(file->path);
  return {entry, file->path, meta.step, meta.content_digest};
}

// A temp file renamed into place: a reader sees the old record or the new one, whole.
void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw TrainingError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw TrainingError("cannot publish " + path + ": " + ec.message());
}

}  // namespace

std::vector<FixedTeacherFile> resolve_fixed_teachers(const std::vector<std::string>& entries) {
  std::vector<FixedTeacherFile> out;
  using Kind = checkpoint::CheckpointSource::Kind;
  for (const std::string& entry : entries) {
    checkpoint::CheckpointSource src;
    try {
      src = checkpoint::classify_source(entry);
    } catch (const std::invalid_argument& e) {
      refuse(entry, e.what());
    }
    if (src.kind == Kind::file) {
      const auto v = checkpoint::verify(src.path);
      if (!v.valid) refuse(entry, "not a valid checkpoint: " + v.reason);
      auto meta = checkpoint::read_meta(src.path);
      out.push_back({entry, src.path, meta.step, meta.content_digest});
    } else if (src.kind == Kind::worker_dir) {
      out.push_back(freshest(entry, src.run_dir, src.worker));
    } else {  // a run directory: each worker's freshest, an ensemble
      for (int w : src.workers) out.push_back(freshest(entry, src.run_dir, w));
    }
  }
  return out;
}

void write_fixed_record(const std::string& path, const std::vector<FixedTeacherFile>& files) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : files)
    j.push_back({{"source", f.source}, {"path", f.path}, {"step", f.step}, {"content_digest", f.content_digest}});
  write_file_atomic(path, j.dump(2) + "\n");
}

std::vector<FixedTeacherFile> read_fixed_record(const std::string& path) {
  std::vector<FixedTeacherFile> files;
  std::ifstream in(path);
  if (!in) return files;
  try {
    for (const auto& e : nlohmann::json::parse(in))
      files.push_back({e.at("source").get<std::string>(), e.at("path").get<std::string>(),
                       e.at("step").get<std::int64_t>(), e.at("content_digest").get<std::string>()});
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("{} is damaged ({}): it records which fixed teachers this worker uses; "
                                    "restore it or start a new run",
                                    path, e.what()));
  }
  return files;
}

checkpoint::CheckpointData read_fixed_teacher(const FixedTeacherFile& f) {
  checkpoint::CheckpointData data;
  try {
    checkpoint::ReadOptions o;
    o.optimizer = false;  // a teacher only runs forward; state holds its input normalization
    data = checkpoint::read(f.path, o);
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("fixed teacher {} (from '{}') cannot be read: {}", f.path, f.source, e.what()));
  }
  if (data.meta.content_digest != f.content_digest)
    throw TrainingError(fmt::format("fixed teacher {} (from '{}') changed since this worker chose it: content "
                                    "digest {}, recorded {}; a resumed run needs the same teachers",
                                    f.path, f.source, data.meta.content_digest, f.content_digest));
  return data;
}

}  // namespace codistill
