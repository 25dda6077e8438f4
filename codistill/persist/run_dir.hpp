#pragma once
// The run directory (DESIGN.md section 4): RUN_DIR/config.yaml shared by all workers,
// RUN_DIR/worker-XXX/{metrics.jsonl, train.log, ckpt-*.h5}. Preparing it never overwrites
// anything another run or worker wrote.
#include <stdexcept>
#include <string>

#include "codistill/config/config.hpp"

namespace codistill {

struct RunPaths {
  std::string run_dir;
  std::string config;      // RUN_DIR/config.yaml
  std::string worker_dir;  // RUN_DIR/worker-000
  std::string metrics;     // RUN_DIR/worker-000/metrics.jsonl
  std::string log;         // RUN_DIR/worker-000/train.log
};

RunPaths run_paths(const Config& cfg);

// Creates the folders and publishes RUN_DIR/config.yaml (atomically, once; a worker that
// finds it already there checks that it describes the same run apart from the per-worker
// keys (run.worker, run.retire_at, the GPU) and run.workers (the cohort is elastic), and
// refuses otherwise). With resume = false (--no-resume) it refuses a worker folder that
// already holds a run (metrics.jsonl); a resumed worker appends to its files. Throws
// RunDirError (exit code 2) with the path.
class RunDirError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
RunPaths prepare_run_dir(const Config& cfg, bool resume);

// Throws RunDirError when the run directory already holds a config.yaml of a different run
// (the same comparison prepare_run_dir makes), without writing anything.
void check_same_run(const Config& cfg);

}  // namespace codistill
