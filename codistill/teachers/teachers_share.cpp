// TeacherPool's side of codistill.share_teachers (teachers/teacher_sharing.hpp): the
// writer publishes each peer teacher it loads; a reader maps what its node's writer
// published, and loads its own copy when it cannot, saying why.
#include <chrono>

#include <fmt/format.h>

#include "codistill/config/config_loader.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/util/rng.hpp"
#include "codistill/util/run_errors.hpp"

namespace codistill {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

void TeacherPool::set_sharing(TeacherSharing sharing) {
  sharing_ = std::move(sharing);
  if (!sharing_.writer) return;
  // Files of runs that died on this node (kill -9, a crash): tmpfs keeps them until reboot.
  for (const auto& path : remove_stale_shared_files(sharing_.dir))
    log_->info("teacher sharing: removed {}, left by a process that no longer runs", path);
}

bool TeacherPool::chosen_changed(const std::vector<checkpoint::TeacherStep>& chosen) {
  if (chosen == last_chosen_) return false;
  last_chosen_ = chosen;
  return true;
}

void TeacherPool::share(Teacher& t, const checkpoint::CheckpointMeta& meta) {
  const std::string path = shared_teacher_path(sharing_, t.peer, t.step, cfg_.codistill.teacher_weights);
  SharedTeacherMeta m{meta.model, meta.model_fingerprint, t.path, t.file == checkpoint::FileKind::teacher, t.step};
  try {
    t.shared_owner = publish_teacher(t.model, path, m);
    t.shared_path = path;
    log_->info("teacher sharing: peer {} at step {} published as {} for this node's ranks", t.peer, t.step, path);
  } catch (const SharedFileError& e) {
    // The node's readers find no file and load their own copies (and say so).
    log_->warn("teacher sharing: peer {} at step {}: {}; each rank of this node holds its own copy", t.peer, t.step,
               e.what());
  }
}

std::unique_ptr<Teacher> TeacherPool::map_shared(int peer, std::int64_t step, std::string& why) {
  const auto t0 = Clock::now();
  const std::string path = shared_teacher_path(sharing_, peer, step, cfg_.codistill.teacher_weights);
  try {
    auto mapping = SharedMapping::open(path);
    const SharedTeacherMeta meta = parse_meta(mapping->meta(), path);
    if (meta.step != step)
      throw SharedFileError(fmt::format("shared file {} holds step {}, not {}", path, meta.step, step));
    const std::string who = fmt::format("peer worker {} (shared file {})", peer, path);
    check_teacher_fits(meta.model_yaml, model_cfg_, who);
    auto t = std::make_unique<Teacher>();
    t->peer = peer;
    t->step = step;
    t->path = meta.source;
    t->file = meta.teacher_file ? checkpoint::FileKind::teacher : checkpoint::FileKind::checkpoint;
    // The model is built in the writer's layout; its values come from the mapping.
    const ModelConfig mc = model_from_yaml(meta.model_yaml, who + " model attribute");
    Rng unused = Rng::placeholder();
    t->model = factory_ ? factory_(mc, unused) : build_model(mc, unused);
    if (t->model.fingerprint() != meta.fingerprint)
      throw SharedFileError(fmt::format("{}: the model rebuilt has fingerprint {}, the file says {}", who,
                                        t->model.fingerprint(), meta.fingerprint));
    t->model.drop_grads();
    if (cfg_.codistill.teacher_weights == "bf16") t->model.to_bf16_weights();
    adopt_shared(t->model, mapping);
    t->model.to_device_uninitialized(device_, queue_options_);  // the CPU: the blocks stay where they are
    t->loaded = t->model.queue().make_event();
    t->model.queue().record(*t->loaded);
    t->shared_path = path;
    t->load_ms = ms_since(t0);
    return t;
  } catch (const TrainingError&) {
    throw;  // a model that cannot teach this worker's: as from its checkpoint
  } catch (const std::exception& e) {  // a file not there or damaged, a model that does not build
    why = e.what();
    return nullptr;
  }
}

}  // namespace codistill
