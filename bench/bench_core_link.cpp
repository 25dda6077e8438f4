// How far apart the two cores a two-thread run gets are, right now:
//   bench_core_link [--cpus A,B] [--json PATH]
// On this project's shared 2-vCPU host the hypervisor moves the two vCPUs between cores that
// share a cache and cores that do not, every few seconds: a cache line's round trip between
// them measured 59-110 ns or 260-421 ns (160 probes: 112 and 48). Bulk transfers barely
// see it: a 512 KiB buffer written by one thread and then read by the other took 20-47 vs
// 26-55 us (80 probes: 55 and 25), written over by the other 21-44 vs 29-52 us (40: 26 and
// 14). The
// two-thread fmnist_mlp has slow phases (75-97k examples/s against 125-150k) that two
// one-thread trainers side by side do not have (they kept 63-75k each through them): they
// come from the interaction of its threads, and whether the placement is their cause is
// open (docs/results.md).
// bench/run_train_bench.sh runs this before and after every training run, so that each
// run's number can be read with the placement around it (a hint: the placement can change
// within a run, and a probe during a run measures its contention with the run instead).
// Prints one line: "core link: round trip R ns, 512 KiB hand-off H us, rewrite W us (cpus
// A,B)"; with --json also {"round_trip_ns", "handoff_us", "rewrite_us", "cpus"}. Each value
// is the median of 5 short measurements (about 10 ms each).
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

// Inside a measurement a thread that cannot be pinned has no way back (its partner spins
// waiting for it): the CPUs were checked before (allowed_cpus), so this is only a message.
void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof(s), &s) != 0) {
    std::fprintf(stderr, "bench_core_link: cannot pin a thread to cpu %d\n", cpu);
    std::_Exit(1);
  }
}

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof(s), &s) != 0) throw std::runtime_error("sched_getaffinity failed");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) cpus.push_back(c);
  return cpus;
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

// A 512 KiB buffer (about one fmnist_mlp layer's activations and gradients) passed between
// the threads, `n` rounds: us per round. In round r thread r % 2 writes it first, then the
// other reads what it wrote (handoff: every read fetches the lines from the other core) or,
// with `rewrite`, writes it over (every write takes lines the other core holds modified,
// as when a buffer one thread zeroed or filled is accumulated into by the other).
double handoff_us(int a, int b, int n, bool rewrite) {
  std::vector<std::uint64_t> buf(512 * 1024 / sizeof(std::uint64_t), 1);
  const auto line = std::make_unique<Line>();
  std::atomic<std::int64_t>& turn = line->v;
  std::atomic<std::uint64_t> sink{0};
  const double s = on_both(a, b, [&](int me) {
    for (int r = 0; r < n; ++r) {
      const bool writer = r % 2 == me;
      const std::int64_t slot = 2 * r + (writer ? 0 : 1);  // the writer's turn, then the reader's
      while (turn.load(std::memory_order_acquire) != slot) {
      }
      if (writer || rewrite) {
        std::fill(buf.begin(), buf.end(), static_cast<std::uint64_t>(r));
      } else {  // eight independent xors: the read runs at the rate the line transfers allow
        std::uint64_t x[8] = {};
        for (std::size_t i = 0; i + 8 <= buf.size(); i += 8)
          for (int k = 0; k < 8; ++k) x[k] ^= buf[i + k];
        sink.fetch_xor(x[0] ^ x[1] ^ x[2] ^ x[3] ^ x[4] ^ x[5] ^ x[6] ^ x[7], std::memory_order_relaxed);
      }
      turn.store(slot + 1, std::memory_order_release);
    }
  });
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
        try {
          cpus = {std::stoi(v.substr(0, comma)), std::stoi(v.substr(comma + 1))};
        } catch (const std::exception&) {
          throw std::invalid_argument("--cpus wants two CPU numbers A,B, got '" + v + "'");
        }
      } else if (k == "--json") {
        json_path = v;
      } else {
        throw std::invalid_argument("unknown argument " + k + " (usage: [--cpus A,B] [--json PATH])");
      }
    }
    const std::vector<int> allowed = allowed_cpus();
    auto is_allowed = [&](int c) { return std::find(allowed.begin(), allowed.end(), c) != allowed.end(); };
    if (cpus.first < 0 && cpus.second < 0) {
      if (allowed.size() < 2) throw std::runtime_error("this process may run on one CPU only: nothing to measure");
      cpus = {allowed[0], allowed[1]};
    }
    const int a = cpus.first, b = cpus.second;
    if (a == b || !is_allowed(a) || !is_allowed(b))
      throw std::invalid_argument("--cpus " + std::to_string(a) + "," + std::to_string(b) +
                                  ": need two different CPUs this process may run on");
    const double rt = median_of(5, [&] { return round_trip_ns(a, b, 20000); });
    const double ho = median_of(5, [&] { return handoff_us(a, b, 100, false); });
    const double rw = median_of(5, [&] { return handoff_us(a, b, 100, true); });
    std::printf("core link: round trip %.0f ns, 512 KiB hand-off %.1f us, rewrite %.1f us (cpus %d,%d)\n", rt, ho, rw,
                a, b);
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << nlohmann::json{{"round_trip_ns", rt}, {"handoff_us", ho}, {"rewrite_us", rw}, {"cpus", {a, b}}}.dump()
        << "\n";
      if (!f) throw std::runtime_error("cannot write " + json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_core_link: %s\n", e.what());
    return 1;
  }
}
