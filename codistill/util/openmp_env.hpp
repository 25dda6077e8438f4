#pragma once
// How long libgomp's idle threads spin before they sleep, chosen for this process before the
// OpenMP runtime reads it.
//
// Why: every CPU op is an OpenMP parallel region (an MLP step has 15-20), and at each
// region's end a thread that is done spins while it waits for the others; libgomp's default
// is a long spin (GOMP_SPINCOUNT 300000). When another process takes one of the cores, the
// spinning thread keeps its core while the thread it waits for is descheduled: a 2-thread
// fmnist_mlp step measured 8k examples/s beside a compiler instead of ~245k when quiet,
// 213k with GOMP_SPINCOUNT=2000, which measured the same as the default on a quiet machine
// (README "On a shared machine"). libgomp reads its settings once, when it is loaded, from
// the environment, before main: so the only way to choose them from inside the program is
// to set the variable and execute the program again.
namespace codistill {

// The spin count set where the environment chooses nothing.
inline constexpr const char* kOpenMpSpinCount = "2000";

// Where neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set: sets GOMP_SPINCOUNT to
// kOpenMpSpinCount and executes /proc/self/exe again with the same arguments (same process
// id, so launchers such as mpirun and srun keep track of it). Returns where the environment
// already chooses (the user's setting, or the second execution) or where the execution
// failed (the process then runs on with libgomp's defaults, as before). Call it first in
// main, before anything starts threads.
void reexec_with_bounded_openmp_spin(char** argv);

}  // namespace codistill
