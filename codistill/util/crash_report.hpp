#pragma once
// A report for a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): the executables
// print which signal and the stack of the thread that got it to stderr, then die of that
// same signal, so the exit status stays 128 + signal as scripts and tests expect.
//
// Why: on a CI machine a crash leaves nothing else to look at. One SIGTERM process test
// ended with exit 134 and only glibc's "malloc(): unaligned tcache chunk detected" (a heap
// block damaged earlier, found by a later malloc); with the stacks this report printed, the
// cause was found (docs/results.md, "Stopping with SIGTERM inside oneDNN's sgemm").
//
// The handler uses only async-signal-safe calls (write, backtrace_symbols_fd, sigaction,
// raise) and backtrace, whose first call loads the unwinder (an allocation): it is made
// once at installation, so that the handler never allocates. Frames are printed as
// binary(+offset) [address]: `addr2line -f -C -e BINARY OFFSET` names them. Not installed
// in sanitizer builds, whose own reports are better.
namespace codistill {

// Installs the handlers (again: no effect); `program` names the executable in the report
// (a string that lives as long as the process, e.g. a literal).
void install_crash_report(const char* program);

}  // namespace codistill
