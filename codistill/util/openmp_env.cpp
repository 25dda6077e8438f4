#include "codistill/util/openmp_env.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace codistill {
namespace {

constexpr const char* kChoiceVar = "CODISTILL_OPENMP_SPIN_CHOICE";

struct CpuTimes {
  unsigned long long total = 0, idle = 0, self = 0;
  int cpus = 0;
};

// This process's CPU time (all its threads, user + system, in clock ticks) from
// /proc/self/stat: at start, before main, libraries may already run threads (OpenBLAS
// starts its pool when it is loaded, and its threads spin a while), which are not other work.
std::optional<unsigned long long> read_self_ticks() {
  std::ifstream in("/proc/self/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = all.rfind(')');  // the command name may hold spaces
  if (all.empty() || paren == std::string::npos) return std::nullopt;
  std::istringstream fields(all.substr(paren + 1));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 13; ++i)  // fields 3 (state) .. 13; utime and stime are 14 and 15
    if (!(fields >> f)) return std::nullopt;
  if (!(fields >> utime >> stime)) return std::nullopt;
  return utime + stime;
}

// /proc/stat's aggregate line (user nice system idle iowait irq softirq steal; guest time is
// inside user) and the count of per-CPU lines.
std::optional<CpuTimes> read_cpu_times() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  CpuTimes t;
  std::string line;
  bool aggregate = false;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    if (line.size() > 3 && line[3] >= '0' && line[3] <= '9') {
      ++t.cpus;
      continue;
    }
    std::istringstream fields(line.substr(3));
    unsigned long long v[8] = {};
    for (auto& x : v)
      if (!(fields >> x)) return std::nullopt;
    for (auto x : v) t.total += x;
    t.idle = v[3] + v[4];
    aggregate = true;
  }
  if (!aggregate || t.cpus < 1) return std::nullopt;
  const auto self = read_self_ticks();
  if (!self) return std::nullopt;
  t.self = *self;
  return t;
}

std::string fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

void reexec_bounded(char** argv, const std::string& why) {
  ::setenv(kChoiceVar, (std::string("bounded (") + kOpenMpSpinCount + "): " + why).c_str(), 1);
  if (::setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not executed again (no /proc, say): run on as before, with libgomp's defaults, and
  // without a GOMP_SPINCOUNT that would claim otherwise to this process's children.
  ::unsetenv("GOMP_SPINCOUNT");
  ::setenv(kChoiceVar, ("libgomp's default: executing again failed (" + why + ")").c_str(), 1);
}

}  // namespace

std::optional<CpuLoad> sample_cpu_load(int window_ms) {
  const auto a = read_cpu_times();
  if (!a) return std::nullopt;
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  const auto b = read_cpu_times();
  if (!b || b->total <= a->total) return std::nullopt;  // no tick in the window: unknown
  const double total = static_cast<double>(b->total - a->total);
  const double idle = static_cast<double>(b->idle >= a->idle ? b->idle - a->idle : 0);
  const double self = static_cast<double>(b->self >= a->self ? b->self - a->self : 0);
  CpuLoad load;
  load.cpus = b->cpus;
  // total spans every CPU: a tick of it is 1/cpus of a CPU's time.
  load.busy = std::clamp((total - idle - self) / total, 0.0, 1.0) * b->cpus;
  return load;
}

bool bound_openmp_spin(const std::optional<CpuLoad>& load) { return !load || load->busy >= kSharedBusyCpus; }

void reexec_with_bounded_openmp_spin(char** argv) {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if ((spin && *spin) || (policy && *policy)) return;
  const char* mode = std::getenv("CODISTILL_OPENMP_SPIN");
  const std::string m = mode && *mode ? mode : "auto";
  if (m == "bounded") return reexec_bounded(argv, "CODISTILL_OPENMP_SPIN=bounded");
  if (m == "default") {
    ::setenv(kChoiceVar, "libgomp's default: CODISTILL_OPENMP_SPIN=default", 1);
    return;
  }
  if (m != "auto") {
    std::fprintf(stderr, "%s: CODISTILL_OPENMP_SPIN='%s' is not one of auto, bounded, default\n",
                 argv && argv[0] ? argv[0] : "codistill", m.c_str());
    std::exit(2);
  }
  const auto load = sample_cpu_load(100);
  const std::string seen = load ? fixed(load->busy) + " of " + std::to_string(load->cpus) +
                                      " CPUs busy with other work at start"
                                : "the machine's load could not be read from /proc/stat";
  if (bound_openmp_spin(load)) return reexec_bounded(argv, seen);
  ::setenv(kChoiceVar, ("libgomp's default: " + seen).c_str(), 1);
}

std::string openmp_spin_summary() {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* choice = std::getenv(kChoiceVar);
  std::string s = "GOMP_SPINCOUNT=" + std::string(spin && *spin ? spin : "(unset)") +
                  ", OMP_WAIT_POLICY=" + std::string(policy && *policy ? policy : "(unset)");
  if (choice && *choice) return s + "; chosen here: " + choice;
  return s + " (from the environment)";
}

}  // namespace codistill
