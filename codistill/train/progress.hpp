#pragma once
// Progress reporting: on a terminal, one line rewritten in place with step, loss, rate and
// ETA; otherwise (pipes, files, CI) plain log lines every log_every steps.
#include <chrono>
#include <cstdint>
#include <string>

namespace codistill {

class Progress {
 public:
  Progress(std::int64_t total_steps, std::int64_t start_step, bool interactive);
  // Called every step; redraws at most ~10 times a second on a terminal.
  void update(std::int64_t step, double loss, double examples_per_s);
  // Clears the in-place line so a normal log line can be printed.
  void clear();
  void finish();
  bool interactive() const { return interactive_; }
  static bool stdout_is_terminal();

 private:
  std::int64_t total_, start_;
  bool interactive_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point began_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace codistill
