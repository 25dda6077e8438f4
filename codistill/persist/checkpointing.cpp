#include "codistill/persist/checkpointing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <new>

#include "checkpoint/fault_seam.hpp"
#include "codistill/persist/run_dir.hpp"

namespace codistill {

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void CheckpointManager::arm_faults(std::int64_t step, const std::string& path, const std::string& teacher_path) const {
  // A test's plan (checkpoint/fault_seam.hpp): both files of a planned step fail part-way.
  const fault_seam::Plan plan = fault_seam::plan();
  const bool kill = fault_seam::listed(plan.kill_checkpoint_steps, step);
  if (!kill && !fault_seam::listed(plan.fail_checkpoint_steps, step)) return;
  for (const std::string& p : {path, teacher_path})
    if (!p.empty()) fault_seam::arm_write(p, fault_seam::WriteFault{4096, kill});
}

std::string CheckpointManager::teacher_path_for(std::int64_t step, bool last) const {
  const auto& c = cfg_.checkpoint;
  if (c.teacher_dtype == "none") return {};
  // Every k-th on the grid of checkpoint.every; the last one of a run (or of a stop) always:
  // it is what peers that finish later learn from.
  const bool due = last || step >= cfg_.train.steps || c.teacher_every <= 1 || c.every <= 0 ||
                   (step % c.every == 0 && (step / c.every) % c.teacher_every == 0);
  return due ? store_.teacher_path(cfg_.run.worker, step) : std::string();
}

checkpoint::ElemType CheckpointManager::teacher_type() const {
  return cfg_.checkpoint.teacher_dtype == "bf16" ? checkpoint::ElemType::bf16 : checkpoint::ElemType::f32;
}

struct CheckpointManager::Pending {
  // The parameters and slots (the live blocks, or a device's host copy of them) plus copies
  // of the small state, taken at the step.
  StateView view;
  Optimizer* optimizer = nullptr;  // whose live blocks the view borrows
  std::int64_t step = 0;
  std::string path;
  std::string teacher_path;  // empty: no teacher file beside it
  // The copy of a device's host copy on a helper thread; not valid where the view borrows
  // the live blocks (the next update keeps them, out of place, or flush() copies them).
  std::future<checkpoint::CheckpointData> copy;
  double stall_ms = 0;
};

CheckpointManager::CheckpointManager(const Config& cfg, std::shared_ptr<spdlog::logger> log)
    : cfg_(cfg), log_(std::move(log)), store_(cfg.run.dir) {
  if (cfg.checkpoint.async) writer_ = std::make_unique<checkpoint::AsyncWriter>();
  // Sync codistillation: a peer up to reload_every steps behind needs this worker's
  // checkpoint of its step - reload_every, and a peer restarting from its checkpoint c
  // (while this worker waits at c + 2 * reload_every, having published everything up to
  // there) needs the teacher it had, of step c - 2 * reload_every: retention must keep
  // 4 * reload_every of history. (3 * reload_every, as before, let a chaos test's restart
  // wait in vain for a checkpoint already deleted.)
  keep_ = cfg.checkpoint.keep;
  const auto& cd = cfg.codistill;
  if (cd.enabled && cd.mode == "sync" && cfg.checkpoint.every > 0)
    keep_ = std::max<int>(keep_, static_cast<int>(4 * cd.reload_every / cfg.checkpoint.every + 1));
}

CheckpointManager::~CheckpointManager() {
  if (pending_ && pending_->copy.valid()) pending_->copy.wait();
}

std::optional<checkpoint::LoadedCheckpoint> CheckpointManager::find_resume_point(bool resume,
                                                                                const std::string& fingerprint) {
  const int w = cfg_.run.worker;
  for (const auto& path : store_.cleanup_temp_files(w)) log_->info("removed a dead writer's temp file {}", path);
  auto files = store_.checkpoints(w);
  if (files.empty()) return std::nullopt;
  if (!resume)
    throw RunDirError("worker directory " + store_.worker_dir(w) + " already holds " + std::to_string(files.size()) +
                      " checkpoint(s) (newest " + files.back().path +
                      "); --no-resume never overwrites: choose another --run-dir or resume");
  checkpoint::ReadOptions opts;
  opts.expected_fingerprint = fingerprint;
  auto loaded = store_.load_freshest(w, opts);
  if (!loaded) {
    std::string why;
    for (const auto& f : files) {
      auto v = checkpoint::verify(f.path, fingerprint);
      why += "\n  " + f.path + ": " + (v.valid ? "valid" : v.reason);
    }
    throw std::runtime_error("worker directory " + store_.worker_dir(w) +
                             " holds checkpoints but none can be resumed from:" + why);
  }
  for (const auto& s : loaded->skipped) log_->warn("skipped checkpoint {}", s);
  last_saved_step_ = loaded->file.step;
  return loaded;
}

void CheckpointManager::save(const WorkerState& w, bool overlap) {
  if (w.step == last_saved_step_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = store_.checkpoint_path(cfg_.run.worker, w.step);
  const std::string teacher_path = teacher_path_for(w.step, !overlap);
  StateView sv = make_state_view(w);
  last_saved_step_ = w.step;
  if (!writer_) {
    write_here(sv.view, w.step, path, teacher_path, t0);
    return;
  }
  const bool wait = cfg_.checkpoint.on_busy == "wait";
  if (!wait && writer_->busy()) {
    log_->warn("checkpoint at step {} skipped: the previous write is still in flight (checkpoint.on_busy: skip)",
               w.step);
    last_saved_step_ = -1;
    return;
  }
  flush();  // at most one snapshot in the making
  pending_ = std::make_unique<Pending>();
  pending_->view = std::move(sv);
  pending_->optimizer = w.optimizer;
  pending_->step = w.step;
  pending_->path = path;
  pending_->teacher_path = teacher_path;
  if (!pending_->view.borrows_live_blocks) {
    const checkpoint::CheckpointView* view = &pending_->view.view;
    checkpoint::CheckpointData buffer;
    if (!spare_.empty()) {
      buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    pending_->copy = std::async(std::launch::async, [view, b = std::move(buffer)]() mutable {
      checkpoint::snapshot_into(*view, b);
      return std::move(b);
    });
  }
  pending_->stall_ms = ms_since(t0);
  if (!overlap) flush();
}

void CheckpointManager::write_here(const checkpoint::CheckpointView& view, std::int64_t step,
                                   const std::string& path, const std::string& teacher_path,
                                   std::chrono::steady_clock::time_point t0) {
  checkpoint::WriteOutcome o;
  o.path = path;
  o.step = step;
  arm_faults(step, path, teacher_path);
  checkpoint::WriteJob teacher;  // the teacher file first, as the writer thread does
  teacher.teacher_path = teacher_path;
  teacher.teacher_type = teacher_type();
  o.teacher = checkpoint::write_teacher_of(teacher, view);
  try {
    o.result = checkpoint::write(path, view);
    o.ok = true;
    store_.retain(cfg_.run.worker, keep_, step);
    try {
      store_.cleanup_temp_files(cfg_.run.worker);  // see after_publish in submit()
    } catch (const std::exception& e) {
      log_->warn("after checkpoint {}: {}", step, e.what());
    }
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  o.write_ms = ms_since(t0);
  stall_ms_[step] = o.write_ms;
  report(o);
}

void CheckpointManager::flush() {
  if (!pending_) return;
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::CheckpointData snapshot;
  if (!pending_->copy.valid()) collect_lent_blocks();  // outside the try: a metrics failure ends the run
  std::optional<OptimizerBlocks> copy;
  try {
    if (pending_->copy.valid()) {
      snapshot = pending_->copy.get();
    } else {
      // No out-of-place update will keep this state (the last step, a stop): the live blocks
      // are copied into the spare ones, which the write then holds, as after such an update.
      const OptimizerBlocks live = pending_->optimizer->live_blocks();
      copy = spare_or_new_blocks(*pending_->optimizer);
      copy->values.copy_from(live.values);
      for (auto& [name, slot] : copy->slots) slot.copy_from(live.slots.at(name));
      const std::vector<kernels::Tensor> from = block_list(live), to = block_list(*copy);
      snapshot = checkpoint::snapshot_sharing(pending_->view.view, from, &to);
      lent_[pending_->step] = std::move(*copy);
    }
  } catch (const std::exception& e) {  // e.g. out of host memory for the copy
    log_->error("checkpoint at step {} failed while copying the state: {}", pending_->step, e.what());
    if (copy && copy->values.defined()) spare_blocks_.push_back(std::move(*copy));
    if (last_saved_step_ == pending_->step) last_saved_step_ = -1;
    pending_.reset();
    return;
  }
  submit(std::move(snapshot), ms_since(t0));
}

std::optional<OptimizerBlocks> CheckpointManager::before_update(Optimizer& optimizer) {
  if (!pending_) return std::nullopt;
  if (pending_->copy.valid()) {  // a copy behind the passes
    flush();
    return std::nullopt;
  }
  const auto t0 = std::chrono::steady_clock::now();
  collect_lent_blocks();
  std::optional<OptimizerBlocks> into;
  try {
    if (fault_seam::listed(fault_seam::plan().no_memory_steps, pending_->step)) throw std::bad_alloc();
    into = spare_or_new_blocks(optimizer);
  } catch (const std::exception& e) {  // out of host memory for the blocks
    // The live blocks are still the checkpoint's state: written from here, on this thread
    // (the writer is idle: collect_lent_blocks, or nothing was lent), before the update.
    log_->warn("checkpoint at step {}: no memory for an out-of-place update ({}); writing it synchronously",
               pending_->step, e.what());
    for (auto& o : writer_->wait()) report(o);
    write_here(pending_->view.view, pending_->step, pending_->path, pending_->teacher_path, t0);  // stall: the write
    pending_.reset();
    return std::nullopt;
  }
  pending_->stall_ms += ms_since(t0);
  return into;
}

void CheckpointManager::collect_lent_blocks() {
  // The blocks the last out-of-place update read come back once their write is reported;
  // while one is in flight (checkpoint.on_busy: wait) this waits for it, as the hand-over
  // to the writer would, rather than fault in a third copy of the state.
  if (spare_blocks_.empty() && !lent_.empty())
    for (auto& o : writer_->wait()) report(o);
}

OptimizerBlocks CheckpointManager::spare_or_new_blocks(Optimizer& optimizer) {
  if (spare_blocks_.empty()) return optimizer.blocks_like();
  OptimizerBlocks b = std::move(spare_blocks_.back());
  spare_blocks_.pop_back();
  return b;
}

std::vector<kernels::Tensor> CheckpointManager::block_list(const OptimizerBlocks& b) {
  std::vector<kernels::Tensor> out{b.values};
  for (const auto& [name, slot] : b.slots) out.push_back(slot);
  return out;
}

double CheckpointManager::in_place_update_s() const {
  if (in_place_update_s_.empty()) return 0.0;  // unknown: the whole out-of-place update counts
  std::vector<double> v(in_place_update_s_.begin(), in_place_update_s_.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void CheckpointManager::after_update(std::optional<OptimizerBlocks> before, double update_s) {
  if (!before) {
    in_place_update_s_.push_back(update_s);
    if (in_place_update_s_.size() > kUpdateSamples) in_place_update_s_.pop_front();
    return;
  }
  if (!pending_ || pending_->copy.valid())
    throw std::logic_error("CheckpointManager::after_update: an out-of-place update without a snapshot waiting");
  const auto t0 = std::chrono::steady_clock::now();
  // What the update out of place took beyond one in place: an estimate against the median
  // of the last in-place updates (bench/run_checkpoint_stall.sh also times whole runs).
  pending_->stall_ms += 1000.0 * std::max(0.0, update_s - in_place_update_s());
  checkpoint::CheckpointData snapshot;
  try {
    // Views of the blocks the update read; the small state is copied.
    snapshot = checkpoint::snapshot_sharing(pending_->view.view, block_list(*before));
  } catch (const std::exception& e) {
    log_->error("checkpoint at step {} failed while taking the state: {}", pending_->step, e.what());
    if (last_saved_step_ == pending_->step) last_saved_step_ = -1;
    pending_.reset();
    spare_blocks_.push_back(std::move(*before));
    return;
  }
  lent_[pending_->step] = std::move(*before);
  submit(std::move(snapshot), ms_since(t0));
}

void CheckpointManager::submit(checkpoint::CheckpointData snapshot, double wait_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::WriteJob job;
  job.path = pending_->path;
  job.snapshot = std::move(snapshot);
  arm_faults(pending_->step, job.path, pending_->teacher_path);
  job.teacher_path = pending_->teacher_path;
  job.teacher_type = teacher_type();
  const int worker = cfg_.run.worker, keep = keep_;
  const std::int64_t step = pending_->step;
  // After retention, this process's own leftovers: a write that failed part-way in a
  // folder that went unwritable (permissions, a failing mount) could not remove its temp
  // file then; no other write of this process is in flight now.
  job.after_publish = [this, worker, keep, step](const checkpoint::WriteResult&) {
    store_.retain(worker, keep, step);
    store_.cleanup_temp_files(worker);
  };
  const bool wait = cfg_.checkpoint.on_busy == "wait";
  if (wait && writer_->busy())
    log_->info("checkpoint at step {} waits for the previous write (checkpoint.on_busy: wait)", step);
  const bool accepted = writer_->submit(std::move(job), wait);
  stall_ms_[step] = pending_->stall_ms + wait_ms + ms_since(t0);
  pending_.reset();
  if (!accepted) {
    log_->warn("checkpoint at step {} skipped: the previous write is still in flight (checkpoint.on_busy: skip)",
               step);
    stall_ms_.erase(step);
    if (last_saved_step_ == step) last_saved_step_ = -1;
    if (auto lent = lent_.find(step); lent != lent_.end()) {
      spare_blocks_.push_back(std::move(lent->second));
      lent_.erase(lent);
    }
  }
  poll();
}

void CheckpointManager::prepare(const WorkerState& w) {
  if (!writer_ || cfg_.checkpoint.every <= 0) return;
  StateView sv = make_state_view(w);
  if (sv.borrows_live_blocks) {
    if (!spare_blocks_.empty()) return;
    // Touched now (zeroed), so that the first out-of-place update does not fault them in.
    OptimizerBlocks b = w.optimizer->blocks_like();
    kernels::Queue& q = w.model->queue();
    q.zero(b.values);
    for (auto& [name, slot] : b.slots) q.zero(slot);
    spare_blocks_.push_back(std::move(b));
  } else if (spare_.empty()) {
    spare_.push_back(checkpoint::snapshot(sv.view));
  }
}

void CheckpointManager::poll() {
  if (!writer_) return;
  for (auto& o : writer_->poll()) report(o);
}

void CheckpointManager::finish() {
  if (!writer_) return;
  flush();
  for (auto& o : writer_->wait()) report(o);
}

void CheckpointManager::report(checkpoint::WriteOutcome& o) {
  if (auto lent = lent_.find(o.step); lent != lent_.end()) {
    // The snapshot is views of lent blocks: the blocks (not the views) are kept for reuse.
    if (spare_blocks_.empty()) spare_blocks_.push_back(std::move(lent->second));
    lent_.erase(lent);
  } else if (!o.snapshot.params.empty() && spare_.empty()) {
    spare_.push_back(std::move(o.snapshot));
  }
  double stall = stall_ms_.count(o.step) ? stall_ms_[o.step] : 0.0;
  stall_ms_.erase(o.step);
  if (o.teacher && !o.teacher->ok)
    log_->warn("teacher file at step {} failed: {}; peers read the checkpoint instead", o.step, o.teacher->error);
  if (!o.ok) {
    log_->error("checkpoint at step {} failed: {}; earlier checkpoints are kept and training goes on", o.step,
                o.error);
    if (last_saved_step_ == o.step) last_saved_step_ = -1;
    return;
  }
  if (!o.after_error.empty()) log_->warn("checkpoint retention after step {}: {}", o.step, o.after_error);
  if (metrics_) {
    nlohmann::json fields = {{"path", o.path}, {"bytes", o.result.bytes}, {"write_ms", o.write_ms}, {"stall_ms", stall}};
    if (o.teacher && o.teacher->ok) {
      fields["teacher_path"] = o.teacher->path;
      fields["teacher_bytes"] = o.teacher->result.bytes;
      fields["teacher_write_ms"] = o.teacher->write_ms;
    }
    metrics_->emit("checkpoint", o.step, fields);
  }
  log_->info("checkpoint {} ({:.1f} MB, write {:.0f} ms, training stalled {:.1f} ms)", o.path,
             static_cast<double>(o.result.bytes) / 1e6, o.write_ms, stall);
}

}  // namespace codistill
