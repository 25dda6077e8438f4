#pragma once
// The teacher pool and peer watcher of online codistillation (DESIGN.md sections 1, 6, 8).
// A background thread finds each peer's freshest valid checkpoint, loads and verifies it
// into a forward-only copy of the model, and hands it over; the trainer swaps new teachers
// in at a step boundary (adopt()), so loading never stalls a step.
//   async mode: every reload_every steps, each peer's freshest valid checkpoint that is
//               newer than the one held and not more than max_staleness steps behind;
//   sync mode:  at step s (a multiple of reload_every), each peer's checkpoint of exactly
//               step s - reload_every, waited for up to sync_timeout_s: runs are
//               reproducible bit for bit.
// Each teacher is a forward-only model on the student's device with its own queue, so that
// its forwards overlap the student's where the backend runs queues concurrently; a loaded
// checkpoint's parameter block goes through the backend's staging memory in one copy on
// that queue, and async mode adopts the teacher only once the copy is done.
#include <condition_variable>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "checkpoint/store.hpp"
#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/teachers/cohort.hpp"
#include "codistill/teachers/fixed_teachers.hpp"
#include "codistill/teachers/teacher_gate.hpp"
#include "codistill/teachers/teacher_sharing.hpp"
#include "codistill/persist/metrics.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/models/model.hpp"
#include "kernels/backend.hpp"

namespace codistill {

struct Teacher {
  Teacher() = default;
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;
  // Waits for the teacher's queue, so that nothing still uses the memory freed here.
  ~Teacher();

  int peer = 0;  // a live peer's worker id; fixed teacher i is -(i + 1)
  std::int64_t step = 0;  // the peer's step when it published this checkpoint
  std::string path;
  double load_ms = 0;
  // What it was loaded from: a teacher file (teacher-*.h5) or a checkpoint, and the bytes
  // of dataset storage that read (teacher events' `file` and `bytes_read`).
  checkpoint::FileKind file = checkpoint::FileKind::checkpoint;
  std::uint64_t bytes_read = 0;
  std::optional<GateVerdict> verdict;  // the gate's, where one judged it
  Model model;  // forward-only (no gradient block), on its own queue
  std::unique_ptr<kernels::Event> loaded;        // after the parameter upload
  std::unique_ptr<kernels::Event> forward_done;  // after each forward: the student's loss waits on it
  kernels::Tensor staging;                       // the parameter block on its way; released once loaded
  kernels::Tensor logits;                        // of the last forward (the model's own buffer)
  // codistill.share_teachers: the shared file the parameters are mapped from ("" when they
  // are this rank's own), and, on the rank that wrote it, the hold that removes it.
  std::string shared_path;
  std::shared_ptr<SharedFileOwner> shared_owner;

  // "3" for peer 3, "fixed-0" for the first fixed teacher (metrics' churn keys, logs).
  std::string label() const;

  // Inference forward on the teacher's queue, once `input_ready` (recorded on the
  // student's queue after the batch copy) has been reached; records forward_done.
  const kernels::Tensor& forward(const kernels::Tensor& x, kernels::Event* input_ready = nullptr);
  // The same without the model's linear head (train.fused_head: the loss applies the head
  // itself, Model::linear_head): the features [rows, features] in `logits`' place.
  const kernels::Tensor& forward_features(const kernels::Tensor& x, kernels::Event* input_ready = nullptr);
};

// Throws TrainingError unless a teacher with this model attribute (a checkpoint's `model`)
// can teach `student`: the same input shape and classes; any architecture. `who` names the
// teacher in the message.
void check_teacher_fits(const std::string& teacher_model_yaml, const ModelConfig& student, const std::string& who);
// How a teacher's checkpoint is read: parameters and buffers, without the optimizer's slots
// and the worker state (a teacher only runs forward). A teacher of any architecture is
// rebuilt from its checkpoint's own model attribute (model_from_checkpoint), so the
// fingerprint only has to match that attribute.
checkpoint::ReadOptions teacher_read_options();

// A teacher event's fields: peer, peer_step, load_ms, file ("teacher" | "checkpoint"),
// bytes_read; the gate's verdict's where it judged.
nlohmann::json teacher_event_fields(const Teacher& t);

// A teacher event's fields from the gate's verdict: refused, probe_loss, own_probe_loss
// (null where not finite), probe_ms, and reason when refused.
void add_verdict_fields(nlohmann::json& fields, const GateVerdict& v);

class TeacherPool {
 public:
  // model_cfg: this worker's model section with input_shape and classes filled (what a
  // teacher must fit). follower: a worker group's rank other than 0, which never looks for
  // teachers itself but takes those rank 0 chose (follow()); it starts no watcher.
  // factory: how a teacher's model is built from its checkpoint's model attribute (unset:
  // build_model; TrainOptions::model_factory for tests).
  TeacherPool(const Config& cfg, ModelConfig model_cfg, std::shared_ptr<spdlog::logger> log, bool follower = false,
              ModelFactory factory = {});
  ~TeacherPool();
  TeacherPool(const TeacherPool&) = delete;
  TeacherPool& operator=(const TeacherPool&) = delete;

  // The peers this worker learns from now: the cohort's teaching peers (teachers/cohort.hpp),
  // re-read from the run directory at each reload.
  const std::vector<int>& peers() const { return peers_; }
  // The most teachers a worker may have at once (codistill.teachers, else kMaxTeachers):
  // the fixed length of what a group's rank 0 sends its other ranks.
  std::size_t max_teachers() const;

  // Called by the trainer at the start of every step (own completed steps). At a reload
  // step (every reload_every) it re-reads the cohort first (a `cohort` event when peers
  // joined or retired). Async mode: asks the watcher for a reload. Sync mode: blocks until
  // the exact checkpoints of codistill.sync_quorum live peers are loaded (all: 0), or throws
  // after the timeout; a `sync` event says whom it waited for, how long, and who was left.
  // Then swaps in whatever the watcher has finished loading and emits `teacher` events.
  // Rethrows a fatal watcher error (a peer whose model cannot teach ours, a sync timeout).
  void at_step(std::int64_t step, MetricsWriter* metrics);

  // A resumed worker takes back the teachers its checkpoint says it was using (peer, step),
  // so that a stopped and restarted run goes on exactly as before. Sync mode waits for
  // them (they are retained for it); async mode takes those still there and otherwise
  // finds the freshest at the next reload.
  void resume(const std::vector<checkpoint::TeacherStep>& teacher_steps, MetricsWriter* metrics,
              std::int64_t step);

  // A follower's at_step and resume: makes the teachers in use exactly `chosen` (peer,
  // step), as rank 0 has them at this step (train/group.hpp), loading from the peers'
  // checkpoint files any it does not hold yet and dropping the others. Each rank reads the
  // files itself (rather than receiving them from rank 0) since each needs the teacher on
  // its own device anyway and the shared storage serves the same bytes; the content digest
  // is checked on every rank. Throws TrainingError if a chosen file cannot be read (retention
  // removed it in between: the group stops and resumes, exactly).
  void follow(const std::vector<checkpoint::TeacherStep>& chosen, MetricsWriter* metrics, std::int64_t step);

  // Teachers in use, by peer id ascending (never more than one per peer).
  const std::vector<std::unique_ptr<Teacher>>& teachers() const { return teachers_; }

  // The teacher gate (teachers/teacher_gate.hpp): from now on every checkpoint the pool
  // loads is scored before it teaches (at_step, load_fixed); resume and follow take
  // teachers that were accepted already. Unset: every valid checkpoint that fits teaches.
  void set_gate(std::unique_ptr<TeacherGate> gate) { gate_ = std::move(gate); }
  bool has_gate() const { return gate_ != nullptr; }

  // Fixed teachers (codistill.fixed_teachers, teachers/fixed_teachers.hpp): loaded once, on
  // the student's device, used at every step from the first. `normalization`: the
  // student's input mapping, which each teacher's own (from its checkpoint) must match.
  // With a gate, each is scored first; a refused one is a ConfigError naming its file.
  void load_fixed(const std::vector<FixedTeacherFile>& files, const data::Normalization& normalization,
                  MetricsWriter* metrics, std::int64_t step);
  const std::vector<std::unique_ptr<Teacher>>& fixed() const { return fixed_; }

  // codistill.share_teachers (teachers/teacher_sharing.hpp): this rank's part, set before
  // the first teacher loads. The writer removes its node's stale files of dead runs here.
  void set_sharing(TeacherSharing sharing);
  const TeacherSharing& sharing() const { return sharing_; }
  // Whether `chosen` (what share_teacher_steps gave every rank) differs from the last list
  // passed here: every rank sees the same lists, so all agree on when to meet at the barrier
  // between the writers and the readers.
  bool chosen_changed(const std::vector<checkpoint::TeacherStep>& chosen);
  // Own step minus the oldest teacher step in use; nullopt without teachers.
  std::optional<std::int64_t> staleness(std::int64_t step) const;

 private:
  void watch();
  std::unique_ptr<Teacher> load_async(int peer, std::int64_t held_step, std::int64_t own_step);
  // Peers' files (teachers_files.cpp). Each prefers the peer's teacher file and falls back
  // to its checkpoint: load_exact, sync mode, waits for step peer_step's; load_step takes
  // it if it is there (resume, follow) and throws the checkpoint's error when neither reads.
  std::unique_ptr<Teacher> load_exact(int peer, std::int64_t peer_step);
  // One look for peer_step's files of `peer` (load_exact's poll, without waiting): the
  // teacher, or nullptr with why in `why`; a teacher file that fails sets teacher_failed.
  std::unique_ptr<Teacher> try_exact(int peer, std::int64_t peer_step, bool& teacher_failed, std::string& why);
  // Sync mode's reload at `step`: waits for the step - reload_every files of the live
  // teaching peers until the quorum is met, takes a retired peer's only if it is there.
  std::vector<std::unique_ptr<Teacher>> load_quorum(std::int64_t step, MetricsWriter* metrics);
  // Why `peer` cannot publish its file of peer_step (retired, joined later, or past it
  // without that file): sync mode does not wait for it. "" when it can.
  std::string excused(int peer, std::int64_t peer_step) const;
  // The cohort's re-read (teachers_cohort.cpp): peers_ and the watcher's tracks follow it;
  // the teachers of peers that no longer teach (codistill.retired drop) are let go.
  void refresh_cohort(MetricsWriter* metrics, std::int64_t step);
  std::unique_ptr<Teacher> load_step(int peer, std::int64_t peer_step, double load_ms);
  // load_async's reads: the freshest valid file of `kind` newer than held_step.
  std::unique_ptr<Teacher> load_freshest(int peer, checkpoint::FileKind kind, std::int64_t held_step,
                                         std::int64_t own_step, std::size_t listed);
  std::unique_ptr<Teacher> make_teacher(int peer, const checkpoint::CheckpointData& data, const std::string& path,
                                        double load_ms, checkpoint::FileKind file = checkpoint::FileKind::checkpoint);
  // meta: the checkpoint's, which a shared file records (null: not shared).
  void upload(Teacher& t, const checkpoint::CheckpointMeta* meta = nullptr);
  // Sharing (teachers_share.cpp). The writer's: t's blocks into its node's file, mapped back
  // as its storage (a failure: a warning, t keeps its own copy). A reader's: the teacher
  // from the file the node's writer published, or nullptr with why in `why`.
  void share(Teacher& t, const checkpoint::CheckpointMeta& meta);
  std::unique_ptr<Teacher> map_shared(int peer, std::int64_t step, std::string& why);
  std::vector<std::unique_ptr<Teacher>> take_loaded(std::vector<std::unique_ptr<Teacher>> fresh, bool wait);
  void check_fits(int peer, const std::string& path);
  void adopt(std::vector<std::unique_ptr<Teacher>> adopted, MetricsWriter* metrics, std::int64_t step);
  // The gate's pass over freshly loaded teachers (teachers_gate.cpp): those accepted, with
  // their verdicts; a `teacher` event with `refused` for each of the others.
  std::vector<std::unique_ptr<Teacher>> screen(std::vector<std::unique_ptr<Teacher>> loaded, MetricsWriter* metrics,
                                               std::int64_t step);

  const Config& cfg_;
  ModelConfig model_cfg_;
  ModelFactory factory_;
  std::shared_ptr<spdlog::logger> log_;
  checkpoint::RunStore store_;
  Cohort cohort_;
  std::vector<int> peers_;  // cohort_.teaching() as of the last refresh (trainer's thread)
  kernels::Device device_;
  kernels::QueueOptions queue_options_;
  std::vector<std::unique_ptr<Teacher>> teachers_;
  std::vector<std::unique_ptr<Teacher>> fixed_;
  std::vector<std::unique_ptr<Teacher>> staged_;  // uploads still in flight
  std::unique_ptr<TeacherGate> gate_;
  TeacherSharing sharing_;
  std::vector<checkpoint::TeacherStep> last_chosen_;

  // Shared with the watcher thread.
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::int64_t> request_;  // own step of a pending reload request
  std::vector<int> request_peers_;       // the peers to look at for it
  struct PeerTrack {
    std::int64_t held = -1;   // the step held or being adopted
    bool silent = false;      // warned that it stopped publishing
    bool unlistable = false;  // warned that its folder cannot be listed
  };
  std::map<int, PeerTrack> tracks_;  // by peer id
  std::vector<std::unique_ptr<Teacher>> ready_;
  std::vector<std::string> warnings_;
  std::string fatal_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace codistill
