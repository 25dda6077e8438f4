// How far apart the two cores a two-thread run gets are, right now:
//   bench_core_link [--cpus A,B] [--json PATH]
// On this project's shared 2-vCPU host the hypervisor moves the two vCPUs between cores that
// share a cache and cores that do not, every few seconds. A cache line's round trip between
// them measured 63-104 ns in the first placement and 316-363 ns in the second (80 probes
// of two benchmark runs: 57 and 23), and a 512 KiB buffer written by one thread and read by
// the other took 45-75 vs 153-202 us. Compute alone does not see it (each vCPU keeps its
// one-thread sgemm rate). Two one-thread trainers side by side kept their 64-74k
// examples/s each while the two-thread fmnist_mlp, whose threads hand activations,
// gradients and parameters to each other every step, fell from 125-150k to 75-97k: its
// slow phases come from the interaction of its threads, and the far placement is the
// suspect. Not proven: a probe before and after a run does not tell the placement during
// it (it changes within seconds; runs probed near at both ends measured 86-127k), and a
// probe during a run measures its contention with the run instead.
// bench/run_train_bench.sh runs this before and after every training run, so that each
// run's number can be read with the placement it had.
// Prints one line: "core link: round trip R ns, 512 KiB hand-off H us (cpus A,B)"; with
// --json also {"round_trip_ns", "handoff_us", "cpus"}. Each value is the median of 5 short
// measurements (about 10 ms each: the placement can change within a second).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Clock = std::chrono::steady_clock;

// A flag alone on its cache line (on the stack, a neighbouring variable the spinning thread
// reads would share the line and double the transfers).
struct alignas(64) Line {
  std::atomic<std::int64_t> v{0};
};

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof(s), &s) != 0)
    throw std::runtime_error("cannot pin a thread to cpu " + std::to_string(cpu));
}

// The first two CPUs this process may run on.
std::pair<int, int> default_cpus() {
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof(s), &s) != 0) throw std::runtime_error("sched_getaffinity failed");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &s)) cpus.push_back(c);
  if (cpus.size() < 2) throw std::runtime_error("this process may run on one CPU only: nothing to measure");
  return {cpus[0], cpus[1]};
}

// Runs `side(0)` on cpu a (this thread) and `side(1)` on cpu b, both starting once both are
// pinned and running; returns the wall seconds of side(0) from that start.
double on_both(int a, int b, const std::function<void(int)>& side) {
  std::atomic<int> ready{0};
  auto start = [&] {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
  };
  std::thread t([&] {
    pin(b);
    start();
    side(1);
  });
  pin(a);
  start();
  const auto t0 = Clock::now();
  side(0);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  t.join();
  return s;
}

// One cache line bounced between the two threads, `n` round trips: ns per round trip.
double round_trip_ns(int a, int b, int n) {
  const auto line = std::make_unique<Line>();
  std::atomic<std::int64_t>& flag = line->v;
  const double s = on_both(a, b, [&](int me) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (me == 0) {
        flag.store(2 * i + 1, std::memory_order_release);
        while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
        }
      } else {
        while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        flag.store(2 * i + 2, std::memory_order_release);
      }
    }
  });
  return s * 1e9 / n;
}

// A 512 KiB buffer (about one fmnist_mlp layer's activations and gradients) written by one
// thread and then read by the other, turns alternating, `n` turns: us per turn.
double handoff_us(int a, int b, int n) {
  std::vector<std::uint64_t> buf(512 * 1024 / sizeof(std::uint64_t), 1);
  const auto line = std::make_unique<Line>();
  std::atomic<std::int64_t>& turn = line->v;
  std::atomic<std::uint64_t> sink{0};
  const double s = on_both(a, b, [&](int me) {
    for (int r = 0; r < n; ++r) {
      while (turn.load(std::memory_order_acquire) != 2 * r + me) {
      }
      if (r % 2 == me) {
        std::fill(buf.begin(), buf.end(), static_cast<std::uint64_t>(r));
      } else {  // eight independent xors: the read runs at the rate the line transfers allow
        std::uint64_t x[8] = {};
        for (std::size_t i = 0; i + 8 <= buf.size(); i += 8)
          for (int k = 0; k < 8; ++k) x[k] ^= buf[i + k];
        sink.fetch_xor(x[0] ^ x[1] ^ x[2] ^ x[3] ^ x[4] ^ x[5] ^ x[6] ^ x[7], std::memory_order_relaxed);
      }
      turn.store(2 * r + me + 1, std::memory_order_release);
    }
  });
  // Each round r has one write and one read of the buffer, on different threads.
  return s * 1e6 / n;
}

double median_of(int reps, const std::function<double()>& f) {
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) v.push_back(f());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::pair<int, int> cpus{-1, -1};
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value (usage: [--cpus A,B] [--json PATH])");
      const std::string v = argv[++i];
      if (k == "--cpus") {
        const auto comma = v.find(',');
        if (comma == std::string::npos) throw std::invalid_argument("--cpus wants A,B, got '" + v + "'");
        cpus = {std::stoi(v.substr(0, comma)), std::stoi(v.substr(comma + 1))};
      } else if (k == "--json") {
        json_path = v;
      } else {
        throw std::invalid_argument("unknown argument " + k + " (usage: [--cpus A,B] [--json PATH])");
      }
    }
    if (cpus.first < 0) cpus = default_cpus();
    const int a = cpus.first, b = cpus.second;
    const double rt = median_of(5, [&] { return round_trip_ns(a, b, 20000); });
    const double ho = median_of(5, [&] { return handoff_us(a, b, 100); });
    std::printf("core link: round trip %.0f ns, 512 KiB hand-off %.1f us (cpus %d,%d)\n", rt, ho, a, b);
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << nlohmann::json{{"round_trip_ns", rt}, {"handoff_us", ho}, {"cpus", {a, b}}}.dump() << "\n";
      if (!f) throw std::runtime_error("cannot write " + json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_core_link: %s\n", e.what());
    return 1;
  }
}
