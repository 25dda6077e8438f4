#include "checkpoint/source.hpp"

#include <filesystem>
#include <stdexcept>

#include "checkpoint/naming.hpp"
#include "checkpoint/store.hpp"

namespace codistill::checkpoint {
namespace fs = std::filesystem;

CheckpointSource classify_source(const std::string& spec) {
  std::error_code ec;
  fs::path p = fs::absolute(spec, ec).lexically_normal();
  if (ec) throw std::invalid_argument(ec.message());
  // "runs/x/" normalizes to "runs/x/" with an empty file name: name the folder itself.
  if (!p.has_filename()) p = p.parent_path();
  const auto status = fs::status(p, ec);
  if (ec || !fs::exists(status)) throw std::invalid_argument("no such file or directory");
  CheckpointSource s;
  s.path = p.string();
  if (fs::is_regular_file(status)) return s;
  if (!fs::is_directory(status)) throw std::invalid_argument("neither a checkpoint file nor a directory");
  if (auto id = parse_worker_dir_name(p.filename().string())) {
    s.kind = CheckpointSource::Kind::worker_dir;
    s.run_dir = p.parent_path().string();
    s.worker = *id;
    return s;
  }
  s.kind = CheckpointSource::Kind::run_dir;
  s.run_dir = s.path;
  s.workers = RunStore(s.path).workers();
  if (s.workers.empty())
    throw std::invalid_argument(
        "neither a checkpoint file, a worker folder (worker-NNN) nor a run directory (it has no worker-NNN "
        "folder)");
  return s;
}

}  // namespace codistill::checkpoint
