// Chaos tests: real codistilling workers killed with SIGKILL at random moments (some of
// them part-way through a checkpoint write) and restarted, a peer directory made
// unreadable, readers racing retention deletes, and peers' file times set far apart.
// Afterwards every published checkpoint verifies, no metrics line is torn, and in sync
// mode the final parameters equal an uninterrupted run's bit for bit.
//
// The schedule is random; CODISTILL_CHAOS_SEED=N replays one (the seed is printed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

constexpr int kWorkers = 3;

const char* kConfig = R"(run:
  seed: 11
  threads: 1
  workers: 3
data:
  kind: synthetic
  batch_size: 32
  synthetic_train: 3072
  synthetic_test: 256
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [128, 128]
  dropout: 0.1
optimizer:
  kind: adamw
  lr: 0.002
  schedule:
    kind: cosine
    warmup_steps: 40
train:
  steps: 2400
  eval_every: 800
  log_every: 40
checkpoint:
  every: 20
  keep: 2
codistill:
  enabled: true
  burn_in: 40
  reload_every: 40
  temperature: 2.0
  sync_timeout_s: 60
)";

std::uint64_t chaos_seed() {
  if (const char* s = std::getenv("CODISTILL_CHAOS_SEED")) return std::stoull(s);
  return std::random_device{}();
}

// One worker slot: the process now running it (if any) and how its restarts went.
struct Slot {
  std::unique_ptr<Child> child;
  int starts = 0;
  std::string last_tag;
};

class Cohort {
 public:
  Cohort(const TempDir& dir, std::string run, std::string flags, std::string prefix = "")
      : dir_(dir), run_(std::move(run)), flags_(std::move(flags)), prefix_(std::move(prefix)) {}

  void start(int w, const std::string& env = "") {
    Slot& s = slots_[w];
    s.last_tag = run_ + "-w" + std::to_string(w) + "-" + std::to_string(s.starts++);
    tags_.push_back(s.last_tag);
    s.child = std::make_unique<Child>(env + " " + prefix_ + " " + train_exe() + " --config " + dir_.str("c.yaml") +
                                          " --run-dir " + dir_.str(run_) + " --worker " + std::to_string(w) + " " +
                                          flags_,
                                      dir_, s.last_tag);
  }
  bool running(int w) { return slots_[w].child && slots_[w].child->running(); }
  int kill(int w) {
    slots_[w].child->signal(SIGKILL);
    return slots_[w].child->wait();
  }
  int wait(int w) { return slots_[w].child->wait(); }
  std::string output(int w) { return read_text(dir_.path() / (slots_[w].last_tag + ".out")); }
  std::string errors(int w) { return read_text(dir_.path() / (slots_[w].last_tag + ".err")); }
  int starts(int w) const { return slots_[w].starts; }
  // The standard output of every process started so far.
  std::string all_output() const {
    std::string all;
    for (const auto& t : tags_) all += read_text(dir_.path() / (t + ".out"));
    return all;
  }

 private:
  const TempDir& dir_;
  std::string run_, flags_, prefix_;
  Slot slots_[kWorkers];
  std::vector<std::string> tags_;
};

// Every published checkpoint of the run verifies and no writer's temp file is left.
void require_intact(const TempDir& dir, const std::string& run) {
  ckpt::RunStore store(dir.str(run));
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    const auto files = store.checkpoints(w);
    REQUIRE(!files.empty());
    for (const auto& f : files) {
      INFO(f.path);
      CHECK(ckpt::verify(f.path).valid);
    }
    for (const auto& e : fs::directory_iterator(store.worker_dir(w)))
      CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
}

// Every metrics line is whole JSON (a kill never leaves half a line), and the file ends
// with the run's one completion.
void require_whole_metrics(const TempDir& dir, const std::string& run, std::int64_t steps) {
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    const fs::path m = dir.path() / run / ("worker-00" + std::to_string(w)) / "metrics.jsonl";
    std::ifstream in(m);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      ++lines;
      INFO("line " << lines << ": " << line);
      CHECK(nlohmann::json::accept(line));
    }
    CHECK(lines > 0);
    auto done = read_events(m, "done");
    REQUIRE(!done.empty());
    CHECK(done.back().at("step") == steps);
  }
}

template <class Rng>
int pick(Rng& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// What the random kills of the sync-mode chaos run did.
struct KillTally {
  int kills = 0, torn_writes = 0;
  bool resumed_expected[kWorkers] = {};  // killed once it had a checkpoint: must say it resumed
};

// Kills a random live worker of chaos 24 times (fewer if all finish first), each after a
// random pause (milliseconds times scale) and restarted after another; every fourth restart
// dies by itself part-way through its first checkpoint write.
KillTally kill_at_random(Cohort& chaos, ckpt::RunStore& store, std::mt19937_64& rng, double scale,
                         std::int64_t every) {
  const auto scaled = [&](int ms) { return static_cast<int>(ms * scale); };
  KillTally t;
  while (t.kills < 24) {
    sleep_ms(pick(rng, scaled(150), scaled(700)));
    std::vector<int> alive;
    for (int w = 0; w < kWorkers; ++w) {
      if (chaos.running(w)) {
        alive.push_back(w);
      } else {  // a worker that stopped on its own must have finished its run
        INFO("worker " << w << ": " << chaos.output(w) << chaos.errors(w));
        REQUIRE(chaos.wait(w) == 0);
      }
    }
    if (alive.empty()) break;  // everyone finished before the kills did: checked below
    const int w = alive[static_cast<std::size_t>(pick(rng, 0, static_cast<int>(alive.size()) - 1))];
    const int code = chaos.kill(w);
    if (code != 128 + SIGKILL) {  // it had finished (0) just before the kill: no restart needed
      INFO(chaos.output(w) << chaos.errors(w));
      REQUIRE(code == 0);
      continue;
    }
    ++t.kills;
    t.resumed_expected[w] = t.resumed_expected[w] || !store.checkpoints(w).empty();
    sleep_ms(pick(rng, 0, scaled(300)));
    // Every fourth restart dies by itself part-way through its first checkpoint write.
    std::string env;
    if (t.kills % 4 == 0) {
      const auto files = store.checkpoints(w);
      const std::int64_t next = (files.empty() ? 0 : files.back().step) + every;
      env = "env CODISTILL_FAULT_KILL_CHECKPOINT_STEPS=" + std::to_string(next);
      ++t.torn_writes;
    }
    chaos.start(w, env);
    if (!env.empty()) {
      const int self = chaos.wait(w);  // killed itself mid-write (or was done before)
      INFO(chaos.output(w) << chaos.errors(w));
      REQUIRE((self == 128 + SIGKILL || self == 0));
      if (self == 128 + SIGKILL) ++t.kills;
      chaos.start(w);
    }
  }
  return t;
}

// A peer's clock far off: the published files of worker 0 or 1 dated up to a day away
// either way. Returns how many were re-dated.
int redate_peer_files(ckpt::RunStore& store, std::mt19937_64& rng) {
  int skews = 0;
  for (const auto& f : store.checkpoints(pick(rng, 0, 1))) {
    std::error_code ec;  // the file may be deleted by retention meanwhile
    fs::last_write_time(f.path, fs::file_time_type::clock::now() + std::chrono::hours(pick(rng, -24, 24)), ec);
    if (!ec) ++skews;
  }
  return skews;
}

// Permission bits do not stop root: as root, the workers run as nobody (the command prefix
// returned; empty otherwise), in a test folder opened to them.
std::string unprivileged_prefix(const TempDir& dir) {
  if (::geteuid() != 0) return "";
  fs::permissions(dir.path(), fs::perms::all);
  return "setpriv --reuid=65534 --regid=65534 --clear-groups";
}

// Gives a folder its permissions back when the test ends, however it ends.
struct Readable {
  fs::path p;
  fs::perms perms;
  ~Readable() {
    std::error_code ec;
    fs::permissions(p, perms, ec);
  }
};

// The freshest peer checkpoint is chosen by its step, never by its file time: within
// one life of a worker the teachers' steps never go back. A restart resumes the state of
// its checkpoint, teachers included, so there (and only there: an event of the resume,
// load_ms 0, at an own step at most the one the worker had reached) a teacher may go
// back, and only to one this worker had held before. A new life's first reload (its
// checkpoint's teacher gone) finds the freshest, which never goes back. Checked on the
// teacher events of each worker of dir/run.
void check_teachers_never_go_back(const TempDir& dir) {
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    std::map<int, std::int64_t> newest, last_own_step;
    std::map<int, std::set<std::int64_t>> held;
    int restored_older = 0;
    const auto teachers =
        read_events(dir.path() / "run" / ("worker-00" + std::to_string(w)) / "metrics.jsonl", "teacher");
    CHECK(!teachers.empty());
    for (const auto& t : teachers) {
      const int p = t.at("peer").get<int>();
      const auto s = t.at("peer_step").get<std::int64_t>();
      const auto own = t.at("step").get<std::int64_t>();
      INFO("peer " << p << " at step " << s << ", adopted at own step " << own);
      const bool resumed =
          last_own_step.count(p) && own <= last_own_step[p] && t.at("load_ms").get<double>() == 0.0;
      if (resumed && s < newest[p]) {
        CHECK(held[p].count(s) == 1);
        newest[p] = s;
        ++restored_older;
      }
      CHECK(s >= newest[p]);
      newest[p] = std::max(newest[p], s);
      last_own_step[p] = own;
      held[p].insert(s);
    }
    std::cout << "worker " << w << ": " << teachers.size() << " teacher loads, " << restored_older
              << " restarts back to an older teacher" << std::endl;
  }
}

}  // namespace

TEST_CASE("chaos: 3 sync-mode workers killed at random 20+ times end bit-identical to an uninterrupted run",
          "[process][chaos]") {
  const std::uint64_t seed = chaos_seed();
  std::cout << "chaos seed " << seed << " (CODISTILL_CHAOS_SEED replays it)" << std::endl;
  INFO("chaos seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string sync = "--set codistill.mode=sync --set model.hidden=[384,384]";
  const std::int64_t steps = 2400, every = 20;

  const auto t0 = std::chrono::steady_clock::now();
  Cohort whole(dir, "whole", sync);
  for (int w = 0; w < kWorkers; ++w) whole.start(w);
  for (int w = 0; w < kWorkers; ++w) REQUIRE(whole.wait(w) == 0);
  // The kills must land before the chaos run ends, and how long it runs depends on this
  // machine's speed: the pauses below (about 575 ms per kill at scale 1, the scale that
  // suits a slow machine) shrink so that 24 of them take at most half the uninterrupted run.
  const double whole_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double scale = std::clamp(whole_ms / (2 * 24 * 575.0), 0.05, 1.0);
  std::cout << "chaos: uninterrupted run " << whole_ms << " ms, pauses scaled by " << scale << std::endl;

  Cohort chaos(dir, "chaos", sync);
  ckpt::RunStore store(dir.str("chaos"));
  for (int w = 0; w < kWorkers; ++w) chaos.start(w);
  const KillTally t = kill_at_random(chaos, store, rng, scale, every);
  const int kills = t.kills, torn_writes = t.torn_writes;
  std::cout << "chaos: " << kills << " kills, " << torn_writes << " of them part-way through a write" << std::endl;
  INFO("kills " << kills << ", writes killed part-way " << torn_writes);
  CHECK(kills >= 20);
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    const int code = chaos.wait(w);
    INFO(chaos.output(w) << chaos.errors(w));
    REQUIRE(code == 0);
    if (t.resumed_expected[w]) CHECK(chaos.output(w).find("resuming from") != std::string::npos);
    const std::string log = read_text(dir.path() / "chaos" / ("worker-00" + std::to_string(w)) / "train.log");
    CHECK(log.find(": skipped ") == std::string::npos);  // no peer checkpoint failed to verify
  }
  // A writer killed mid-write left its temp file, and the restart removed it.
  if (torn_writes > 0) CHECK(chaos.all_output().find("removed a dead writer's temp file") != std::string::npos);
  require_intact(dir, "chaos");
  require_whole_metrics(dir, "chaos", steps);
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    auto a = ckpt::read_meta(ckpt::RunStore(dir.str("whole")).checkpoint_path(w, steps));
    auto b = ckpt::read_meta(store.checkpoint_path(w, steps));
    CHECK(a.content_digest == b.content_digest);
    CHECK(a.teacher_steps == b.teacher_steps);
  }
}

TEST_CASE("chaos: async workers with an unreadable peer, retention races, skewed file times and kills",
          "[process][chaos]") {
  const std::uint64_t seed = chaos_seed();
  std::cout << "chaos seed " << seed << " (CODISTILL_CHAOS_SEED replays it)" << std::endl;
  INFO("chaos seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string prefix = unprivileged_prefix(dir);
  // A checkpoint every 5 steps and only the newest 2 kept: readers constantly race the
  // writers' retention deletes.
  const std::int64_t steps = 1500;
  Cohort cohort(dir, "run",
                "--set train.steps=1500 --set model.hidden=[384,384] --set checkpoint.every=5 --set checkpoint.keep=2 "
                "--set codistill.reload_every=5 --set codistill.burn_in=10",
                prefix);
  ckpt::RunStore store(dir.str("run"));
  for (int w = 0; w < kWorkers; ++w) cohort.start(w);
  REQUIRE(wait_until([&] { return store.checkpoints(2).size() >= 1 || !cohort.running(2); }, 120));

  const fs::path peer = dir.path() / "run" / "worker-002";
  const fs::perms readable = fs::status(peer).permissions();
  int kills = 0, skews = 0;
  // Worker 2's directory goes unreadable (and unwritable) from round 5 and comes back once a
  // peer has said so and a second has passed. Nobody is killed from then until a peer has
  // said it reads again: a process killed in between forgets what it saw, and its
  // restart, never having seen the folder unreadable, has nothing to say.
  enum class Window { before, hidden, restored, over } window = Window::before;
  int window_rounds = 0;
  const Readable restore_at_exit{peer, readable};  // whatever happens, readable again at the end
  const auto saw = [&](const char* what) { return cohort.all_output().find(what) != std::string::npos; };
  for (int round = 0; round < 40 || window != Window::over; ++round) {
    if (round >= 400) break;  // the peers never said it (about a minute): the checks below say which
    sleep_ms(pick(rng, 50, 150));
    // Hidden only once worker 2's process is past its start-up: a worker started while its
    // own folder is unreadable fails (rightly: it cannot see its checkpoints), and the
    // kill of round 3 may have restarted it moments ago.
    if (window == Window::before && round >= 5 && cohort.output(2).find("training ") != std::string::npos) {
      fs::permissions(peer, fs::perms::none);
      window = Window::hidden;
    } else if (window == Window::hidden && ++window_rounds >= 7 && saw("peer 2: cannot list")) {
      fs::permissions(peer, readable);
      window = Window::restored;
    } else if (window == Window::restored && saw("peer 2: its folder reads again")) {
      window = Window::over;
    }
    skews += redate_peer_files(store, rng);
    const bool quiet = window == Window::hidden || window == Window::restored;
    if (round % 4 == 3 && !quiet) {
      const int w = pick(rng, 0, kWorkers - 1);
      if (cohort.running(w) && cohort.kill(w) == 128 + SIGKILL) ++kills;
      cohort.start(w);
    }
  }
  std::cout << "chaos: " << kills << " kills, " << skews << " peer files re-dated" << std::endl;
  INFO("kills " << kills << ", files re-dated " << skews);
  CHECK(skews > 0);
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w);
    const int code = cohort.wait(w);
    INFO(cohort.output(w) << cohort.errors(w));
    REQUIRE(code == 0);
  }
  require_intact(dir, "run");
  require_whole_metrics(dir, "run", steps);
  // The peers said that worker 2's folder could not be listed, and that it read again.
  const std::string said = cohort.all_output();
  CHECK(said.find("peer 2: cannot list") != std::string::npos);
  CHECK(said.find("peer 2: its folder reads again") != std::string::npos);
  check_teachers_never_go_back(dir);
}
