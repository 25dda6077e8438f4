#pragma once
// Faults injected on purpose by process-level tests, passed in through TrainOptions.
#include <cstdint>
#include <vector>

namespace codistill {

// Checkpoint writes that go wrong on purpose, for process-level tests: the writes of
// fail_steps fail part-way, as on a full disk (training goes on); at kill_steps the
// process SIGKILLs itself part-way through the write, leaving a torn temp file.
// At no_memory_steps, the blocks for the out-of-place update after the checkpoint cannot be
// allocated (as when host memory runs out).
struct CheckpointFaults {
  std::vector<std::int64_t> fail_steps;
  std::vector<std::int64_t> kill_steps;
  std::vector<std::int64_t> no_memory_steps;
};

}  // namespace codistill
