// The store on a network file system: a peer's file removed through another client shows
// as ESTALE ("stale file handle") where a local disk says ENOENT; both must read as
// "vanished" (a fall-back to the next freshest, no unreadable folder), never as a failure.
//
// The two-client case is hidden ([.netfs]): scripts/run_netfs_tests.sh runs it with
// CODISTILL_TEST_SCRATCH on one GlusterFS mount and CODISTILL_TEST_SCRATCH_PEER on a second
// mount of the same volume (another client, as another node would be). Without them it
// reports skipped.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "checkpoint/fsutil.hpp"
#include "checkpoint/store.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

void publish(const RunStore& store, int worker, std::int64_t step) {
  fs::create_directories(store.worker_dir(worker));
  test::SampleCheckpoint sample(static_cast<std::uint64_t>(step), step);
  WriteOptions o;
  o.fsync = false;
  checkpoint::write(store.checkpoint_path(worker, step), sample.view(), o);
}

}  // namespace

TEST_CASE("a stale file handle reads as vanished, like a missing file", "[checkpoint][store]") {
  CHECK(fsutil::gone_errno(ENOENT));
  CHECK(fsutil::gone_errno(ESTALE));
  CHECK_FALSE(fsutil::gone_errno(EACCES));
  CHECK_FALSE(fsutil::gone_errno(EIO));
  test::TempDir dir;
  CHECK(fsutil::vanished_reason(dir.str("absent.h5")) == "no such file");
  test::write_text(dir.path() / "present.h5", "x");
  CHECK(fsutil::vanished_reason(dir.str("present.h5")).empty());
  CHECK_FALSE(fsutil::remove_if_exists(dir.str("absent.h5")));
}

TEST_CASE("files removed through another client are skipped as vanished", "[.netfs][checkpoint][store]") {
  const char* peer_root = std::getenv("CODISTILL_TEST_SCRATCH_PEER");
  if (!std::getenv("CODISTILL_TEST_SCRATCH") || !peer_root || !*peer_root)
    return test::skip("needs CODISTILL_TEST_SCRATCH and CODISTILL_TEST_SCRATCH_PEER: two clients of one volume");
  test::TempDir dir;  // written through client A
  const fs::path through_b = fs::path(peer_root) / dir.path().filename();
  RunStore a(dir.str("run")), b((through_b / "run").string());
  constexpr int kRounds = 20;
  int stale = 0, ghosts = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::int64_t older = 100 * (2 * round + 1), newer = older + 100;
    publish(a, 0, older);
    publish(a, 0, newer);
    // B lists and opens both (its client now caches their names and handles) ...
    const auto listed = b.checkpoints(0);
    REQUIRE(listed.size() == 2);
    for (const auto& f : listed) read_meta(f.path);
    // ... then A's retention removes the newest before B reads it again. B either still
    // reads it whole by its cached name (GlusterFS's open-behind and quick-read serve it for
    // up to the 1 s entry timeout; a checkpoint never changes, so that is a valid read) or
    // finds it gone, which must read as vanished ("no such file"), whatever errno said so.
    REQUIRE(fsutil::remove_if_exists(a.checkpoint_path(0, newer)));
    try {
      (void)read(listed.back().path);
      ++ghosts;
    } catch (const CheckpointError& e) {
      CHECK_THAT(e.reason(), Catch::Equals("no such file") || Catch::StartsWith("no such file (stale file handle"));
      stale += e.reason().find("stale file handle") != std::string::npos;
    }
    // The store never fails on it: the newest it can read, the older one at worst.
    const auto loaded = b.load_freshest(0);
    REQUIRE(loaded);
    CHECK((loaded->file.step == newer || loaded->file.step == older));
    for (const auto& why : loaded->skipped) CHECK_THAT(why, Catch::Contains(": no such file"));
    REQUIRE(fsutil::remove_if_exists(a.checkpoint_path(0, older)));
  }
  // The folder itself removed through A: B finds nothing there, and no unreadable folder.
  (void)b.checkpoints(0);
  fs::remove_all(a.worker_dir(0));
  std::string unreadable;
  CHECK(b.checkpoints(0, &unreadable).empty());
  CHECK(unreadable.empty());
  std::cout << "netfs store, " << kRounds << " files removed through A after B had opened them: B read "
            << ghosts << " whole by their cached names, found " << kRounds - ghosts << " gone (" << stale
            << " of them as a stale file handle)" << std::endl;
}
