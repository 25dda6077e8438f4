#include "codistill/util/openmp_env.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
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

// The CPUs this process may run on (sched_getaffinity; under taskset or a cpuset, work on
// the other CPUs is not contention), or none where it cannot be read.
std::optional<cpu_set_t> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return std::nullopt;
  return set;
}

// /proc/stat's per-CPU lines (user nice system idle iowait irq softirq steal; guest time is
// inside user) summed over the usable CPUs, and this process's own time.
std::optional<CpuTimes> read_cpu_times(const cpu_set_t& usable) {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  CpuTimes t;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int id = -1;
    unsigned long long v[8] = {};
    if (!(fields >> id) || id < 0) return std::nullopt;
    for (auto& x : v)
      if (!(fields >> x)) return std::nullopt;
    if (id >= CPU_SETSIZE || !CPU_ISSET(id, &usable)) continue;
    ++t.cpus;
    for (auto x : v) t.total += x;
    t.idle += v[3] + v[4];
  }
  if (t.cpus < 1) return std::nullopt;
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

// The note for openmp_spin_summary, tagged with this process's id (kept across exec): a note
// inherited from another process is not this one's.
void set_note(const std::string& note) {
  ::setenv(kChoiceVar, (std::to_string(::getpid()) + ":" + note).c_str(), 1);
}

void reexec_bounded(char** argv, const std::string& why) {
  if (::setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1) != 0) {
    set_note("libgomp's default: GOMP_SPINCOUNT could not be set (" + why + ")");
    return;
  }
  set_note(std::string("bounded (") + kOpenMpSpinCount + "): " + why);
  ::execv("/proc/self/exe", argv);
  // Not executed again (no /proc, say): run on as before, with libgomp's defaults, and
  // without a GOMP_SPINCOUNT that would claim otherwise to this process's children.
  const std::string err = std::strerror(errno);
  ::unsetenv("GOMP_SPINCOUNT");
  set_note("libgomp's default: executing again failed (" + err + "; " + why + ")");
}

}  // namespace

std::optional<CpuLoad> sample_cpu_load(int window_ms) {
  const auto usable = usable_cpus();
  if (!usable) return std::nullopt;
  const auto a = read_cpu_times(*usable);
  if (!a) return std::nullopt;
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  const auto b = read_cpu_times(*usable);
  if (!b || b->total <= a->total) return std::nullopt;  // no tick in the window: unknown
  const double total = static_cast<double>(b->total - a->total);
  const double idle = static_cast<double>(b->idle >= a->idle ? b->idle - a->idle : 0);
  const double self = static_cast<double>(b->self >= a->self ? b->self - a->self : 0);
  CpuLoad load;
  load.cpus = b->cpus;
  // total spans the usable CPUs: a tick of it is 1/cpus of a CPU's time.
  load.busy = std::clamp((total - idle - self) / total, 0.0, 1.0) * b->cpus;
  return load;
}

bool bound_openmp_spin(const std::optional<CpuLoad>& load) { return !load || load->busy >= kSharedBusyCpus; }

void reexec_with_bounded_openmp_spin(char** argv, const char* program, const LaunchedRanks& launch) {
  const char* mode = std::getenv("CODISTILL_OPENMP_SPIN");
  const std::string m = mode && *mode ? mode : "auto";
  if (m != "auto" && m != "bounded" && m != "default") {
    std::fprintf(stderr, "%s: CODISTILL_OPENMP_SPIN='%s' is not one of auto, bounded, default\n", program,
                 m.c_str());
    std::exit(kOpenMpSpinUsageExit);
  }
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if ((spin && *spin) || (policy && *policy)) return;
  if (m == "bounded") return reexec_bounded(argv, "CODISTILL_OPENMP_SPIN=bounded");
  if (m == "default") return set_note("libgomp's default: CODISTILL_OPENMP_SPIN=default");
  if (launch.several) return reexec_bounded(argv, "one of several ranks of a launch (" + launch.evidence + ")");
  const auto load = sample_cpu_load(100);
  const std::string seen = load ? fixed(load->busy) + " of " + std::to_string(load->cpus) +
                                      " usable CPUs busy with other work at start"
                                : "the machine's load could not be read from /proc";
  if (bound_openmp_spin(load)) return reexec_bounded(argv, seen);
  set_note("libgomp's default: " + seen);
}

std::string openmp_spin_summary() {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* choice = std::getenv(kChoiceVar);
  std::string s = "GOMP_SPINCOUNT=" + std::string(spin && *spin ? spin : "(unset)") +
                  ", OMP_WAIT_POLICY=" + std::string(policy && *policy ? policy : "(unset)");
  const std::string tag = std::to_string(::getpid()) + ":";
  if (choice && std::string(choice).rfind(tag, 0) == 0) return s + "; chosen here: " + (choice + tag.size());
  return s + " (from the environment)";
}

}  // namespace codistill
