// classify_source: what a user-given checkpoint path names (a file, a worker folder, a run
// directory), with the reasons for everything else.
#include <catch2/catch.hpp>

#include <filesystem>

#include "checkpoint/source.hpp"
#include "support/process.hpp"

using namespace codistill::checkpoint;
namespace fs = std::filesystem;
using Kind = CheckpointSource::Kind;

TEST_CASE("checkpoint sources: a file, a worker folder, a run directory", "[checkpoint][source]") {
  codistill::test::TempDir dir;
  fs::create_directories(dir.path() / "run" / "worker-002");
  fs::create_directories(dir.path() / "run" / "worker-000");
  fs::create_directories(dir.path() / "run" / "notes");
  codistill::test::write_text(dir.path() / "run" / "worker-002" / "ckpt-000000010.h5", "bytes");

  const auto file = classify_source(dir.str("run/worker-002/ckpt-000000010.h5"));
  CHECK(file.kind == Kind::file);
  CHECK(file.path == (dir.path() / "run" / "worker-002" / "ckpt-000000010.h5").string());
  CHECK(file.run_dir.empty());

  for (const std::string& spec : {dir.str("run/worker-002"), dir.str("run/worker-002/"), dir.str("run/./worker-002")}) {
    INFO(spec);
    const auto w = classify_source(spec);
    CHECK(w.kind == Kind::worker_dir);
    CHECK(w.worker == 2);
    CHECK(w.run_dir == (dir.path() / "run").string());
  }

  for (const std::string& spec : {dir.str("run"), dir.str("run/"), dir.str("run/notes/..")}) {
    INFO(spec);
    const auto r = classify_source(spec);
    CHECK(r.kind == Kind::run_dir);
    CHECK(r.run_dir == (dir.path() / "run").string());
    CHECK(r.workers == std::vector<int>{0, 2});
  }
}

TEST_CASE("checkpoint sources: what is refused and why", "[checkpoint][source]") {
  codistill::test::TempDir dir;
  fs::create_directories(dir.path() / "empty");
  CHECK_THROWS_WITH(classify_source(dir.str("absent")), "no such file or directory");
  CHECK_THROWS_WITH(classify_source(dir.str("empty")), Catch::Contains("no worker-NNN folder"));
  CHECK_THROWS_WITH(classify_source("/dev/null"), "neither a checkpoint file nor a directory");
}
