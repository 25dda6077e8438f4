#include "codistill/teachers/teachers.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "codistill/persist/worker_state.hpp"
#include "codistill/teachers/precision.hpp"
#include "codistill/util/config_error.hpp"
#include "codistill/util/run_errors.hpp"

namespace codistill {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
}  // namespace

TeacherPool::TeacherPool(const Config& cfg, ModelConfig model_cfg, std::shared_ptr<spdlog::logger> log,
                         bool follower, ModelFactory factory)
    : cfg_(cfg), model_cfg_(std::move(model_cfg)), factory_(std::move(factory)), log_(std::move(log)),
      store_(cfg.run.dir),
      cohort_(cfg.run.dir, cfg.run.worker, cfg.run.workers, cfg.codistill.teachers, cfg.codistill.retired == "teach"),
      device_(kernels::Device::parse(cfg.device)) {
  queue_options_.allow_tf32 = cfg.train.allow_tf32;
  queue_options_.compute = teacher_compute(cfg);
  queue_options_.frozen_params = true;  // a teacher's weights are written once, at upload
  // The folders there now: a worker that joins a running run starts with the peers it finds.
  if (cfg.codistill.enabled && !follower) cohort_.refresh();
  peers_ = cohort_.teaching();
  // The watcher runs even while no peer is there yet: one may join later.
  if (cfg.codistill.enabled && cfg.codistill.mode == "async" && !follower) thread_ = std::thread([this] { watch(); });
}

std::size_t TeacherPool::max_teachers() const {
  return static_cast<std::size_t>(cfg_.codistill.teachers > 0 ? cfg_.codistill.teachers : kMaxTeachers);
}

TeacherPool::~TeacherPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::int64_t> TeacherPool::staleness(std::int64_t step) const {
  if (teachers_.empty()) return std::nullopt;
  std::int64_t oldest = teachers_.front()->step;
  for (const auto& t : teachers_) oldest = std::min(oldest, t->step);
  return step - oldest;
}

void TeacherPool::check_fits(int peer, const std::string& path) {
  checkpoint::CheckpointMeta meta;
  try {
    meta = checkpoint::read_meta(path);
  } catch (const std::exception&) {
    return;  // vanished or unreadable: the load below skips it with a reason
  }
  check_teacher_fits(meta.model, model_cfg_, fmt::format("peer worker {} (checkpoint {})", peer, path));
}

std::unique_ptr<Teacher> TeacherPool::make_teacher(int peer, const checkpoint::CheckpointData& data,
                                                   const std::string& path, double load_ms, checkpoint::FileKind file) {
  auto t = std::make_unique<Teacher>();
  t->peer = peer;
  t->step = data.meta.step;
  t->path = path;
  t->file = file;
  t->bytes_read = data.bytes_read;
  t->model = model_from_checkpoint(data, factory_);
  upload(*t, &data.meta);
  t->load_ms = load_ms;
  return t;
}

void TeacherPool::upload(Teacher& t, const checkpoint::CheckpointMeta* meta) {
  // The model was built and filled on the host; its blocks move to the device through the
  // backend's staging memory (the block itself on the CPU: no copy), queued on the
  // teacher's own queue, which the trainer waits for (Event::ready / synchronize) before
  // the first forward.
  Model& m = t.model;
  m.drop_grads();
  // codistill.teacher_weights: bf16: the matrices held as bf16 from here on (2 bytes per
  // parameter, no float32 copy kept), rounded on the host before anything moves.
  if (cfg_.codistill.teacher_weights == "bf16") m.to_bf16_weights();
  // Peers' teachers only: fixed teachers load on every rank at once, with no barrier
  // between a writer and its readers.
  if (meta && t.peer >= 0 && sharing_.writer) share(t, *meta);
  ParamArena& arena = m.arena();
  const kernels::Tensor host_values = arena.values();
  const kernels::Tensor host_buffers = arena.buffers();
  const kernels::Tensor host_matrices = arena.matrices();
  m.to_device_uninitialized(device_, queue_options_);
  kernels::Queue& q = m.queue();
  auto send = [&](kernels::Tensor& block, const kernels::Tensor& host, kernels::Tensor& stage) {
    stage = q.backend().staging_for(block);
    if (!stage.same_memory(host)) stage.copy_from(host);
    q.copy(block, stage);
  };
  kernels::Tensor buffer_stage, matrix_stage;
  send(arena.values(), host_values, t.staging);
  if (host_buffers.defined()) send(arena.buffers(), host_buffers, buffer_stage);
  if (host_matrices.defined()) send(arena.matrices(), host_matrices, matrix_stage);
  t.loaded = q.make_event();
  q.record(*t.loaded);
  // The stages not kept in t.staging must outlive their copies (small, rare; the CPU's are
  // the blocks themselves). bf16 matrices are the CPU's only (Model::to_device refuses others).
  if ((buffer_stage.defined() && !buffer_stage.same_memory(arena.buffers())) ||
      (matrix_stage.defined() && !matrix_stage.same_memory(arena.matrices())))
    q.synchronize();
}

std::vector<std::unique_ptr<Teacher>> TeacherPool::take_loaded(std::vector<std::unique_ptr<Teacher>> fresh, bool wait) {
  for (auto& t : fresh) {
    // A newer load of a peer supersedes one still in flight (whose destructor waits for it).
    std::erase_if(staged_, [&](const auto& u) { return u->peer == t->peer; });
    staged_.push_back(std::move(t));
  }
  std::vector<std::unique_ptr<Teacher>> done;
  for (auto it = staged_.begin(); it != staged_.end();) {
    if (wait) (*it)->loaded->synchronize();
    if (wait || (*it)->loaded->ready()) {
      (*it)->staging = kernels::Tensor();
      done.push_back(std::move(*it));
      it = staged_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

std::unique_ptr<Teacher> TeacherPool::load_async(int peer, std::int64_t held_step, std::int64_t own_step) {
  std::string unreadable;
  auto files = store_.checkpoints(peer, &unreadable);
  PeerTrack track;
  {
    std::lock_guard lock(mu_);
    track = tracks_[peer];
  }
  // A folder that cannot be listed (permissions, a failing mount) is worth a word, once
  // until it reads again; the teacher held meanwhile stays.
  if (!unreadable.empty()) {
    std::lock_guard lock(mu_);
    if (!track.unlistable) warnings_.push_back(fmt::format("peer {}: {}; keeping the teacher held", peer, unreadable));
    tracks_[peer].unlistable = true;
    return nullptr;
  }
  if (track.unlistable) {
    std::lock_guard lock(mu_);
    warnings_.push_back(fmt::format("peer {}: its folder reads again", peer));
    tracks_[peer].unlistable = false;
  }
  const std::int64_t newest = files.empty() ? -1 : files.back().step;
  // A peer that stopped publishing (dead, stuck or slow) is worth a word, once per stall.
  const std::int64_t patience = 2 * std::max(cfg_.codistill.reload_every, cfg_.checkpoint.every);
  const bool stalled = newest >= 0 && own_step - newest > patience;
  if (stalled && !track.silent) {
    std::lock_guard lock(mu_);
    warnings_.push_back(fmt::format("peer {} has published nothing since step {} ({} steps behind this "
                                    "worker): it may have stopped; going on with what it last published",
                                    peer, newest, own_step - newest));
  }
  {
    std::lock_guard lock(mu_);
    tracks_[peer].silent = stalled;
  }
  // The peer's teacher file newer than the one held, else (none, or none valid) its
  // checkpoint as before teacher files existed.
  if (auto t = load_freshest(peer, checkpoint::FileKind::teacher, held_step, own_step, 0)) return t;
  if (files.empty() || newest <= held_step) return nullptr;
  return load_freshest(peer, checkpoint::FileKind::checkpoint, held_step, own_step, files.size());
}

std::unique_ptr<Teacher> TeacherPool::load_freshest(int peer, checkpoint::FileKind kind, std::int64_t held_step,
                                                    std::int64_t own_step, std::size_t listed) {
  const bool teacher_file = kind == checkpoint::FileKind::teacher;
  const auto files = store_.files(kind, peer);
  if (files.empty() || files.back().step <= held_step) return nullptr;
  // Teacher files past max_staleness are passed over (the checkpoint path may hold a newer
  // one, with teacher_every > 1); the checkpoint path says why it uses none.
  std::int64_t after = held_step;
  if (teacher_file && cfg_.codistill.max_staleness > 0)
    after = std::max(after, own_step - cfg_.codistill.max_staleness - 1);
  check_fits(peer, files.back().path);
  auto t0 = Clock::now();
  auto loaded = store_.load_freshest(peer, teacher_read_options(), {}, kind, after);
  std::lock_guard lock(mu_);
  if (loaded)
    for (const auto& s : loaded->skipped) warnings_.push_back(fmt::format("peer {}: skipped {}", peer, s));
  if (!loaded) {
    if (teacher_file) {
      if (files.back().step > after)
        warnings_.push_back(fmt::format("peer {}: no valid teacher file newer than step {}; reading its checkpoint",
                                        peer, after));
      return nullptr;
    }
    warnings_.push_back(fmt::format("peer {}: no valid checkpoint among {} file(s); going on without it", peer,
                                    listed));
    return nullptr;
  }
  if (loaded->file.step <= held_step) return nullptr;
  const std::int64_t lag = own_step - loaded->file.step;
  if (cfg_.codistill.max_staleness > 0 && lag > cfg_.codistill.max_staleness) {
    warnings_.push_back(fmt::format("peer {} lags: its freshest checkpoint (step {}) is {} steps behind, more "
                                    "than codistill.max_staleness {}; not used",
                                    peer, loaded->file.step, lag, cfg_.codistill.max_staleness));
    return nullptr;
  }
  return make_teacher(peer, loaded->data, loaded->file.path, ms_since(t0), kind);
}

void TeacherPool::watch() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || request_.has_value(); });
    if (stop_) return;
    const std::int64_t own = *request_;
    request_.reset();
    const std::vector<int> peers = request_peers_;
    std::vector<std::int64_t> held;
    for (int p : peers) held.push_back(tracks_[p].held);
    busy_ = true;
    lock.unlock();
    std::vector<std::unique_ptr<Teacher>> loaded;
    std::string fatal;
    for (std::size_t i = 0; i < peers.size() && fatal.empty(); ++i) {
      try {
        if (auto t = load_async(peers[i], held[i], own)) loaded.push_back(std::move(t));
      } catch (const TrainingError& e) {
        fatal = e.what();
      } catch (const std::exception& e) {  // a broken model attribute, out of memory...
        std::lock_guard g(mu_);
        warnings_.push_back(fmt::format("peer {}: {}", peers[i], e.what()));
      }
    }
    lock.lock();
    for (auto& t : loaded) {
      tracks_[t->peer].held = t->step;
      ready_.push_back(std::move(t));
    }
    if (!fatal.empty()) fatal_ = fatal;
    busy_ = false;
  }
}

void TeacherPool::at_step(std::int64_t step, MetricsWriter* metrics) {
  const auto& c = cfg_.codistill;
  if (!c.enabled) return;
  const std::int64_t R = c.reload_every;
  const bool reload_now = step % R == 0 && step + R > c.burn_in;
  if (reload_now) refresh_cohort(metrics, step);
  std::vector<std::unique_ptr<Teacher>> adopted;
  if (c.mode == "sync") {
    // The checkpoints of step - R exist from the second exchange on (none at step 0).
    if (reload_now && step >= 2 * R && !peers_.empty()) adopted = load_quorum(step, metrics);
  } else {
    std::vector<std::string> warnings;
    {
      std::lock_guard lock(mu_);
      if (!fatal_.empty()) throw TrainingError(fatal_);
      if (reload_now && step >= R && !busy_ && !peers_.empty()) {
        request_ = step;
        request_peers_ = peers_;
        cv_.notify_all();
      }
      for (auto& t : ready_) adopted.push_back(std::move(t));
      ready_.clear();
      warnings.swap(warnings_);
    }
    for (const auto& w : warnings) log_->warn("{}", w);
  }
  // A load started before a peer stopped teaching (codistill.retired drop) is not taken.
  std::erase_if(adopted, [&](const auto& t) { return std::find(peers_.begin(), peers_.end(), t->peer) == peers_.end(); });
  // Async mode never stalls a step for an upload in flight; sync mode waits for it.
  adopt(screen(take_loaded(std::move(adopted), /*wait=*/c.mode == "sync"), metrics, step), metrics, step);
}

void TeacherPool::resume(const std::vector<checkpoint::TeacherStep>& teacher_steps, MetricsWriter* metrics,
                         std::int64_t step) {
  if (!cfg_.codistill.enabled) return;
  std::vector<std::unique_ptr<Teacher>> adopted;
  for (const auto& ts : teacher_steps) {
    const int peer = static_cast<int>(ts.worker);
    if (std::find(peers_.begin(), peers_.end(), peer) == peers_.end()) continue;  // one that no longer teaches
    if (cfg_.codistill.mode == "sync") {
      adopted.push_back(load_exact(peer, ts.step));
      continue;
    }
    try {
      adopted.push_back(load_step(peer, ts.step, 0));
    } catch (const std::exception& e) {
      log_->warn("peer {}: the teacher in use before the restart (step {}) is gone ({}); the next reload finds "
                 "its freshest",
                 peer, ts.step, e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& t : adopted) tracks_[t->peer].held = t->step;
  }
  adopt(take_loaded(std::move(adopted), /*wait=*/true), metrics, step);
}

void TeacherPool::load_fixed(const std::vector<FixedTeacherFile>& files, const data::Normalization& normalization,
                             MetricsWriter* metrics, std::int64_t step) {
  std::vector<std::unique_ptr<Teacher>> loaded;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const FixedTeacherFile& f = files[i];
    const std::string who = fmt::format("fixed teacher {} (from '{}')", f.path, f.source);
    const auto t0 = Clock::now();
    const checkpoint::CheckpointData data = read_fixed_teacher(f);
    check_teacher_fits(data.meta.model, model_cfg_, who);
    // The teacher sees the student's inputs, normalized the student's way: a teacher
    // trained on another mapping of the pixels would be fed inputs it never saw.
    const data::Normalization theirs = normalization_from_checkpoint(data);
    const double tolerance = 1e-3 * std::max(1.0, std::abs(normalization.scale));
    if (theirs.kind == "stored" && (std::abs(theirs.shift - normalization.shift) > tolerance ||
                                    std::abs(theirs.scale - normalization.scale) > tolerance))
      throw TrainingError(fmt::format("{} normalized its inputs with shift {:.6g}, scale {:.6g}; this worker uses "
                                      "shift {:.6g}, scale {:.6g} (data.normalize and the data must match the "
                                      "teacher's)",
                                      who, theirs.shift, theirs.scale, normalization.shift, normalization.scale));
    auto t = make_teacher(-static_cast<int>(i) - 1, data, f.path, ms_since(t0));
    loaded.push_back(std::move(t));
  }
  for (auto& t : take_loaded(std::move(loaded), /*wait=*/true)) {
    if (gate_) {
      t->verdict = gate_->judge(t->model, step);
      if (!t->verdict->accepted)
        throw ConfigError("codistill.fixed_teachers", "", 0,
                          fmt::format("fixed teacher {} (from '{}') is refused by the teacher gate: {} (codistill.gate)",
                                      t->path, files[static_cast<std::size_t>(-t->peer - 1)].source,
                                      t->verdict->reason));
    }
    nlohmann::json fields = teacher_event_fields(*t);
    fields["path"] = t->path;
    if (metrics) metrics->emit("teacher", step, fields);
    log_->info("fixed teacher {}: {} at step {} (loaded in {:.0f} ms)", t->label(), t->path, t->step, t->load_ms);
    fixed_.push_back(std::move(t));
  }
}

void TeacherPool::adopt(std::vector<std::unique_ptr<Teacher>> adopted, MetricsWriter* metrics, std::int64_t step) {
  for (auto& t : adopted) {
    if (metrics) metrics->emit("teacher", step, teacher_event_fields(*t));
    log_->info("teacher: peer {} at step {} ({}, loaded in {:.0f} ms{})", t->peer, t->step, t->path, t->load_ms,
               t->verdict ? fmt::format("; probe loss {:.4f}, this worker's {:.4f}, scored in {:.0f} ms",
                                        t->verdict->loss, t->verdict->own_loss, t->verdict->ms)
                          : "");
    auto same = std::find_if(teachers_.begin(), teachers_.end(), [&](const auto& u) { return u->peer == t->peer; });
    if (same != teachers_.end()) *same = std::move(t);
    else teachers_.push_back(std::move(t));
  }
  std::sort(teachers_.begin(), teachers_.end(), [](const auto& a, const auto& b) { return a->peer < b->peer; });
}

}  // namespace codistill
