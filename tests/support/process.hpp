#pragma once
// Process-level test helpers: temporary folders, running the real executables with their
// output captured, reading metrics.jsonl.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace codistill::test {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("codistill-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
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

inline std::string train_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-train"; }

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
