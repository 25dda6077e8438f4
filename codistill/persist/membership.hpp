#pragma once
// A worker's membership markers in its folder (DESIGN.md section 4, docs/training.md "An
// elastic cohort"), each one JSON object {"worker", "step", "reason"}:
//   RUN_DIR/worker-XXX/joined   a worker that joined a running run (model.init_from peers)
//                               at `step`: sync mode never waits for its files of earlier steps;
//   RUN_DIR/worker-XXX/retired  a worker that left for good after publishing its final
//                               checkpoint of `step` (run.retire_at, or this very file put
//                               there while it ran: reason "marker"). Peers stop counting it
//                               (sync mode never waits for it) and, by codistill.retired,
//                               keep or drop its checkpoints as teachers; it does not start
//                               again. Any file of that name counts: an empty one made by
//                               hand for a worker that is gone for good is a retirement of
//                               unknown step (-1).
#include <cstdint>
#include <optional>
#include <string>

namespace codistill {

inline constexpr const char* kJoinedMarker = "joined";
inline constexpr const char* kRetiredMarker = "retired";

struct Membership {
  std::int64_t step = -1;  // -1: unknown (a marker made by hand)
  std::string reason;      // joined: the checkpoint it started from; retired: "run.retire_at" | "marker"
};

// RUN_DIR/worker-XXX/<name>
std::string marker_path(const std::string& worker_dir, const char* name);

// The marker's content when there is one (nullopt when there is none, or it cannot be seen:
// a folder that cannot be read is taken for no marker).
std::optional<Membership> read_marker(const std::string& worker_dir, const char* name);

// Publishes the marker atomically (a temp file renamed into place, replacing one made by
// hand). Throws std::runtime_error naming the path when it cannot be written.
void write_marker(const std::string& worker_dir, const char* name, int worker, const Membership& m);

}  // namespace codistill
