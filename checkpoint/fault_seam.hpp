#pragma once
// Faults injected on purpose, for tests: the one seam through which they enter the library.
// No public header of the library names a fault; the code that can fail on purpose asks
// here, and only tests and codistill-train (from its CODISTILL_FAULT_* variables, for the
// process tests) ever install one. With nothing installed every question answers "none".
//   - A plan by step (install / plan): the checkpoint writes of fail_checkpoint_steps fail
//     part-way as on a full disk; those of kill_checkpoint_steps SIGKILL the process part-way,
//     leaving a torn temp file; at no_memory_steps the blocks for the out-of-place update after
//     the checkpoint cannot be allocated (codistill/persist/checkpointing.cpp).
//   - A write armed by path (arm_write / take_write): checkpoint::write fails (or kills the
//     process) once the data bytes written would exceed after_bytes. The checkpoint manager
//     arms the files of a planned step; unit tests of the writer arm a file directly.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace codistill::fault_seam {

struct Plan {
  std::vector<std::int64_t> fail_checkpoint_steps;
  std::vector<std::int64_t> kill_checkpoint_steps;
  std::vector<std::int64_t> no_memory_steps;
};

// Replaces the process's plan (an empty Plan: none).
void install(Plan plan);
Plan plan();
bool listed(const std::vector<std::int64_t>& steps, std::int64_t step);

struct WriteFault {
  std::int64_t after_bytes = 4096;  // data bytes written before it fails
  bool kill = false;                // SIGKILL the process there instead of failing
};

// The next write of `path` (its final name) fails so. Thread-safe: the checkpoint writer
// may run on another thread than the one that arms it.
void arm_write(const std::string& path, WriteFault fault);
// checkpoint::write's question, once per file: the fault armed for it, if any (disarmed).
std::optional<WriteFault> take_write(const std::string& path);

// A test's plan for its scope, none after it.
class ScopedPlan {
 public:
  explicit ScopedPlan(Plan p) { install(std::move(p)); }
  ~ScopedPlan() { install({}); }
  ScopedPlan(const ScopedPlan&) = delete;
  ScopedPlan& operator=(const ScopedPlan&) = delete;
};

}  // namespace codistill::fault_seam
