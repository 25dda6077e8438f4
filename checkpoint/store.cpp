#include "checkpoint/store.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "checkpoint/fsutil.hpp"
#include "checkpoint/naming.hpp"

namespace codistill::checkpoint {

namespace {

namespace fs = std::filesystem;

// A file whose step attribute disagrees with its name was renamed or copied by hand: a
// resume from it would continue at the wrong step, so it is treated as invalid.
std::string step_mismatch(const CheckpointFile& f, std::int64_t step_attr) {
  if (step_attr == f.step) return {};
  return "step attribute " + std::to_string(step_attr) + " does not match the file name";
}

// The names in a folder, or none if it does not exist (yet, or any more). Entries that
// vanish while the folder is read are simply not seen, or seen and then not found.
std::vector<std::string> names_in(const std::string& dir, std::string* unreadable = nullptr) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
  // A folder gone (ENOENT), or removed through another client of a network file system
  // (ESTALE), holds nothing; only other failures (permissions, I/O) make it unreadable.
  // (std::filesystem reports the errno value.)
  if (ec && unreadable && !fsutil::gone_errno(ec.value()))
    *unreadable = "cannot list " + dir + ": " + ec.message();
  return names;
}

}  // namespace

const char* file_kind_name(FileKind k) { return k == FileKind::teacher ? "teacher" : "checkpoint"; }

RunStore::RunStore(std::string run_dir) : dir_(std::move(run_dir)) {}

std::string RunStore::worker_dir(int worker) const { return (fs::path(dir_) / worker_dir_name(worker)).string(); }

std::string RunStore::checkpoint_path(int worker, std::int64_t step) const {
  return (fs::path(worker_dir(worker)) / checkpoint_file_name(step)).string();
}

std::string RunStore::teacher_path(int worker, std::int64_t step) const {
  return (fs::path(worker_dir(worker)) / teacher_file_name(step)).string();
}

std::string RunStore::path(FileKind kind, int worker, std::int64_t step) const {
  return kind == FileKind::teacher ? teacher_path(worker, step) : checkpoint_path(worker, step);
}

std::vector<int> RunStore::workers() const {
  std::vector<int> ids;
  for (const auto& name : names_in(dir_)) {
    std::error_code ec;
    if (auto id = parse_worker_dir_name(name); id && fs::is_directory(fs::path(dir_) / name, ec)) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<CheckpointFile> RunStore::checkpoints(int worker, std::string* unreadable) const {
  return files(FileKind::checkpoint, worker, unreadable);
}

std::vector<CheckpointFile> RunStore::teacher_files(int worker, std::string* unreadable) const {
  return files(FileKind::teacher, worker, unreadable);
}

std::vector<CheckpointFile> RunStore::files(FileKind kind, int worker, std::string* unreadable) const {
  std::vector<CheckpointFile> files;
  std::string dir = worker_dir(worker);
  for (const auto& name : names_in(dir, unreadable)) {
    auto step = kind == FileKind::teacher ? parse_teacher_file_name(name) : parse_checkpoint_file_name(name);
    if (step) files.push_back({worker, *step, (fs::path(dir) / name).string(), kind});
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return files;
}

std::optional<CheckpointFile> RunStore::freshest_valid(int worker, const std::optional<std::string>& fingerprint,
                                                       std::vector<std::string>* skipped) const {
  auto files = checkpoints(worker);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    VerifyResult v = verify(it->path, fingerprint);
    if (v.valid) {
      try {
        v.reason = step_mismatch(*it, read_meta(it->path).step);
      } catch (const CheckpointError& e) {  // vanished since
        v.reason = e.reason();
      }
      if (v.reason.empty()) return *it;
    }
    if (skipped) skipped->push_back(it->path + ": " + v.reason);
  }
  return std::nullopt;
}

std::optional<LoadedCheckpoint> RunStore::load_freshest(int worker, const ReadOptions& options,
                                                        std::optional<std::int64_t> max_step, FileKind kind,
                                                        std::optional<std::int64_t> after_step) const {
  auto files = this->files(kind, worker);
  std::vector<std::string> skipped;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (max_step && it->step > *max_step) continue;
    if (after_step && it->step <= *after_step) break;
    try {
      CheckpointData data = read(it->path, options);
      if (auto why = step_mismatch(*it, data.meta.step); !why.empty()) {
        skipped.push_back(it->path + ": " + why);
        continue;
      }
      return LoadedCheckpoint{*it, std::move(data), std::move(skipped)};
    } catch (const CheckpointError& e) {  // vanished, half-visible on NFS, corrupt, wrong model
      skipped.push_back(it->path + ": " + e.reason());
    }
  }
  return std::nullopt;
}

std::vector<std::string> RunStore::retain(int worker, int keep, std::optional<std::int64_t> known_valid_step) const {
  if (keep < 1) throw CheckpointError(worker_dir(worker), "retention needs keep >= 1, got " + std::to_string(keep));
  auto files = checkpoints(worker);
  std::vector<std::string> deleted;
  auto remove = [&](const CheckpointFile& f) {
    try {
      if (fsutil::remove_if_exists(f.path)) deleted.push_back(f.path);
    } catch (const std::exception& e) {
      throw CheckpointError(f.path, std::string("retention: ") + e.what());
    }
  };
  std::set<std::int64_t> kept;
  for (const auto& f : files) kept.insert(f.step);
  if (files.size() > static_cast<std::size_t>(keep)) {
    // The newest valid checkpoint is what a restart (or a peer) would fall back to.
    std::optional<std::int64_t> newest_valid;
    for (auto it = files.rbegin(); it != files.rend() && !newest_valid; ++it)
      if ((known_valid_step && it->step == *known_valid_step) || verify(it->path).valid) newest_valid = it->step;
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < files.size(); ++i) {
      if (newest_valid && files[i].step == *newest_valid) continue;
      remove(files[i]);
      kept.erase(files[i].step);
    }
  }
  const std::int64_t newest = files.empty() ? -1 : files.back().step;
  for (const auto& t : teacher_files(worker))
    if (t.step <= newest && !kept.count(t.step)) remove(t);
  return deleted;
}

std::vector<std::string> RunStore::cleanup_temp_files(int worker) const {
  std::vector<std::string> removed;
  std::string dir = worker_dir(worker);
  long self = fsutil::this_pid();
  for (const auto& name : names_in(dir)) {
    // This process's own records other than checkpoints may be mid-write on another thread
    // (a membership marker while the writer thread cleans up): only a dead writer's go.
    auto pid = parse_temp_file_pid(name);
    const bool checkpoint_temp = pid.has_value();
    if (!pid) pid = parse_any_temp_file_pid(name);
    if (!pid || (*pid == self ? !checkpoint_temp : fsutil::pid_alive(*pid))) continue;
    std::string path = (fs::path(dir) / name).string();
    try {
      if (fsutil::remove_if_exists(path)) removed.push_back(path);
    } catch (const std::exception& e) {
      throw CheckpointError(path, std::string("cleaning up a temp file: ") + e.what());
    }
  }
  return removed;
}

}  // namespace codistill::checkpoint
