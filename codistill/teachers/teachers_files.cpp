// TeacherPool's reads of a peer's files at a given step: its teacher file when there is
// one that reads, else its checkpoint (teachers.hpp; docs/checkpoint-format.md, "Teacher
// files"). A worker publishes a step's teacher file just before the checkpoint, so once the
// checkpoint is seen, whether the teacher file exists is settled: sync mode decides the
// same way on every run.
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "codistill/teachers/teachers.hpp"
#include "codistill/util/run_errors.hpp"

namespace codistill {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

namespace {
// Whether `step`'s file of `kind` is in the peer's folder, from a listing rather than a
// lookup by name: a network file system may answer a lookup of a file that did not exist a
// moment ago from its negative cache (GlusterFS nl-cache, NFS lookupcache=all) for seconds,
// while a listing reads the folder itself (docs/failure-behaviour.md).
bool listed(const checkpoint::RunStore& store, checkpoint::FileKind kind, int peer, std::int64_t step) {
  for (const auto& f : store.files(kind, peer))
    if (f.step == step) return true;
  return false;
}
}  // namespace

std::unique_ptr<Teacher> TeacherPool::try_exact(int peer, std::int64_t peer_step, bool& teacher_failed,
                                                std::string& why) {
  // Seen before the teacher file is tried: then a teacher file not found now never comes.
  const bool published = listed(store_, checkpoint::FileKind::checkpoint, peer, peer_step);
  const auto t0 = Clock::now();
  if (!teacher_failed && listed(store_, checkpoint::FileKind::teacher, peer, peer_step)) {
    const std::string teacher_path = store_.teacher_path(peer, peer_step);
    try {
      check_fits(peer, teacher_path);
      auto data = checkpoint::read(teacher_path, teacher_read_options());
      return make_teacher(peer, data, teacher_path, ms_since(t0), checkpoint::FileKind::teacher);
    } catch (const TrainingError&) {
      throw;
    } catch (const std::exception& e) {
      teacher_failed = true;
      log_->warn("peer {}: skipped teacher file {}: {}; reading its checkpoint", peer, teacher_path, e.what());
    }
  }
  if (!published) {
    why = "not published yet";
    return nullptr;
  }
  const std::string path = store_.checkpoint_path(peer, peer_step);
  try {
    check_fits(peer, path);
    auto data = checkpoint::read(path, teacher_read_options());
    return make_teacher(peer, data, path, ms_since(t0));
  } catch (const TrainingError&) {
    throw;
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

std::unique_ptr<Teacher> TeacherPool::load_exact(int peer, std::int64_t peer_step) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(cfg_.codistill.sync_timeout_s);
  std::string why = "not published yet";
  bool teacher_failed = false;  // a teacher file that is there but does not read: warned once
  for (;;) {
    if (auto t = try_exact(peer, peer_step, teacher_failed, why)) {
      t->load_ms = ms_since(t0);
      return t;
    }
    if (Clock::now() > deadline)
      throw TrainingError(fmt::format("codistill.mode sync: waited {} s (codistill.sync_timeout_s) for peer {}'s "
                                      "checkpoint of step {} ({}): {}",
                                      cfg_.codistill.sync_timeout_s, peer, peer_step,
                                      store_.checkpoint_path(peer, peer_step), why));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::unique_ptr<Teacher> TeacherPool::load_step(int peer, std::int64_t peer_step, double load_ms) {
  const std::string teacher_path = store_.teacher_path(peer, peer_step);
  std::error_code ec;
  if (std::filesystem::exists(teacher_path, ec)) {
    try {
      check_fits(peer, teacher_path);
      return make_teacher(peer, checkpoint::read(teacher_path, teacher_read_options()), teacher_path, load_ms,
                          checkpoint::FileKind::teacher);
    } catch (const TrainingError&) {
      throw;
    } catch (const std::exception& e) {
      log_->warn("peer {}: skipped teacher file {}: {}; reading its checkpoint", peer, teacher_path, e.what());
    }
  }
  const std::string path = store_.checkpoint_path(peer, peer_step);
  check_fits(peer, path);
  return make_teacher(peer, checkpoint::read(path, teacher_read_options()), path, load_ms);
}

}  // namespace codistill
