#include "codistill/util/crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace codistill {
namespace {

const char* g_program = "codistill";
#if !defined(CODISTILL_SANITIZED)  // sanitizer builds keep the sanitizer's own reports
// The handler's own stack: a stack overflow (SIGSEGV) has no room left on the thread's.
alignas(16) char g_alt_stack[64 * 1024];
bool g_installed = false;
#endif

void put(const char* s) {
  const std::size_t n = std::strlen(s);
  if (::write(STDERR_FILENO, s, n) < 0) return;  // nothing else to do with an error here
}

const char* name_of(int sig) {  // strsignal is not async-signal-safe
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic exception)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (abort)";
    default: return "a fatal signal";
  }
}

extern "C" void on_fatal_signal(int sig, siginfo_t* /*info*/, void* /*context*/) {
  put("\n");
  put(g_program);
  put(": fatal signal ");
  char num[8] = {};
  int v = sig, i = 6;
  do num[i--] = static_cast<char>('0' + v % 10); while ((v /= 10) > 0 && i >= 0);
  put(num + i + 1);
  put(", ");
  put(name_of(sig));
  put("; stack of the thread that got it:\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND put the default action back: the signal raised here is delivered once this
  // handler returns (it is blocked while the handler runs), and a fault that recurs when the
  // instruction runs again ends the process the same way.
  ::raise(sig);
}

}  // namespace

void install_crash_report(const char* program) {
#if defined(CODISTILL_SANITIZED)
  (void)program;
#else
  if (g_installed) return;
  g_installed = true;
  g_program = program;
  void* warm[1];
  ::backtrace(warm, 1);  // loads the unwinder now, not in the handler
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
#endif
}

}  // namespace codistill
