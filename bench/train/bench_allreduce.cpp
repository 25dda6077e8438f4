// The cost of a worker group's gradient all-reduce: every rank sums a float span of a
// model's gradient size over the group (ProcessGroup::all_reduce_sum, buckets of
// group.bucket_mb's default), repeated; prints per size the median and best time per call
// and the bandwidth (bytes of the span / time). Run under the launcher, e.g.
//   mpirun -np 2 --oversubscribe build/bench/bench_allreduce [FLOATS...] [--calls N]
// (default sizes: the fmnist_mlp gradient, 269,322 floats, and the ResNet-8's, 77,754).
// Rank 0 prints; a run outside mpirun is the single-process identity (a baseline of ~0).
// --broadcast: rank 0's span copied to every rank instead (ProcessGroup::broadcast): what
// sending a teacher checkpoint's bytes to a group's ranks would cost, against each rank
// reading the file itself (bench_checkpoint's read times).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "codistill/dist/process_group.hpp"

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::size_t> sizes;
  int calls = 200;
  bool broadcast = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--broadcast")
      broadcast = true;
    else if (a == "--calls" && i + 1 < argc)
      calls = std::atoi(argv[++i]);
    else
      sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  }
  if (sizes.empty()) sizes = {269322, 77754};
  if (calls < 1) {
    std::fprintf(stderr, "bench_allreduce: --calls must be >= 1\n");
    return 2;
  }
  try {
    codistill::dist::GroupOptions options;
    auto group = codistill::dist::make_process_group(options);
    for (std::size_t n : sizes) {
      std::vector<float> data(n, 1.0f);
      std::vector<double> ms;
      for (int c = 0; c < calls + 5; ++c) {
        group->barrier();  // every rank starts together: the time is the collective's own
        const auto t = Clock::now();
        if (broadcast)
          group->broadcast(std::span<float>(data), 0);
        else
          group->all_reduce_sum(data);
        const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        if (c >= 5) ms.push_back(dt);  // the first calls set up MPI's buffers
        std::fill(data.begin(), data.end(), 1.0f);
      }
      std::sort(ms.begin(), ms.end());
      if (group->rank() == 0)
        std::printf("%s %s ranks %d floats %zu bytes %zu calls %d median_ms %.4f best_ms %.4f median_GBps %.3f\n",
                    broadcast ? "broadcast" : "allreduce", group->kind().c_str(), group->size(), n, n * sizeof(float), calls, ms[ms.size() / 2], ms[0],
                    static_cast<double>(n * sizeof(float)) / (ms[ms.size() / 2] * 1e6));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
