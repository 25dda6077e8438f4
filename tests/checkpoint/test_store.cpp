// The run-directory store: listing, freshest valid checkpoint with fall-back, retention,
// temp-file cleanup; all with files vanishing or broken underneath.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/fsutil.hpp"
#include "checkpoint/naming.hpp"
#include "checkpoint/store.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

std::vector<std::int64_t> steps_of(const std::vector<CheckpointFile>& files) {
  std::vector<std::int64_t> steps;
  for (const auto& f : files) steps.push_back(f.step);
  return steps;
}

// Writes checkpoints of `worker` at the given steps (fsync off: scratch files).
void publish(const RunStore& store, int worker, std::initializer_list<std::int64_t> steps) {
  fs::create_directories(store.worker_dir(worker));
  for (auto step : steps) {
    test::SampleCheckpoint sample(static_cast<std::uint64_t>(step), step);
    WriteOptions o;
    o.fsync = false;
    checkpoint::write(store.checkpoint_path(worker, step), sample.view(), o);
  }
}

void corrupt(const std::string& path) { fs::resize_file(path, fs::file_size(path) - 100); }

// A pid that certainly does not exist any more: a child that has exited and been reaped.
long dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("run directory names", "[checkpoint][store]") {
  CHECK(worker_dir_name(3) == "worker-003");
  CHECK(worker_dir_name(1234) == "worker-1234");
  CHECK(parse_worker_dir_name("worker-007") == 7);
  CHECK_FALSE(parse_worker_dir_name("worker-7"));
  CHECK_FALSE(parse_worker_dir_name("worker-00x"));
  CHECK(parse_checkpoint_file_name(checkpoint_file_name(1000)) == 1000);
  CHECK(parse_temp_file_pid(temp_file_name(1000, 4321)) == 4321);
}

TEST_CASE("listing sees workers and published checkpoints only, by step", "[checkpoint][store]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  CHECK(store.workers().empty());  // the run directory does not exist yet
  CHECK(store.checkpoints(0).empty());
  publish(store, 1, {300, 100, 200});
  publish(store, 0, {50});
  fs::create_directories(dir.path() / "run" / "not-a-worker");
  test::write_text(dir.path() / "run" / "worker-009", "a file, not a folder");
  auto w1 = fs::path(store.worker_dir(1));
  test::write_text(w1 / temp_file_name(400, 12345), "half written");
  test::write_text(w1 / "metrics.jsonl", "{}\n");
  test::write_text(w1 / "ckpt-12.h5", "too few digits");
  CHECK(store.workers() == std::vector<int>{0, 1});
  CHECK(steps_of(store.checkpoints(1)) == std::vector<std::int64_t>{100, 200, 300});
  CHECK(store.checkpoints(1).back().path == store.checkpoint_path(1, 300));
}

TEST_CASE("the freshest valid checkpoint skips broken and vanished files", "[checkpoint][store]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  publish(store, 0, {100, 200, 300, 400});
  corrupt(store.checkpoint_path(0, 400));
  std::vector<std::string> skipped;
  auto fresh = store.freshest_valid(0, {}, &skipped);
  REQUIRE(fresh);
  CHECK(fresh->step == 300);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("ckpt-000000400.h5: ") && Catch::Contains("truncated"));

  auto loaded = store.load_freshest(0);
  REQUIRE(loaded);
  CHECK(loaded->file.step == 300);
  CHECK(loaded->data.meta.step == 300);
  CHECK(loaded->skipped.size() == 1);
  CHECK(store.load_freshest(0, {}, 250)->file.step == 200);  // max_step

  // A wrong model is passed over like a broken file.
  ReadOptions other_model;
  other_model.expected_fingerprint = "fp-other";
  CHECK_FALSE(store.load_freshest(0, other_model));
  CHECK_FALSE(store.load_freshest(7));  // no such worker

  // A checkpoint copied under another step's name is not taken for that step.
  fs::copy_file(store.checkpoint_path(0, 100), store.checkpoint_path(0, 500));
  auto renamed = store.load_freshest(0);
  REQUIRE(renamed);
  CHECK(renamed->file.step == 300);
  CHECK_THAT(renamed->skipped[0], Catch::Contains("step attribute 100 does not match the file name"));
  CHECK(store.freshest_valid(0)->step == 300);
}

TEST_CASE("a file deleted between listing and opening makes the store fall back", "[checkpoint][store]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  publish(store, 0, {100, 200});
  auto listed = store.checkpoints(0);
  REQUIRE(listed.size() == 2);
  // What a concurrent retention does in the other worker between our listing and our open:
  fs::remove(listed.back().path);
  auto loaded = store.load_freshest(0);
  REQUIRE(loaded);
  CHECK(loaded->file.step == 100);
  // And if the file vanishes between the listing and the open inside one call, read()
  // reports it as a plain reason that the store skips:
  CHECK(verify(listed.back().path).reason == "no such file");
}

TEST_CASE("retention keeps the newest `keep` and never the last valid one", "[checkpoint][store]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  publish(store, 0, {100, 200, 300, 400, 500});
  auto deleted = store.retain(0, 2);
  CHECK(deleted.size() == 3);
  CHECK(steps_of(store.checkpoints(0)) == std::vector<std::int64_t>{400, 500});
  CHECK(store.retain(0, 2).empty());  // idempotent

  // The two newest are broken: the newest valid one (300) stays beside them.
  publish(store, 1, {100, 200, 300, 400, 500});
  corrupt(store.checkpoint_path(1, 400));
  corrupt(store.checkpoint_path(1, 500));
  store.retain(1, 2);
  CHECK(steps_of(store.checkpoints(1)) == std::vector<std::int64_t>{300, 400, 500});
  CHECK(store.freshest_valid(1)->step == 300);

  // A step the caller vouches for is not verified again (here it is even broken, which
  // shows that it was trusted; real callers pass the step they have just written).
  publish(store, 2, {100, 200, 300});
  corrupt(store.checkpoint_path(2, 300));
  store.retain(2, 1, 300);
  CHECK(steps_of(store.checkpoints(2)) == std::vector<std::int64_t>{300});
  CHECK_THROWS_AS(store.retain(2, 0), CheckpointError);
}

TEST_CASE("leftover temp files are ignored by listing and cleaned up by their owner", "[checkpoint][store]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  publish(store, 0, {100});
  fs::path w = store.worker_dir(0);
  long dead = dead_pid();
  auto mine = w / temp_file_name(200, static_cast<long>(::getpid()));
  auto killed = w / temp_file_name(300, dead);
  auto alive = w / temp_file_name(400, 1);  // pid 1 always exists
  for (const auto& p : {mine, killed, alive}) test::write_text(p, "partial");
  CHECK(steps_of(store.checkpoints(0)) == std::vector<std::int64_t>{100});
  CHECK(store.load_freshest(0)->file.step == 100);

  auto removed = store.cleanup_temp_files(0);
  CHECK(removed.size() == 2);
  CHECK_FALSE(fs::exists(mine));
  CHECK_FALSE(fs::exists(killed));
  CHECK(fs::exists(alive));  // another live process may still be writing it
  CHECK(fs::exists(store.checkpoint_path(0, 100)));
  CHECK(store.cleanup_temp_files(0).empty());
}

TEST_CASE("a worker's other records left half written by a dead writer are cleaned up too", "[checkpoint][store]") {
  CHECK(parse_any_temp_file_pid(".data.json.tmp.4321") == 4321);
  CHECK(parse_any_temp_file_pid("joined.tmp.77") == 77);
  CHECK(parse_any_temp_file_pid("config.yaml.tmp.12.3") == 12);
  CHECK(parse_any_temp_file_pid(temp_file_name(5, 9)) == 9);
  for (const char* name : {"data.json", ".tmp.12", "x.tmp.", "x.tmp.12a", "x.tmp.1.b", "metrics.jsonl"}) {
    INFO(name);
    CHECK_FALSE(parse_any_temp_file_pid(name));
  }
  test::TempDir dir;
  RunStore store(dir.str("run"));
  publish(store, 0, {100});
  const fs::path w = store.worker_dir(0);
  const std::string dead = std::to_string(dead_pid()), self = std::to_string(::getpid());
  const fs::path killed_record = w / (".data.json.tmp." + dead), killed_marker = w / ("joined.tmp." + dead);
  const fs::path my_record = w / (".data.json.tmp." + self), live_record = w / "retired.tmp.1";
  for (const auto& p : {killed_record, killed_marker, my_record, live_record}) test::write_text(p, "partial");
  CHECK(store.cleanup_temp_files(0).size() == 2);
  CHECK_FALSE(fs::exists(killed_record));
  CHECK_FALSE(fs::exists(killed_marker));
  CHECK(fs::exists(my_record));    // this process's own record may be mid-write on another thread
  CHECK(fs::exists(live_record));  // another live process may still be writing it
}

TEST_CASE("publishing never replaces an existing file", "[checkpoint][store]") {
  test::TempDir dir;
  test::write_text(dir.path() / ".tmp", "new");
  test::write_text(dir.path() / "final", "old");
  CHECK_THROWS_AS(fsutil::rename_no_replace(dir.str(".tmp"), dir.str("final")), std::system_error);
  CHECK(test::read_text(dir.path() / "final") == "old");
  fsutil::rename_no_replace(dir.str(".tmp"), dir.str("other"));
  CHECK(test::read_text(dir.path() / "other") == "new");
  CHECK_FALSE(fs::exists(dir.path() / ".tmp"));
}
