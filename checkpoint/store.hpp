#pragma once
// The run directory (DESIGN.md section 4) as checkpoint storage: workers' folders, their
// published checkpoints, the freshest valid one, retention and temp-file cleanup.
//
// Other processes write, publish and prune in the same folders at the same time, and a
// shared file system shows it late: every operation here takes a listing as a hint, and
// a file that vanishes or turns out invalid after the listing is skipped, never fatal.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace codistill::checkpoint {

// What a worker publishes: checkpoints (ckpt-*.h5) and, beside some of them, teacher files
// (teacher-*.h5: parameters and buffers only, checkpoint.hpp write_teacher).
enum class FileKind { checkpoint, teacher };
const char* file_kind_name(FileKind k);  // "checkpoint", "teacher"

struct CheckpointFile {
  int worker = 0;
  std::int64_t step = 0;
  std::string path;
  FileKind kind = FileKind::checkpoint;
  bool operator==(const CheckpointFile&) const = default;
};

struct LoadedCheckpoint {
  CheckpointFile file;
  CheckpointData data;
  // Newer checkpoints passed over on the way, as "path: reason" (to log).
  std::vector<std::string> skipped;
};

class RunStore {
 public:
  explicit RunStore(std::string run_dir);

  const std::string& dir() const { return dir_; }
  std::string worker_dir(int worker) const;                         // RUN_DIR/worker-003
  std::string checkpoint_path(int worker, std::int64_t step) const;  // .../ckpt-000001000.h5
  std::string teacher_path(int worker, std::int64_t step) const;     // .../teacher-000001000.h5
  std::string path(FileKind kind, int worker, std::int64_t step) const;

  // Ids of the worker-XXX folders, ascending (none when the run directory is missing).
  std::vector<int> workers() const;
  // A worker's published checkpoints (ckpt-*.h5 names only), by ascending step. A folder
  // that does not exist yet holds none; one that cannot be listed (permissions, I/O)
  // holds none either, and says why in *unreadable when that is given.
  std::vector<CheckpointFile> checkpoints(int worker, std::string* unreadable = nullptr) const;
  // The same for a worker's teacher files (teacher-*.h5 names only).
  std::vector<CheckpointFile> teacher_files(int worker, std::string* unreadable = nullptr) const;
  std::vector<CheckpointFile> files(FileKind kind, int worker, std::string* unreadable = nullptr) const;

  // The newest checkpoint that passes verify() (optionally with the given fingerprint),
  // trying newer ones first. Reads every byte of each candidate; to load the result too,
  // load_freshest() does both in one pass.
  std::optional<CheckpointFile> freshest_valid(int worker, const std::optional<std::string>& fingerprint = {},
                                               std::vector<std::string>* skipped = nullptr) const;
  // Reads the newest checkpoint that reads without error (with these options), falling
  // back to older ones; nullopt when none does. `max_step` ignores newer checkpoints,
  // `after_step` those of that step and older. `kind`: teacher files instead.
  std::optional<LoadedCheckpoint> load_freshest(int worker, const ReadOptions& options = {},
                                                std::optional<std::int64_t> max_step = {},
                                                FileKind kind = FileKind::checkpoint,
                                                std::optional<std::int64_t> after_step = {}) const;

  // Deletes all but the newest `keep` (>= 1) published checkpoints of a worker, except
  // the newest valid one, which always stays (when the newest files are invalid, it is
  // kept beside them). `known_valid_step` names a checkpoint the caller has just written
  // and need not be verified again. Teacher files go with their checkpoints: one is kept
  // while its checkpoint is, or while it is newer than every checkpoint (it is published
  // just before its checkpoint); the others are deleted. Returns the paths deleted.
  std::vector<std::string> retain(int worker, int keep, std::optional<std::int64_t> known_valid_step = {}) const;

  // Removes a worker's temp files (.ckpt-*.tmp.<pid>, .teacher-*.tmp.<pid>, and the other
  // records' "<name>.tmp.<pid>": parse_any_temp_file_pid, never this process's) left by this process or by a
  // process that no longer exists (kill(pid, 0) fails with ESRCH). Call it when this
  // process has no write in flight, e.g. at start-up. Returns the paths removed.
  std::vector<std::string> cleanup_temp_files(int worker) const;

 private:
  std::string dir_;
};

}  // namespace codistill::checkpoint
