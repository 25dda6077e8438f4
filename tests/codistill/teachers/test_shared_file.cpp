// Shared-memory teacher files (teachers/shared_file.hpp): published atomically and read back
// as written, mapped read-only, refused when missing or damaged, removed by their writer's
// hold, and stale ones (a dead writer's) found and removed.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codistill/teachers/shared_file.hpp"
#include "support/process.hpp"

using namespace codistill;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

// The permissions of this process's mapping of `path` in /proc/self/maps ("r--s"), "" if none.
std::string mapping_perms(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0)
      return line.substr(line.find(' ') + 1, 4);
  return "";
}

// The pid of a process that has exited (and been reaped): no process has it now.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return static_cast<long>(child);
}

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("shared file: blocks and meta read back as written, page-aligned, mapped read-only", "[teachers][share]") {
  test::TempDir dir;
  const std::string path = shared_file_path(dir.str(), ::getpid(), "run.w0.p1.s10.bf16");
  CHECK(fs::path(path).filename() == "codistill-teacher." + std::to_string(::getpid()) + ".run.w0.p1.s10.bf16");
  const auto a = bytes_of(10000, 1), c = bytes_of(77, 3);
  publish_shared_file(path, "what it holds", {a, {}, c});
  CHECK(entries(dir.path()) == 1);  // no temp file left
  auto m = SharedMapping::open(path);
  CHECK(m->meta() == "what it holds");
  REQUIRE(m->block_count() == 3);
  CHECK(std::vector<std::byte>(m->block(0).begin(), m->block(0).end()) == a);
  CHECK(m->block(1).empty());
  CHECK(std::vector<std::byte>(m->block(2).begin(), m->block(2).end()) == c);
  CHECK(reinterpret_cast<std::uintptr_t>(m->block(0).data()) % 4096 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(m->block(2).data()) % 4096 == 0);
  CHECK(mapping_perms(path) == "r--s");  // shared, and no rank can write into it
  // A reader's mapping outlives the file's name (the writer replaced the teacher).
  fs::remove(path);
  CHECK(std::vector<std::byte>(m->block(2).begin(), m->block(2).end()) == c);
  m.reset();
  CHECK(mapping_perms(path).empty());  // unmapped with its last holder
}

TEST_CASE("shared file: a folder that cannot take it, or a file that is missing or damaged, is an error naming it",
          "[teachers][share]") {
  test::TempDir dir;
  const auto a = bytes_of(100, 2);
  const std::string nowhere = dir.str("missing/codistill-teacher.1.x");
  CHECK_THROWS_WITH(publish_shared_file(nowhere, "m", {a}), Catch::Contains(dir.str("missing")));
  CHECK_THROWS_AS(SharedMapping::open(dir.str("absent")), SharedFileError);
  std::ofstream(dir.str("other")) << "not a shared file at all, just text";
  CHECK_THROWS_WITH(SharedMapping::open(dir.str("other")), Catch::Contains("not a codistill shared file"));
  const std::string path = dir.str("codistill-teacher.1.y");
  publish_shared_file(path, "m", {a});
  fs::resize_file(path, 4096 + 10);  // the block cut short
  CHECK_THROWS_WITH(SharedMapping::open(path), Catch::Contains("past its end"));
}

TEST_CASE("shared file: the writer's hold removes its file, not one published under its name since",
          "[teachers][share]") {
  test::TempDir dir;
  const std::string path = dir.str("codistill-teacher.1.z");
  const auto a = bytes_of(64, 4);
  publish_shared_file(path, "first", {a});
  { SharedFileOwner owner(path); }
  CHECK_FALSE(fs::exists(path));
  publish_shared_file(path, "first", {a});
  {
    SharedFileOwner old(path);
    publish_shared_file(path, "second", {a});  // the same step loaded again
  }
  REQUIRE(fs::exists(path));
  CHECK(SharedMapping::open(path)->meta() == "second");
}

TEST_CASE("shared file: stale files of dead writers are removed, live writers' and others' kept", "[teachers][share]") {
  test::TempDir dir;
  const long dead = dead_pid(), alive = ::getpid();
  const auto a = bytes_of(16, 5);
  const std::string stale = shared_file_path(dir.str(), dead, "r.w0.p1.s5.float32");
  const std::string live = shared_file_path(dir.str(), alive, "r.w0.p1.s5.float32");
  publish_shared_file(stale, "m", {a});
  publish_shared_file(live, "m", {a});
  const std::string stale_temp = dir.str(".codistill-teacher." + std::to_string(dead) + ".r.w0.p1.s9.float32.tmp");
  std::ofstream(stale_temp) << "half written";
  std::ofstream(dir.str("codistill-teacher.notapid.x")) << "x";
  std::ofstream(dir.str("codistill-teacher.99999999999999999999.x")) << "x";  // no pid at all
  std::ofstream(dir.str("unrelated")) << "x";
  const auto removed = remove_stale_shared_files(dir.str());
  CHECK(removed.size() == 2);
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(stale_temp));
  CHECK(fs::exists(live));
  CHECK(fs::exists(dir.str("codistill-teacher.notapid.x")));
  CHECK(fs::exists(dir.str("codistill-teacher.99999999999999999999.x")));
  CHECK(fs::exists(dir.str("unrelated")));
  CHECK(remove_stale_shared_files(dir.str("no-such-folder")).empty());
}
