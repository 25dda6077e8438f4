#include "codistill/train/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace codistill {

Progress::Progress(std::int64_t total_steps, std::int64_t start_step, bool interactive)
    : total_(total_steps), start_(start_step), interactive_(interactive) {}

bool Progress::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void Progress::update(std::int64_t step, double loss, double examples_per_s) {
  if (!interactive_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && step < total_) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - began_).count();
  double done = static_cast<double>(step - start_);
  double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : NAN;
  int width = 24;
  int filled = total_ > 0 ? static_cast<int>(width * static_cast<double>(step) / static_cast<double>(total_)) : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(static_cast<std::size_t>(width), '.');
  std::fprintf(stdout, "\r[%s] step %lld/%lld  loss %.4f  %.0f ex/s  ETA %s   ", bar.c_str(),
               static_cast<long long>(step), static_cast<long long>(total_), loss, examples_per_s,
               format_duration(eta).c_str());
  std::fflush(stdout);
  drawn_ = true;
}

void Progress::clear() {
  if (!interactive_ || !drawn_) return;
  std::fprintf(stdout, "\r\033[K");
  std::fflush(stdout);
  drawn_ = false;
}

void Progress::finish() { clear(); }

}  // namespace codistill
