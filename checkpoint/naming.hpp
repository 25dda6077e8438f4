#pragma once
// File names of the run directory (DESIGN.md sections 4 and 5):
//   worker-XXX/                                        a worker's folder (id zero-padded to 3)
//   worker-XXX/ckpt-<step, zero-padded to 9>.h5        a published checkpoint
//   worker-XXX/.ckpt-<step>.h5.tmp.<pid>               a checkpoint being written
//   worker-XXX/teacher-<step, zero-padded to 9>.h5     a published teacher file
//   worker-XXX/.teacher-<step>.h5.tmp.<pid>            a teacher file being written
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace codistill::checkpoint {

std::string worker_dir_name(int worker);                   // "worker-003"
// The worker id of a worker folder's name; nullopt for anything else.
std::optional<int> parse_worker_dir_name(std::string_view name);

std::string checkpoint_file_name(std::int64_t step);        // "ckpt-000001000.h5"
std::string temp_file_name(std::int64_t step, long pid);    // ".ckpt-000001000.h5.tmp.1234"
// The step of a published checkpoint's file name; nullopt for anything else.
std::optional<std::int64_t> parse_checkpoint_file_name(std::string_view name);
std::string teacher_file_name(std::int64_t step);          // "teacher-000001000.h5"
// The step of a published teacher file's name; nullopt for anything else.
std::optional<std::int64_t> parse_teacher_file_name(std::string_view name);
// The writer's pid of a temp file name (of a checkpoint or a teacher file); nullopt for
// anything else.
std::optional<long> parse_temp_file_pid(std::string_view name);
// The writer's pid of any file of a worker's folder written by rename or link from
// "<name>.tmp.<pid>" or "<name>.tmp.<pid>.<n>" (a leading '.' or not): checkpoints and
// teacher files, and the records the trainer writes beside them (".data.json.tmp.<pid>",
// "joined.tmp.<pid>", ...), which a kill part-way through their write leaves behind too.
std::optional<long> parse_any_temp_file_pid(std::string_view name);

}  // namespace codistill::checkpoint
