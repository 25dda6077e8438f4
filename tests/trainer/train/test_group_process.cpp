// Worker groups (issue 12) as real processes: `mpirun -np 2 codistill-train` against one
// process with the group's batch; a group stopped by SIGTERM or by a rank killed with
// SIGKILL, then resumed. Every mpirun is waited for with a hang guard (the test fails, and
// kills it, if it outlives the guard); CTest's timeout for this file is the outer guard.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/dist/process_group.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// Seconds a run may take before it counts as hung: far beyond the few seconds they take.
constexpr double kGuardS = 180;

bool mpi_built() {
  std::string why = codistill::dist::kind_unavailable_reason("mpi");
  if (!why.empty()) std::cout << "skipped: no MPI (" << why << ")" << std::endl;  // CTest: skipped
  return why.empty();
}

std::string mpirun(int ranks) { return mpirun_prefix(CODISTILL_MPIEXEC, ranks); }

std::string train(const TempDir& dir, const std::string& run, const std::string& extra) {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

// Runs cmd to its end under the hang guard; the exit code and its output.
ProcessResult run_guarded(const std::string& cmd, const TempDir& dir, const std::string& tag) {
  ProcessResult r;
  {
    Child child(cmd, dir, tag);
    const bool ended = wait_until([&] { return !child.running(); }, kGuardS);
    r.out = read_text(dir.path() / (tag + ".out"));
    r.err = read_text(dir.path() / (tag + ".err"));
    INFO("command: " << cmd << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(ended);  // else the hang guard: Child's destructor kills it
    r.exit_code = child.wait();
  }
  return r;
}

// A small MLP on synthetic data, one thread per rank (2 ranks share this 2-core machine).
std::string config(const std::string& optimizer, bool codistill) {
  std::string c = R"(run:
  seed: 3
  threads: 1
  workers: 2
group:
  timeout_s: 60
data:
  kind: synthetic
  synthetic_train: 2048
  synthetic_test: 256
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [48, 32]
optimizer:
  kind: )" + optimizer + R"(
  lr: )" + (optimizer == "sgd" ? "0.05" : "0.002") + R"(
  weight_decay: 0.001
train:
  steps: 40
  eval_every: 0
  log_every: 10
checkpoint:
  every: 10
  keep: 10
codistill:
  enabled: )" + (codistill ? "true" : "false") + R"(
  mode: sync
  burn_in: 0
  reload_every: 10
  temperature: 2.0
)";
  return c;
}

// Relative float32 reduction-order differences after 40 steps: a sum over 2B rows in one
// GEMM against two sums over B rows added by the all-reduce differ by a few ulps per step,
// which the steps carry on (AdamW divides by sqrt(v), which amplifies them early on).
constexpr double kTolerance = 1e-5;  // measured: at most 1.7e-7 (SGD), 7e-8 (AdamW)

// Long enough (a few seconds) to be stopped mid-way.
const char* kLongConfig = R"(run:
  seed: 5
  threads: 1
group:
  timeout_s: 30
data:
  kind: synthetic
  batch_size: 32
  synthetic_train: 8192
  synthetic_test: 512
  synthetic_shape: [1, 16, 16]
model:
  kind: mlp
  hidden: [256, 256]
optimizer:
  kind: adamw
  lr: 0.001
  weight_decay: 0.01
  schedule:
    kind: cosine
    warmup_steps: 50
train:
  steps: 2000
  eval_every: 1000
  log_every: 250
checkpoint:
  every: 100
  keep: 3
)";
constexpr std::int64_t kLongSteps = 2000;  // kLongConfig's: a run lasts seconds, signalled at step 200

// The pid of rank `rank` among the processes below `ancestor` (mpirun's rank processes carry
// OMPI_COMM_WORLD_RANK in their environment); -1 when there is none.
pid_t rank_pid(pid_t ancestor, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  auto parent = [](pid_t p) -> pid_t {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const auto close = text.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) return -1;
    std::istringstream rest(text.substr(close + 2));
    char state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    return ppid;
  };
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    pid_t p = pid;
    for (int depth = 0; depth < 8 && p > 1 && p != ancestor; ++depth) p = parent(p);
    if (p != ancestor) continue;
    std::ifstream env(entry.path() / "environ");
    for (std::string var; std::getline(env, var, '\0');)
      if (var == want) return pid;
  }
  return -1;
}

void verify_all(const std::string& run) {
  for (const auto& f : ckpt::RunStore(run).checkpoints(0)) {
    INFO(f.path);
    CHECK(ckpt::verify(f.path).valid);
  }
}

}  // namespace

TEST_CASE("a group of 2 ranks with batch B ends where one process with batch 2B does", "[process][group][mpi]") {
  if (!mpi_built()) return;
  for (const std::string optimizer : {"sgd", "adamw"})
    for (bool codistill : {false, true}) {
      INFO(optimizer << (codistill ? " with codistillation" : ""));
      TempDir dir;
      write_text(dir.path() / "c.yaml", config(optimizer, codistill));
      if (codistill) {
        // Peer worker 1 trained alone; its checkpoints (steps 10..40) teach worker 0 in both
        // runs, in sync mode: at step s, the peer's checkpoint of step s - 10.
        auto peer = run_guarded(train(dir, "peer", "--worker 1 --set codistill.enabled=false --set data.batch_size=32"),
                                dir, "peer");
        REQUIRE(peer.exit_code == 0);
        for (const char* run : {"single", "group"}) {
          fs::create_directories(dir.path() / run / "worker-001");
          for (const auto& f : ckpt::RunStore(dir.str("peer")).checkpoints(1))
            fs::copy_file(f.path, dir.path() / run / "worker-001" / fs::path(f.path).filename());
        }
      }
      auto single = run_guarded(train(dir, "single", "--worker 0 --set data.batch_size=32"), dir, "single");
      REQUIRE(single.exit_code == 0);
      // Buckets of 256 floats: most of them start while backward is still running (the
      // reduction overlaps the backward pass), which must not change the result.
      auto group = run_guarded(
          mpirun(2) + train(dir, "group", "--worker 0 --set data.batch_size=16 --set group.bucket_mb=0.0009765625"), dir,
          "group");
      INFO(group.out << group.err);
      REQUIRE(group.exit_code == 0);
      CHECK(group.out.find("worker group: 2 ranks") != std::string::npos);
      // The MLP's 3 layers own 3 ranges of the gradient block: after the last two layers'
      // backward, the buckets wholly inside their ranges have started.
      CHECK(group.out.find("bucket(s) of at most 256 floats, ") != std::string::npos);
      CHECK(group.out.find("floats, 0 started while backward") == std::string::npos);

      const auto a = ckpt::read(ckpt::RunStore(dir.str("single")).checkpoint_path(0, 40));
      const auto b = ckpt::read(ckpt::RunStore(dir.str("group")).checkpoint_path(0, 40));
      CHECK(a.meta.examples_seen == b.meta.examples_seen);  // 40 x 32 each
      CHECK(a.meta.teacher_steps == b.meta.teacher_steps);
      if (codistill) CHECK(b.meta.teacher_steps.size() == 1);
      const double diff = max_relative_difference(a, b);
      std::cout << "group equivalence, " << optimizer << (codistill ? " + codistillation" : "")
                << ": max relative parameter difference " << diff << std::endl;
      CHECK(diff <= kTolerance);
      // Not vacuous: the runs did move the parameters far from one another's starting point
      // (the step-10 checkpoint is already further away than the tolerance).
      const auto early = ckpt::read(ckpt::RunStore(dir.str("group")).checkpoint_path(0, 10));
      CHECK(max_relative_difference(early, b) > 100 * kTolerance);
      // Rank 0 alone writes the worker's record; its logged loss is the group's mean.
      const auto ta = read_events(dir.path() / "single" / "worker-000" / "metrics.jsonl", "train");
      const auto tb = read_events(dir.path() / "group" / "worker-000" / "metrics.jsonl", "train");
      REQUIRE(ta.size() == tb.size());
      for (std::size_t i = 0; i < ta.size(); ++i)
        CHECK(tb[i].at("loss").get<double>() == Approx(ta[i].at("loss").get<double>()).epsilon(1e-4));
      CHECK(read_events(dir.path() / "group" / "worker-000" / "metrics.jsonl", "done").size() == 1);
    }
}

// group.sync_batchnorm: a model with BatchNorm (conv-bn-relu twice, then bn on features)
// trained by 2 ranks with batch B and synchronized statistics ends where one process with
// batch 2B does; without it, it does not (each rank normalizes with its own rows).
TEST_CASE("synchronized BatchNorm: a group of 2 ranks with batch B ends where one process with batch 2B does",
          "[process][group][mpi]") {
  if (!mpi_built()) return;
  TempDir dir;
  std::string c = config("sgd", false);
  c.replace(c.find("model:"), c.find("optimizer:") - c.find("model:"), R"(model:
  kind: layers
  layers:
    - conv2d: {out_channels: 6, kernel: 3, padding: 1, bias: false}
    - batchnorm: {}
    - relu: {}
    - conv2d: {out_channels: 8, kernel: 3, stride: 2, padding: 1, bias: false}
    - batchnorm: {}
    - relu: {}
    - flatten: {}
    - linear: {out: 24}
    - batchnorm: {}
    - relu: {}
    - linear: {out: 10}
)");
  write_text(dir.path() / "c.yaml", c);
  auto single = run_guarded(train(dir, "single", "--set data.batch_size=32"), dir, "single");
  REQUIRE(single.exit_code == 0);
  const auto a = ckpt::read(ckpt::RunStore(dir.str("single")).checkpoint_path(0, 40));
  for (bool sync : {true, false}) {
    INFO((sync ? "synchronized" : "per-rank statistics"));
    const std::string run = sync ? "sync" : "local";
    auto group = run_guarded(mpirun(2) + train(dir, run, std::string("--set data.batch_size=16 --set group.bucket_mb=0.0009765625 --set group.sync_batchnorm=") +
                                                             (sync ? "true" : "false")),
                             dir, run);
    INFO(group.out << group.err);
    REQUIRE(group.exit_code == 0);
    if (sync) CHECK(group.out.find("synchronized BatchNorm over the 2 ranks: 3 layer(s)") != std::string::npos);
    const auto b = ckpt::read(ckpt::RunStore(dir.str(run)).checkpoint_path(0, 40));
    const double diff = max_relative_difference(a, b);  // parameters and buffers (running statistics)
    std::cout << "group equivalence with BatchNorm, " << (sync ? "synchronized" : "per-rank statistics")
              << ": max relative difference " << diff << std::endl;
    if (sync)
      CHECK(diff <= kTolerance);
    else
      CHECK(diff > 100 * kTolerance);  // the test can tell the two apart
  }
}

// The final checkpoint of an uninterrupted group run of kLongConfig in dir/whole.
static std::string uninterrupted_group_run(const TempDir& dir) {
  write_text(dir.path() / "c.yaml", kLongConfig);
  auto whole = run_guarded(mpirun(2) + train(dir, "whole", ""), dir, "whole");
  INFO(whole.out << whole.err);
  REQUIRE(whole.exit_code == 0);
  return ckpt::RunStore(dir.str("whole")).checkpoint_path(0, kLongSteps);
}

// Two test cases, not two sections of one: CTest runs them side by side.
TEST_CASE("a group stopped by SIGTERM to mpirun: every rank finishes the same step, rank 0 publishes it, it resumes bit-exactly",
          "[process][group][mpi]") {
  if (!mpi_built()) return;
  TempDir dir;
  const std::string final_whole = uninterrupted_group_run(dir);
  {
    const ckpt::RunStore s(dir.str("term"));
    {
      Child child(mpirun(2) + train(dir, "term", ""), dir, "term");
      REQUIRE(wait_until([&] { return s.checkpoints(0).size() >= 2 || !child.running(); }, kGuardS));
      REQUIRE(child.running());
      child.signal(SIGTERM);  // mpirun passes it on to the ranks
      REQUIRE(wait_until([&] { return !child.running(); }, kGuardS));
    }
    const auto done = read_events(dir.path() / "term" / "worker-000" / "metrics.jsonl", "done");
    REQUIRE(done.size() == 1);
    CHECK(done[0].at("interrupted") == true);
    const auto files = s.checkpoints(0);
    REQUIRE(!files.empty());
    CHECK(files.back().step == done[0].at("step").get<std::int64_t>());
    CHECK(files.back().step < kLongSteps);
    verify_all(dir.str("term"));
    // Another rank count would be another batch: refused, naming the one to use.
    auto alone = run_guarded(train(dir, "term", ""), dir, "term-alone");
    CHECK(alone.exit_code == 2);
    CHECK(alone.err.find("resume with -np 2") != std::string::npos);
    CHECK(s.checkpoints(0).back().step == files.back().step);
    auto resumed = run_guarded(mpirun(2) + train(dir, "term", ""), dir, "term-resumed");
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.out.find("resuming from") != std::string::npos);
    require_identical(final_whole, s.checkpoint_path(0, kLongSteps));
  }
}

TEST_CASE("a group whose rank 1 is killed with SIGKILL ends non-zero, its checkpoints verify, it resumes bit-exactly",
          "[process][group][mpi]") {
  if (!mpi_built()) return;
  TempDir dir;
  const std::string final_whole = uninterrupted_group_run(dir);
  {
    const ckpt::RunStore s(dir.str("kill"));
    int code = 0;
    {
      Child child(mpirun(2) + train(dir, "kill", ""), dir, "kill");
      REQUIRE(wait_until([&] { return s.checkpoints(0).size() >= 2 || !child.running(); }, kGuardS));
      REQUIRE(child.running());
      const pid_t victim = rank_pid(child.pid(), 1);
      REQUIRE(victim > 0);
      ::kill(victim, SIGKILL);
      // Rank 0 must not hang on its dead peer: mpirun ends the job (or rank 0's collective
      // deadline, group.timeout_s 30, would).
      REQUIRE(wait_until([&] { return !child.running(); }, kGuardS));
      code = child.wait();
    }
    INFO(read_text(dir.path() / "kill.out") << read_text(dir.path() / "kill.err"));
    CHECK(code != 0);
    const auto files = s.checkpoints(0);
    REQUIRE(!files.empty());
    CHECK(files.back().step < kLongSteps);
    verify_all(dir.str("kill"));
    auto resumed = run_guarded(mpirun(2) + train(dir, "kill", ""), dir, "kill-resumed");
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.out.find("resuming from") != std::string::npos);
    require_identical(final_whole, s.checkpoint_path(0, kLongSteps));
  }
}

TEST_CASE("a failure on rank 0 alone ends the whole group at once, with its exit code", "[process][group][mpi]") {
  if (!mpi_built()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", config("sgd", false));
  // The worker is held by a live process (this test's): rank 0 refuses to train it (exit 2)
  // while rank 1, which never looks at the owner file, already waits in a collective.
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  fs::create_directories(dir.path() / "run" / "worker-000");
  write_text(dir.path() / "run" / "worker-000" / "owner",
             nlohmann::json{{"host", host}, {"pid", static_cast<long>(::getpid())}, {"started_unix", 0}}.dump());
  auto r = run_guarded(mpirun(2) + train(dir, "run", "--set group.timeout_s=600"), dir, "held");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);  // rank 0's own code, through MPI_Abort, long before the 600 s deadline
  CHECK(r.err.find("is held by host") != std::string::npos);
}

TEST_CASE("a configuration error ends every rank with exit 2", "[process][group][mpi]") {
  if (!mpi_built()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", config("sgd", false));
  auto r = run_guarded(mpirun(2) + train(dir, "run", "--set optimizer.momentum=2"), dir, "bad");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("optimizer.momentum") != std::string::npos);
}
