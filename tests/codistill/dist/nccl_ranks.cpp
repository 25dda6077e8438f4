// One rank of the nccl process group's multi-process tests: test_process_group_nccl.cpp
// starts `mpirun -np N nccl_ranks SCENARIO ...` (each rank needs a GPU of its own: NCCL
// refuses two ranks on one device) and checks the exit code and output.
//   collectives       the device all-reduce (buckets started one by one and fused,
//                     interleaved with host collectives) against sums computed here, on
//                     memory of the group's device through a CUDA queue of the backend;
//                     the host collectives (broadcast, float and float64 sums, barrier);
//                     misuse refused without breaking the group. Exit 0 when all hold.
//   timeout DIR       the last rank never enters the device all-reduce: the others must
//                     throw CollectiveTimeout (2 s deadline), then refuse further calls;
//                     each writes what it saw to DIR/rank-R.txt and exits 3.
// A failed check prints "rank R: FAILED: ..." and exits 1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codistill/dist/process_group.hpp"
#include "kernels/backend.hpp"

namespace dist = codistill::dist;
namespace kernels = codistill::kernels;

namespace {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw CheckFailed(what);
}

// A CUDA queue on the group's device, and float tensors moved through it.
struct OnDevice {
  explicit OnDevice(const dist::ProcessGroup& g)
      : device(kernels::Device::parse(g.device())), queue(kernels::backend_for(device).make_queue(device)) {}

  kernels::Tensor upload(const std::vector<float>& host) {
    kernels::Tensor h = kernels::Tensor::from_vector({static_cast<std::int64_t>(host.size())}, host);
    kernels::Tensor d = kernels::Tensor::empty({static_cast<std::int64_t>(host.size())}, kernels::DType::f32, device);
    queue->copy(d, h);  // queued: the reduction must wait for it on the queue's stream
    keep.push_back(std::move(h));
    return d;
  }
  std::vector<float> download(const kernels::Tensor& d) {
    kernels::Tensor h = kernels::Tensor::empty({d.numel()});
    queue->copy(h, d);
    queue->synchronize();
    return {h.data<float>(), h.data<float>() + d.numel()};
  }

  kernels::Device device;
  std::unique_ptr<kernels::Queue> queue;
  std::vector<kernels::Tensor> keep;  // host sources of queued copies stay alive
};

std::span<float> span_of(kernels::Tensor& t, std::size_t begin, std::size_t end) {
  return {static_cast<float*>(t.raw()) + begin, end - begin};
}

// Integers in float (all sums below 2^24) add exactly in any order: compared bit for bit,
// for several bucket sizes, started one call per bucket (as backward makes them ready) or
// all in one fused call (as finish() does).
void check_integer_sums(dist::ProcessGroup& g, OnDevice& dev) {
  const int n = g.size(), r = g.rank();
  const std::size_t count = 10007;
  for (std::size_t bucket_bytes : {std::size_t{28}, std::size_t{4 * 1000}, std::size_t{1} << 20}) {
    for (bool fused : {false, true}) {
      std::vector<float> host(count);
      for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>((r + 1) * int(i % 97) - int(i % 1013));
      kernels::Tensor d = dev.upload(host);
      std::vector<std::span<float>> buckets;
      for (const dist::Bucket& b : dist::bucket_ranges(count, bucket_bytes)) buckets.push_back(span_of(d, b.begin, b.end));
      if (fused) {
        g.start_device_all_reduce_sum(buckets, dev.queue->native_stream());
      } else {
        for (std::size_t i = buckets.size(); i-- > 0;) {  // last first, as GradientReducer
          g.start_device_all_reduce_sum(std::span(&buckets[i], 1), dev.queue->native_stream());
          g.poll();
        }
      }
      // A host collective while the device ones are in flight (agree_after_step's kind).
      float flag[4] = {1.0f, float(r), 0.5f, 0.0f};
      g.all_reduce_sum(std::span<float>(flag, 4));
      check(flag[0] == float(n) && flag[1] == float(n * (n - 1) / 2), "host all_reduce_sum beside device buckets");
      g.wait_all();
      check(g.poll(), "poll() after wait_all() must say that nothing is in flight");
      const std::vector<float> got = dev.download(d);
      for (std::size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(int(i % 97) * n * (n + 1) / 2 - n * int(i % 1013));
        check(got[i] == want, "device all-reduce, buckets of " + std::to_string(bucket_bytes) + " bytes" +
                                  (fused ? " fused" : " one by one") + ", element " + std::to_string(i) + ": got " +
                                  std::to_string(got[i]) + ", want " + std::to_string(want));
      }
    }
  }
}

void check_host_collectives(dist::ProcessGroup& g) {
  const int last = g.size() - 1;
  std::vector<std::byte> bytes(1001, std::byte{0xEE});
  if (g.rank() == last)
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte((i * 31) & 0xff);
  g.broadcast(bytes, last);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    check(bytes[i] == std::byte((i * 31) & 0xff), "broadcast from the last rank: byte " + std::to_string(i));
  std::vector<double> sums = {1.0, 1e-9 * (g.rank() + 1)};
  g.all_reduce_sum_f64(sums);
  check(sums[0] == g.size(), "all_reduce_sum_f64 of ones");
  g.barrier();
}

// Misuse is refused before anything is sent, and the group stays usable.
void check_refusals(dist::ProcessGroup& g, OnDevice& dev) {
  std::vector<float> host(16, 1.0f);
  std::vector<std::span<float>> on_host = {host};
  bool refused = false;
  try {
    g.start_device_all_reduce_sum(on_host, dev.queue->native_stream());
  } catch (const dist::ProcessGroupError& e) {
    refused = std::string(e.what()).find("not on " + g.device()) != std::string::npos;
  }
  check(refused, "host memory passed to start_device_all_reduce_sum was not refused");
  kernels::Tensor d = dev.upload(host);
  std::vector<std::span<float>> ok = {span_of(d, 0, 16)};
  refused = false;
  try {
    g.start_device_all_reduce_sum(ok, nullptr);
  } catch (const dist::ProcessGroupError& e) {
    refused = std::string(e.what()).find("without a stream") != std::string::npos;
  }
  check(refused, "a device all-reduce without a stream was not refused");
  g.start_device_all_reduce_sum(ok, dev.queue->native_stream());
  g.wait_all();
  for (float x : dev.download(d)) check(x == float(g.size()), "the group after refusals: got " + std::to_string(x));
}

int collectives() {
  dist::GroupOptions options;
  options.kind = "nccl";
  options.timeout = std::chrono::seconds(60);
  auto g = dist::make_process_group(options);
  check(g->kind() == "nccl" && g->reduces_device_memory(), "kind nccl made '" + g->kind() + "'");
  OnDevice dev(*g);
  check_integer_sums(*g, dev);
  check_host_collectives(*g);
  check_refusals(*g, dev);
  std::printf("rank %d of %d on %s: all collectives ok\n", g->rank(), g->size(), g->device().c_str());
  return 0;
}

void record(const std::filesystem::path& shared, int rank, const std::string& line) {
  std::printf("rank %d: %s\n", rank, line.c_str());
  std::ofstream(shared / ("rank-" + std::to_string(rank) + ".txt"), std::ios::app) << line << "\n";
}

int timeout(const std::filesystem::path& shared) {
  dist::GroupOptions options;
  options.kind = "nccl";
  options.timeout = std::chrono::seconds(2);
  auto g = dist::make_process_group(options);
  if (g->rank() == g->size() - 1) {
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::minutes(5));  // never enters; mpirun ends it
    return 0;
  }
  OnDevice dev(*g);
  kernels::Tensor d = dev.upload(std::vector<float>(1000, 1.0f));
  std::vector<std::span<float>> buckets = {span_of(d, 0, 1000)};
  try {
    g->start_device_all_reduce_sum(buckets, dev.queue->native_stream());
    g->wait_all();
    throw CheckFailed("the device all-reduce returned although the last rank never entered it");
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
  // The compute stream never waited on the aborted reduction: it still runs.
  dev.queue->synchronize();
  record(shared, g->rank(), "queue still usable");
  std::fflush(stdout);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "collectives" && argc == 2) return collectives();
    if (scenario == "timeout" && argc == 3) return timeout(argv[2]);
    std::fprintf(stderr, "usage: %s collectives | timeout DIR\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::printf("rank %s: FAILED: %s\n", std::getenv("OMPI_COMM_WORLD_RANK") ? std::getenv("OMPI_COMM_WORLD_RANK") : "?",
                e.what());
    return 1;
  }
}
