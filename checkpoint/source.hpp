#pragma once
// What a user-given checkpoint path names: one checkpoint file, a worker's folder
// (worker-NNN: its checkpoints) or a run directory (its worker-NNN folders). Config keys
// that take "a checkpoint" (model.init_from, codistill.fixed_teachers) accept all three and
// differ only in what they take from a run directory, so they share this classification.
#include <string>
#include <vector>

namespace codistill::checkpoint {

struct CheckpointSource {
  enum class Kind { file, worker_dir, run_dir };
  Kind kind = Kind::file;
  std::string path;          // absolute, lexically normal
  std::string run_dir;       // worker_dir: its parent; run_dir: path itself; file: empty
  int worker = -1;           // worker_dir: its id
  std::vector<int> workers;  // run_dir: the ids of its worker folders, ascending (never empty)
};

// Throws std::invalid_argument saying what `spec` is instead (missing, another kind of
// file, a directory with no worker folders). Checks nothing inside a checkpoint file.
CheckpointSource classify_source(const std::string& spec);

}  // namespace codistill::checkpoint
