// codistill.share_teachers (issue 37) as real processes: a worker group of 2 ranks on this
// node learns from a peer's checkpoints with the teachers shared through one file per
// teacher (rank 0 writes it, both ranks run on it), with sharing off, and with a share
// folder that does not exist (each rank its own copy, the run going on); all three end with
// bit-identical parameters, and no shared file outlives its run.
#include <catch2/catch.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/dist/process_group.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

constexpr double kGuardS = 180;  // far beyond the few seconds a run takes

// A small MLP on synthetic data in sync mode: at step s, peer 1's checkpoint of s - 10.
const char* kConfig = R"(run:
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
  kind: sgd
  lr: 0.05
train:
  steps: 40
  eval_every: 0
  log_every: 10
checkpoint:
  every: 10
  keep: 10
codistill:
  enabled: true
  mode: sync
  burn_in: 0
  reload_every: 10
  temperature: 2.0
)";

ProcessResult run_guarded(const std::string& cmd, const TempDir& dir, const std::string& tag) {
  ProcessResult r;
  Child child(cmd, dir, tag);
  const bool ended = wait_until([&] { return !child.running(); }, kGuardS);
  r.out = read_text(dir.path() / (tag + ".out"));
  r.err = read_text(dir.path() / (tag + ".err"));
  INFO("command: " << cmd << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(ended);  // else Child's destructor kills it
  r.exit_code = child.wait();
  return r;
}

// The paths after `verb` in "teacher sharing: peer P at step S <verb> PATH" lines.
std::set<std::string> shared_paths(const std::string& log, const std::string& verb) {
  std::set<std::string> out;
  const std::regex line("teacher sharing: peer \\d+ at step \\d+ " + verb + " (\\S+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

// "mapped/own" of each "teacher sharing: the group's ... ranks hold" line of rank 0.
std::vector<std::string> held(const std::string& log) {
  std::vector<std::string> out;
  const std::regex line("teacher copies: (\\d+) mapped from shared files, (\\d+) their own");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str() + "/" + (*it)[2].str());
  return out;
}

}  // namespace

TEST_CASE("shared teachers: 2 ranks map one file per teacher and train exactly as with private copies",
          "[process][group][mpi][share]") {
  const std::string why = codistill::dist::kind_unavailable_reason("mpi");
  if (!why.empty()) {
    std::cout << "skipped: no MPI (" << why << ")" << std::endl;  // CTest: skipped
    return;
  }
  if (!mpirun_found(CODISTILL_MPIEXEC)) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string base = train_exe() + " --config " + dir.str("c.yaml");
  auto peer = run_guarded(base + " --run-dir " + dir.str("peer") + " --worker 1 --set codistill.enabled=false "
                                 "--set data.batch_size=32", dir, "peer");
  REQUIRE(peer.exit_code == 0);
  fs::create_directories(dir.path() / "shm");
  const std::map<std::string, std::string> runs = {
      {"shared", "--set codistill.share_dir=" + dir.str("shm")},
      {"private", "--set codistill.share_teachers=off"},
      {"nodir", "--set codistill.share_dir=" + dir.str("missing")}};
  std::map<std::string, ProcessResult> results;
  for (const auto& [run, extra] : runs) {
    fs::create_directories(dir.path() / run / "worker-001");
    for (const auto& f : ckpt::RunStore(dir.str("peer")).checkpoints(1))
      fs::copy_file(f.path, dir.path() / run / "worker-001" / fs::path(f.path).filename());
    results[run] = run_guarded(mpirun_prefix(CODISTILL_MPIEXEC, 2) + base + " --run-dir " + dir.str(run) +
                                   " --worker 0 --set data.batch_size=16 " + extra,
                               dir, run);
    INFO(run << "\n" << results[run].out << results[run].err);
    REQUIRE(results[run].exit_code == 0);
  }
  // Rank 0 (stdout) published each teacher (one file per teacher step taken) and says how
  // the group holds them: both ranks on the shared file, none on a copy of its own (rank 1
  // logs only warnings, on stderr: a failed mapping would show there).
  const auto& shared = results["shared"];
  const auto published = shared_paths(shared.out, "published as");
  INFO(shared.out << shared.err);
  CHECK(published.size() >= 2);
  for (const auto& p : published) CHECK(fs::path(p).parent_path() == dir.path() / "shm");
  CHECK(held(shared.out) == std::vector<std::string>(published.size(), "2/0"));
  CHECK(shared.err.find("teacher sharing") == std::string::npos);
  CHECK(fs::is_empty(dir.path() / "shm"));  // each file went with its teacher, the last at exit
  CHECK(results["private"].out.find("teacher sharing: off (codistill.share_teachers is off)") != std::string::npos);
  CHECK(held(results["private"].out).empty());
  const auto& nodir = results["nodir"];
  CHECK(nodir.out.find("(codistill.share_dir) cannot be written") != std::string::npos);
  CHECK(held(nodir.out) == std::vector<std::string>(published.size(), "0/2"));
  // Bit for bit the same training: the teachers' outputs did not change.
  const auto a = ckpt::read(ckpt::RunStore(dir.str("private")).checkpoint_path(0, 40));
  for (const char* run : {"shared", "nodir"}) {
    INFO(run);
    const auto b = ckpt::read(ckpt::RunStore(dir.str(run)).checkpoint_path(0, 40));
    CHECK(b.meta.teacher_steps == a.meta.teacher_steps);
    CHECK(b.meta.teacher_steps.size() == 1);
    CHECK(max_relative_difference(a, b) == 0.0);
  }
}
