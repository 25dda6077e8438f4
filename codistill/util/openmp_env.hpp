#pragma once
// How long libgomp's idle threads spin before they sleep, chosen for this process before the
// OpenMP runtime reads it.
//
// Why: every CPU op is an OpenMP parallel region (an MLP step has 15-20, a ResNet-8 step
// over a hundred), and at each region's end a thread that is done spins while it waits for
// the others; libgomp's default is a long spin (GOMP_SPINCOUNT 300000). Two costs pull
// apart:
// - When another process takes one of the cores, the spinning thread keeps its core while
//   the thread it waits for is descheduled: a 2-thread fmnist_mlp step measured 8k
//   examples/s beside a compiler instead of ~245k when quiet, 213k with GOMP_SPINCOUNT=2000
//   (docs/training.md, "On a shared machine").
// - When the cores are free, a short spin puts the threads to sleep between regions and
//   every region then starts by waking them: on a 2-vCPU VM ResNet-8 trained 3-15% slower
//   with 2000 than with libgomp's default (docs/results.md, "OpenMP spin on a shared machine").
// So the executables measure, once at start, how busy the machine is with other work and
// bound the spin only where it is shared (or where ranks of a parallel launch start
// together); the measurement costs every start of an executable 100 ms. libgomp reads its
// settings once, when it is loaded, from the environment, before main: so the only way to
// choose them from inside the program is to set the variable and execute the program again.
#include <optional>
#include <string>

namespace codistill {

// The spin count set on a shared machine.
inline constexpr const char* kOpenMpSpinCount = "2000";
// The exit status for a CODISTILL_OPENMP_SPIN the program does not know (the executables'
// usage status).
inline constexpr int kOpenMpSpinUsageExit = 2;

// Other work's CPUs from which the machine counts as shared: half a core busy on average
// over the sampling window.
inline constexpr double kSharedBusyCpus = 0.5;

// The CPUs busy with other work over `window_ms` milliseconds: the non-idle time of the CPUs
// this process may run on (sched_getaffinity; /proc/stat's per-CPU lines) less this
// process's own (/proc/self/stat: libraries run threads before main, OpenBLAS's pool spins
// when it is loaded), in CPUs, and how many such CPUs there are; nullopt where /proc cannot
// be read or parsed.
struct CpuLoad {
  double busy = 0;
  int cpus = 0;
};
std::optional<CpuLoad> sample_cpu_load(int window_ms);

// The decision of reexec_with_bounded_openmp_spin, for a measured load (nullopt: unknown,
// treated as shared, the safe side): true = bound the spin.
bool bound_openmp_spin(const std::optional<CpuLoad>& load);

// A parallel launch as the caller found it (util is below dist/launch.hpp, which detects
// launchers: the executables ask it and pass the answer down).
struct LaunchedRanks {
  // One of several ranks started together by a launcher (mpirun, srun), or of an unknown
  // count, or the launcher's variables could not be read: such ranks would each sample a
  // machine their siblings are about to fill.
  bool several = false;
  // Why, for the note: the launcher's variables, or what was wrong with them.
  std::string evidence;
};

// Where neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set: where this process is one of
// several ranks of a parallel launch (`launch`), or where the load sampled for 100 ms says
// the machine is shared (bound_openmp_spin), sets GOMP_SPINCOUNT to
// kOpenMpSpinCount and executes /proc/self/exe again with the same arguments (same process
// id, so launchers such as mpirun and srun keep track of it); a quiet machine keeps
// libgomp's default. What it decided and why is left in CODISTILL_OPENMP_SPIN_CHOICE (tagged
// with the process id) for openmp_spin_summary. Returns where the environment already
// chooses (the user's setting, or the second execution) or where the execution failed (the
// process then runs on with libgomp's defaults).
// CODISTILL_OPENMP_SPIN=bounded|default skips the measurement (tests, or a user who knows);
// another value than auto, bounded or default prints "<program>: ..." naming the valid ones
// and exits with kOpenMpSpinUsageExit. Call it first in main, before anything starts threads.
void reexec_with_bounded_openmp_spin(char** argv, const char* program, const LaunchedRanks& launch);

// One line for the run's log: the spin in effect and why (the user's GOMP_SPINCOUNT or
// OMP_WAIT_POLICY, or what decided this process's choice; a note another process left in
// the environment is ignored).
std::string openmp_spin_summary();

}  // namespace codistill
