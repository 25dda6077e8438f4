#include "codistill/persist/data_record.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codistill/data/text/atomic_write.hpp"
#include "codistill/persist/run_dir.hpp"

namespace codistill {
namespace {

std::string record_path(const std::string& worker_dir) { return worker_dir + "/data.json"; }

}  // namespace

void record_data(const std::string& worker_dir, const DataIdentity& id) {
  const nlohmann::json j = {{"kind", id.kind},
                            {"path", id.path},
                            {"files", id.files},
                            {"fingerprint", fmt::format("{:016x}", id.fingerprint)}};
  const std::string text = j.dump(2) + "\n";
  data::text::write_file_atomically(record_path(worker_dir), [&](const data::text::ByteSink& sink) {
    sink(text.data(), text.size());
  });
}

void check_recorded_data(const std::string& worker_dir, const DataIdentity& id) {
  const std::string path = record_path(worker_dir);
  if (!std::filesystem::exists(path)) return;
  nlohmann::json j;
  try {
    std::ifstream in(path);
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw RunDirError(path + ": unreadable record of the worker's data (" + e.what() + ")");
  }
  const std::string want = fmt::format("{:016x}", id.fingerprint);
  if (j.value("fingerprint", "") == want) return;
  throw RunDirError(fmt::format(
      "{}: this worker trained on other data ({} at '{}', fingerprint {}); this run's is {} at '{}' (fingerprint {}). "
      "A checkpoint continues the data it was trained on: point data.path back at it, or start another run "
      "directory",
      path, j.value("kind", "?"), j.value("path", "?"), j.value("fingerprint", "?"), id.kind, id.path, want));
}

}  // namespace codistill
