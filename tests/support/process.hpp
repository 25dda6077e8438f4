#pragma once
// Process-level test helpers: temporary folders, running the real executables with their
// output captured, reading metrics.jsonl.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace codistill::test {

// Where tests put their folders: CODISTILL_TEST_SCRATCH when set (scripts/run_netfs_tests.sh
// points it at a network file system mounted over loopback, so that the store, owner and
// chaos tests run with their run directories there), else the system temp dir (TMPDIR).
inline std::filesystem::path scratch_root() {
  if (const char* s = std::getenv("CODISTILL_TEST_SCRATCH"); s && *s) {
    std::filesystem::create_directories(s);
    return s;
  }
  return std::filesystem::temp_directory_path();
}

// A fresh folder under scratch_root(), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = scratch_root() / ("codistill-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    if (std::getenv("CODISTILL_KEEP_TEST_DIRS")) return;  // for looking into a failure
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return (path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs a shell command line with stdout and stderr captured into files of dir.
inline ProcessResult run_command(const std::string& cmd, const TempDir& dir) {
  std::string out = dir.str("stdout.txt"), err = dir.str("stderr.txt");
  int status = std::system((cmd + " >" + out + " 2>" + err + " </dev/null").c_str());
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// Runs a Python script (Debian's interpreter, which has NumPy and h5py) with dir as its
// argument (sys.argv[1]); the test fails with the script's output unless it succeeds.
inline void run_python(const std::string& code, const TempDir& dir) {
  const std::string script = dir.str("script.py");
  write_text(script, code);
  const ProcessResult r = run_command("/usr/bin/python3 " + script + " " + dir.str(), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

inline std::string train_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-train"; }

// The command-line prefix that starts `ranks` ranks with `mpiexec` (OpenMPI's mpirun): the
// ranks may outnumber the cores, and root may run them (CI runs as root). Under the
// sanitized suite (ASAN_OPTIONS set) the ranks run sanitized but without LeakSanitizer:
// OpenMPI 4.1 does not free what MPI_Init allocated, and LSan would turn a clean rank's
// exit code into 1. Set through `env`: callers may exec the line.
// The launcher the tests start: CODISTILL_TEST_MPIEXEC where set (a bundle run on another
// machine sets it to the OpenMPI it carries: scripts/bundle_openmpi.sh), else the one CMake
// found at build time.
inline std::string mpiexec_path(const std::string& built_in) {
  const char* e = std::getenv("CODISTILL_TEST_MPIEXEC");
  return e && *e ? std::string(e) : built_in;
}

inline std::string mpirun_prefix(const std::string& built_in, int ranks) {
  const std::string mpiexec = mpiexec_path(built_in);
  std::string c;
  if (const char* asan = std::getenv("ASAN_OPTIONS"); asan && *asan)
    c = "env ASAN_OPTIONS='" + std::string(asan) + ":detect_leaks=0' ";
  c += mpiexec;
  if (::geteuid() == 0) c += " --allow-run-as-root";
  return c + " --oversubscribe -np " + std::to_string(ranks) + " ";
}

// Whether `mpiexec --version` runs: a GPU machine that runs a bundle may have no MPI
// launcher, and a test that needs one is then skipped (it prints "skipped: ...", which CTest
// reads as a skip), not failed.
inline bool mpirun_found(const std::string& built_in) {
  const std::string mpiexec = mpiexec_path(built_in);
  if (std::system((mpiexec + " --version >/dev/null 2>&1").c_str()) == 0) return true;
  std::printf("skipped: no MPI launcher (%s --version failed)\n", mpiexec.c_str());
  std::fflush(stdout);
  return false;
}

// All events of one kind from a metrics.jsonl.
inline std::vector<nlohmann::json> read_events(const std::filesystem::path& metrics, const std::string& event) {
  std::vector<nlohmann::json> events;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("event") == event) events.push_back(j);
  }
  return events;
}

}  // namespace codistill::test

#include <signal.h>
#include <spawn.h>

#include <chrono>
#include <thread>

extern char** environ;

namespace codistill::test {

// A child process started through /bin/sh (exec'd, so the pid is the program's own), with
// stdout and stderr going to files of dir. For tests that signal or kill it.
class Child {
 public:
  Child(const std::string& cmd, const TempDir& dir, const std::string& tag) {
    std::string line = "exec " + cmd + " >" + dir.str(tag + ".out") + " 2>" + dir.str(tag + ".err") + " </dev/null";
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }
  // Exit code, or 128 + signal number.
  int wait() {
    if (reaped_) return exit_;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_;
  }
  bool running() {
    int status = 0;
    if (reaped_) return false;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    return true;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_ = -1;
};

// Polls pred every 10 ms until it holds or timeout_s passes; returns whether it held.
template <class Pred>
bool wait_until(Pred pred, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// One thread of a process as /proc shows it: its id, its blocked-signal mask (SigBlk) and
// the system call it is blocked in (-1 when running or unknown; /proc/.../syscall).
struct ThreadSignals {
  std::string tid;
  unsigned long long blocked = 0;
  long syscall = -1;
  bool blocks(int sig) const { return (blocked >> (sig - 1)) & 1U; }
};
inline std::vector<ThreadSignals> thread_signals(const std::string& pid) {
  std::vector<ThreadSignals> out;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + pid + "/task")) {
    ThreadSignals ts;
    ts.tid = t.path().filename().string();
    std::ifstream status(t.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0) ts.blocked = std::stoull(line.substr(7), nullptr, 16);
    std::ifstream sc(t.path() / "syscall");
    std::string first;
    if (sc >> first && !first.empty() && first.find_first_not_of("0123456789") == std::string::npos)
      ts.syscall = std::stol(first);
    out.push_back(ts);
  }
  return out;
}

}  // namespace codistill::test
