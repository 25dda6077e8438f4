#pragma once
// The kernel benches' memory readings (they link the kernels alone, not codistill's
// util/memory_info): kB of a line of /proc/self/status, e.g. "VmRSS" (resident now) or
// "VmHWM" (its peak since the process started). Linux only; throws where the line is absent.
#include <fstream>
#include <stdexcept>
#include <string>

namespace codistill::bench {

inline long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  throw std::runtime_error(std::string("no ") + key + " in /proc/self/status");
}

}  // namespace codistill::bench
