// TeacherPool::screen: the teacher gate's pass over freshly loaded peers' checkpoints
// (teachers/teacher_gate.hpp).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "codistill/teachers/teachers.hpp"

namespace codistill {

nlohmann::json teacher_event_fields(const Teacher& t) {
  nlohmann::json fields = {{"peer", t.peer},
                           {"peer_step", t.step},
                           {"load_ms", t.load_ms},
                           {"file", checkpoint::file_kind_name(t.file)},
                           {"bytes_read", t.bytes_read}};
  if (t.verdict) add_verdict_fields(fields, *t.verdict);
  return fields;
}

void add_verdict_fields(nlohmann::json& fields, const GateVerdict& v) {
  fields["refused"] = !v.accepted;
  fields["probe_loss"] = std::isfinite(v.loss) ? nlohmann::json(v.loss) : nlohmann::json(nullptr);
  fields["own_probe_loss"] = std::isfinite(v.own_loss) ? nlohmann::json(v.own_loss) : nlohmann::json(nullptr);
  fields["probe_ms"] = v.ms;
  if (!v.accepted) fields["reason"] = v.reason;
}

std::vector<std::unique_ptr<Teacher>> TeacherPool::screen(std::vector<std::unique_ptr<Teacher>> loaded,
                                                          MetricsWriter* metrics, std::int64_t step) {
  if (!gate_) return loaded;
  std::vector<std::unique_ptr<Teacher>> accepted;
  for (auto& t : loaded) {
    t->verdict = gate_->judge(t->model, step);
    if (t->verdict->accepted) {
      accepted.push_back(std::move(t));
      continue;
    }
    // The held step stays the refused one (the watcher set it), so the peer is not loaded
    // again until it publishes a newer checkpoint; the teacher held from it, if any, goes on.
    if (metrics) {
      metrics->emit("teacher", step, teacher_event_fields(*t));
    }
    log_->warn("teacher refused: peer {} at step {} ({}): {} (probe of {} rows in {:.0f} ms){}", t->peer, t->step,
               t->path, t->verdict->reason, gate_->config().probe, t->verdict->ms,
               std::any_of(teachers_.begin(), teachers_.end(), [&](const auto& u) { return u->peer == t->peer; })
                   ? "; keeping its previous checkpoint as the teacher"
                   : "");
  }
  return accepted;
}

}  // namespace codistill
