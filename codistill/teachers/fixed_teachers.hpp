#pragma once
// Fixed teachers (codistill.fixed_teachers): frozen checkpoints distilled into the student
// at every step, beside or instead of live peers — classic knowledge distillation, e.g. a
// ResNet ensemble into an MLP. Each entry of the key is
//   a checkpoint file                  that file (it must verify);
//   a worker directory (worker-XXX)    its freshest valid checkpoint;
//   a run directory                    each of its workers' freshest valid checkpoint.
// A directory's freshest checkpoint can change while a teacher run goes on, so the files a
// worker chose when it started are recorded in RUN_DIR/worker-XXX/fixed_teachers.json
// (path, step, content digest) and a resumed worker loads exactly those again: a stopped
// and restarted run goes on bit for bit.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace codistill {

struct FixedTeacherFile {
  std::string source;  // the config entry it came from
  std::string path;    // the checkpoint file chosen
  std::int64_t step = 0;
  std::string content_digest;
};

// The checkpoint files the entries name, in entry order (a run directory's workers by
// id). Throws ConfigError naming the entry (codistill.fixed_teachers) when it does not
// exist, is neither a checkpoint nor a worker or run directory, or holds no valid
// checkpoint.
std::vector<FixedTeacherFile> resolve_fixed_teachers(const std::vector<std::string>& entries);

// The record of a worker's choice: written once when it starts (atomically), read back on
// resume. read_fixed_record returns an empty list when there is no record.
void write_fixed_record(const std::string& path, const std::vector<FixedTeacherFile>& files);
std::vector<FixedTeacherFile> read_fixed_record(const std::string& path);

// Reads a recorded file again, refusing one whose content changed since it was chosen
// (TrainingError naming it).
checkpoint::CheckpointData read_fixed_teacher(const FixedTeacherFile& f);

}  // namespace codistill
