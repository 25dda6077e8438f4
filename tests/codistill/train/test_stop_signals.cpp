// install_stop_signal_handlers (train/training.hpp): SIGINT and SIGTERM reach the stop flag
// through a thread of their own, and the threads started afterwards (the OpenMP team that
// runs oneDNN's GEMMs, std::threads) have both blocked, so that no signal handler ever runs
// inside a kernel: a handler on a thread inside oneDNN 2.6's sgemm corrupted the heap (one
// trainer in about 150 crashed after SIGTERM). One test case: the flag, once set, stays set
// for the process, and Catch installs its own handlers at the start of each case. The
// trainer's own threads are checked from outside in tests/trainer/persist/test_resume_process.cpp.
#include <catch2/catch.hpp>

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <iterator>
#include <thread>
#include <vector>

#include "codistill/train/training.hpp"
#include "support/process.hpp"

namespace {

// Whether the calling thread blocks both stop signals.
bool blocks_stop_signals() {
  sigset_t now;
  sigemptyset(&now);
  if (::pthread_sigmask(SIG_BLOCK, nullptr, &now) != 0) return false;
  return sigismember(&now, SIGINT) == 1 && sigismember(&now, SIGTERM) == 1;
}

bool handler_is_ours(int sig) {
  struct sigaction now {};
  if (::sigaction(sig, nullptr, &now) != 0) return false;
  return now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN && (now.sa_flags & SA_RESTART) != 0;
}

std::ptrdiff_t thread_count() {
  return std::distance(std::filesystem::directory_iterator("/proc/self/task"), std::filesystem::directory_iterator{});
}

}  // namespace

TEST_CASE("SIGINT and SIGTERM stop training through a thread of their own, never inside the OpenMP team",
          "[train][signals]") {
  CHECK_FALSE(blocks_stop_signals());
  codistill::install_stop_signal_handlers();
  CHECK(blocks_stop_signals());
  CHECK(handler_is_ours(SIGINT));
  CHECK(handler_is_ours(SIGTERM));

  std::vector<int> team(4, 0);  // 1: blocks both, 2: does not
#pragma omp parallel num_threads(4)
  team[static_cast<std::size_t>(omp_get_thread_num())] = blocks_stop_signals() ? 1 : 2;
  CHECK(team[0] == 1);
  for (std::size_t t = 0; t < team.size(); ++t) {
    INFO("OpenMP thread " << t);
    CHECK(team[t] != 2);
  }

  // A library that replaces the handler and unblocks the signals: the next call puts both
  // back, and starts no second waiting thread.
  const auto threads = thread_count();
  ::signal(SIGTERM, SIG_DFL);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
  REQUIRE_FALSE(handler_is_ours(SIGTERM));
  REQUIRE_FALSE(blocks_stop_signals());
  codistill::install_stop_signal_handlers();
  CHECK(handler_is_ours(SIGTERM));
  CHECK(blocks_stop_signals());
  CHECK(thread_count() == threads);

  bool helper = false;
  std::thread([&] { helper = blocks_stop_signals(); }).join();
  CHECK(helper);

  // The waiting thread: the one thread inside sigwait, the signals unblocked there.
  auto waiting = [] {
    int n = 0;
    for (const auto& t : codistill::test::thread_signals(std::to_string(::getpid())))
      if (!t.blocks(SIGINT) && !t.blocks(SIGTERM) && t.syscall == SYS_rt_sigtimedwait) ++n;
    return n;
  };
  codistill::test::wait_until([&] { return waiting() > 0; }, 10);  // it may not have got there yet
  CHECK(waiting() == 1);

  REQUIRE_FALSE(codistill::stop_requested());
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);  // the waiting thread (or a pool thread's handler) takes it
  CHECK(codistill::test::wait_until([] { return codistill::stop_requested(); }, 30));
}
