// One rank of the multi-process process-group tests: test_process_group_mpi.cpp starts
// `mpirun -np N process_group_ranks SCENARIO ...` and checks the exit code and output.
//   collectives DIR   every collective checked against values computed here; DIR is a
//                     folder all ranks share (the barrier check). Exit 0 when all hold.
//   timeout OP DIR    the last rank never enters OP (all_reduce | broadcast | barrier):
//                     the others must throw CollectiveTimeout (2 s deadline) and then
//                     refuse further calls; each writes what it saw to DIR/rank-R.txt.
//                     They exit 3; the last rank sleeps until mpirun ends it.
//   dies              the last rank exits 7 before an all-reduce the others wait in.
// A failed check prints "rank R: FAILED: ..." and exits 1.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codistill/dist/launch.hpp"
#include "codistill/dist/process_group.hpp"

namespace dist = codistill::dist;

namespace {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw CheckFailed(what);
}

// FNV-1a over the bytes: a fingerprint of a rank's result to compare across ranks.
std::uint64_t fingerprint(std::span<const float> data) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte b : std::as_bytes(data)) h = (h ^ static_cast<std::uint8_t>(b)) * 1099511628211ull;
  return h;
}

// Every rank must hold the same bits: each rank in turn broadcasts its fingerprint (from
// every root, the non-zero ones included) and every rank compares it with its own.
void check_same_on_all_ranks(dist::ProcessGroup& g, std::span<const float> data, const std::string& what) {
  const std::uint64_t mine = fingerprint(data);
  for (int root = 0; root < g.size(); ++root) {
    std::uint64_t theirs = mine;
    g.broadcast(std::as_writable_bytes(std::span(&theirs, 1)), root);
    check(theirs == mine, what + ": rank " + std::to_string(root) + " holds other bits than this rank");
  }
}

// Integers in float (all sums below 2^24) are summed exactly in any order: compared bit
// for bit, for bucket sizes of one float, ones that do not divide the span, and ones
// larger than it.
void check_integer_sums(dist::ProcessGroup& g) {
  const int n = g.size(), r = g.rank();
  const std::size_t count = 1000;
  for (std::size_t bucket_bytes : {std::size_t{4}, std::size_t{28}, std::size_t{4 * 333}, std::size_t{4 * 1000},
                                   std::size_t{1} << 20}) {
    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>((r + 1) * int(i % 97) - int(i));
    g.all_reduce_sum(data, bucket_bytes);
    for (std::size_t i = 0; i < count; ++i) {
      float want = static_cast<float>(int(i % 97) * n * (n + 1) / 2 - n * int(i));
      check(data[i] == want, "integer all_reduce_sum, buckets of " + std::to_string(bucket_bytes) + " bytes, element " +
                                 std::to_string(i) + ": got " + std::to_string(data[i]) + ", want " +
                                 std::to_string(want));
    }
  }
}

std::vector<float> random_data(int rank, std::size_t count) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Random floats: the sum depends on the order MPI adds them in. Tolerance: 1e-6 of the sum
// of magnitudes (float32 rounding of at most 3 additions is below 4 * 2^-24 of it). The
// result must also be bit-identical on every rank (data-parallel replicas would drift
// apart otherwise).
void check_random_sums(dist::ProcessGroup& g) {
  const std::size_t count = 10007;  // prime: no bucket size below divides it
  std::vector<std::vector<float>> all;
  for (int q = 0; q < g.size(); ++q) all.push_back(random_data(q, count));
  for (std::size_t bucket_bytes : {std::size_t{4}, std::size_t{28}, std::size_t{4096}, std::size_t{1} << 20,
                                   g.options().bucket_bytes}) {
    std::vector<float> data = all[static_cast<std::size_t>(g.rank())];
    g.all_reduce_sum(data, bucket_bytes);
    for (std::size_t i = 0; i < count; ++i) {
      double want = 0, magnitude = 0;
      for (const auto& v : all) want += v[i], magnitude += std::fabs(v[i]);
      check(std::fabs(data[i] - want) <= 1e-6 * magnitude,
            "random all_reduce_sum, buckets of " + std::to_string(bucket_bytes) + " bytes, element " +
                std::to_string(i) + ": got " + std::to_string(data[i]) + ", want " + std::to_string(want));
    }
    check_same_on_all_ranks(g, data, "random all_reduce_sum, buckets of " + std::to_string(bucket_bytes) + " bytes");
  }
}

// The pieces all_reduce_sum is made of, driven by hand as an overlapping caller would.
void check_started_buckets(dist::ProcessGroup& g) {
  std::vector<float> a(300, 1.0f), b(5, 2.0f);
  g.start_all_reduce_sum(a);
  g.start_all_reduce_sum(b);
  g.poll();  // may or may not be done; drives progress
  g.wait_all();
  check(g.poll(), "poll() after wait_all() must say that nothing is in flight");
  for (float x : a) check(x == float(g.size()), "started bucket a: got " + std::to_string(x));
  for (float x : b) check(x == 2.0f * float(g.size()), "started bucket b: got " + std::to_string(x));
}

void check_broadcasts(dist::ProcessGroup& g) {
  const int last = g.size() - 1;
  for (int root : {last, 1 % g.size(), 0}) {
    std::vector<std::byte> bytes(100003, std::byte{0xEE});
    if (g.rank() == root)
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte((i * 31 + std::size_t(root)) & 0xff);
    g.broadcast(bytes, root);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      check(bytes[i] == std::byte((i * 31 + std::size_t(root)) & 0xff),
            "byte broadcast from rank " + std::to_string(root) + ": byte " + std::to_string(i) + " differs");
  }
  std::vector<float> floats = random_data(g.rank(), 777);
  g.broadcast(std::span<float>(floats), last);
  check(floats == random_data(last, 777), "float broadcast from rank " + std::to_string(last) + " differs");
  std::vector<std::byte> empty;
  g.broadcast(empty, last);
  // A root outside the group is refused before anything is sent, and the group stays usable.
  bool refused = false;
  try {
    g.broadcast(empty, g.size());
  } catch (const dist::ProcessGroupError& e) {
    refused = std::strstr(e.what(), "not a rank") != nullptr;
  }
  check(refused, "a broadcast from root " + std::to_string(g.size()) + " was not refused");
}

// Every rank leaves a file, then passes the barrier; after it every file must be there.
// The last rank arrives late, so a barrier that let the others through early would fail.
void check_barrier(dist::ProcessGroup& g, const std::filesystem::path& shared) {
  for (int round = 0; round < 3; ++round) {
    if (g.rank() == g.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::ofstream(shared / ("arrived-" + std::to_string(round) + "-" + std::to_string(g.rank()))) << "x";
    g.barrier();
    for (int q = 0; q < g.size(); ++q)
      check(std::filesystem::exists(shared / ("arrived-" + std::to_string(round) + "-" + std::to_string(q))),
            "barrier round " + std::to_string(round) + " returned before rank " + std::to_string(q) + " arrived");
  }
}

int collectives(const std::filesystem::path& shared) {
  dist::LaunchInfo launch = dist::detect_launch();
  check(launch.launcher == "openmpi", "detect_launch under mpirun gave '" + launch.launcher + "'");
  dist::GroupOptions options;  // kind auto: must pick mpi under mpirun
  options.timeout = std::chrono::seconds(60);
  options.bucket_bytes = 4 * 1000;  // does not divide 10007 floats
  auto g = dist::make_process_group(options);
  check(g->kind() == "mpi", "kind auto under mpirun made '" + g->kind() + "'");
  check(g->rank() == launch.rank && g->size() == launch.size,
        "rank/size " + std::to_string(g->rank()) + "/" + std::to_string(g->size()) + " differ from " + launch.evidence);
  check_integer_sums(*g);
  check_random_sums(*g);
  check_started_buckets(*g);
  check_broadcasts(*g);
  check_barrier(*g, shared);
  std::printf("rank %d of %d: all collectives ok\n", g->rank(), g->size());
  return 0;
}

// Records a line of what this rank saw, in its own file of the shared folder: the first
// rank to exit makes mpirun kill the others, so their stdout may not all get through.
void record(const std::filesystem::path& shared, int rank, const std::string& line) {
  std::printf("rank %d: %s\n", rank, line.c_str());
  std::ofstream(shared / ("rank-" + std::to_string(rank) + ".txt"), std::ios::app) << line << "\n";
}

int timeout(const std::string& op, const std::filesystem::path& shared) {
  dist::GroupOptions options;
  options.kind = "mpi";
  options.timeout = std::chrono::seconds(2);
  auto g = dist::make_process_group(options);
  if (g->rank() == g->size() - 1) {
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::minutes(5));  // never enters; mpirun ends it
    return 0;
  }
  std::vector<float> data(1000, 1.0f);
  try {
    if (op == "all_reduce") g->all_reduce_sum(data);
    else if (op == "broadcast") g->broadcast(std::span<float>(data), g->size() - 1);
    else if (op == "barrier") g->barrier();
    else throw CheckFailed("unknown collective '" + op + "'");
    throw CheckFailed(op + " returned although the last rank never entered it");
  } catch (const dist::CollectiveTimeout& e) {
    record(shared, g->rank(), std::string("timed out: ") + e.what());
  }
  try {
    g->barrier();
    throw CheckFailed("a barrier after the timeout was not refused");
  } catch (const dist::CollectiveTimeout&) {
    throw CheckFailed("a barrier after the timeout waited again instead of being refused");
  } catch (const dist::ProcessGroupError& e) {
    record(shared, g->rank(), std::string("refused after the timeout: ") + e.what());
  }
  // Exit only when every waiting rank has recorded (or after 60 s): a slower one must not
  // be killed half-way by mpirun ending the job on the first exit.
  std::ofstream(shared / ("done-" + std::to_string(g->rank()))) << "x";
  for (int tries = 0; tries < 6000; ++tries) {
    int done = 0;
    for (int q = 0; q < g->size() - 1; ++q) done += std::filesystem::exists(shared / ("done-" + std::to_string(q)));
    if (done == g->size() - 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fflush(stdout);
  return 3;
}

int dies() {
  dist::GroupOptions options;
  options.kind = "mpi";
  options.timeout = std::chrono::seconds(60);  // beyond the test's patience: mpirun must act
  auto g = dist::make_process_group(options);
  if (g->rank() == g->size() - 1) {
    std::printf("rank %d: exiting with 7\n", g->rank());
    std::fflush(stdout);
    ::_exit(7);
  }
  std::vector<float> data(1000, 1.0f);
  g->all_reduce_sum(data);
  std::printf("rank %d: FAILED: all_reduce_sum returned without the dead rank\n", g->rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "collectives" && argc == 3) return collectives(argv[2]);
    if (scenario == "timeout" && argc == 4) return timeout(argv[2], argv[3]);
    if (scenario == "dies" && argc == 2) return dies();
    std::fprintf(stderr, "usage: %s collectives DIR | timeout all_reduce|broadcast|barrier DIR | dies\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::printf("rank %s: FAILED: %s\n", std::getenv("OMPI_COMM_WORLD_RANK") ? std::getenv("OMPI_COMM_WORLD_RANK") : "?",
                e.what());
    return 1;
  }
}
