#include "codistill/util/memory_info.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace codistill::memory {

namespace {

// The value of "Key:   1234 kB" in a /proc file, in bytes.
std::optional<std::int64_t> proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':') continue;
    std::istringstream rest(line.substr(key.size() + 1));
    std::int64_t kib = 0;
    if (rest >> kib) return kib * 1024;
  }
  return std::nullopt;
}

// The first token of a one-line file (cgroup files: a number or "max").
std::optional<std::string> first_token(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (in >> token) return token;
  return std::nullopt;
}

// This process's cgroup v2 folder ("0::/a/b" in /proc/self/cgroup).
std::optional<std::string> cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> resident_bytes() { return proc_kib("/proc/self/status", "VmRSS"); }
std::optional<std::int64_t> resident_peak_bytes() { return proc_kib("/proc/self/status", "VmHWM"); }

std::optional<HostAvailable> host_available() {
  std::optional<HostAvailable> out;
  if (auto avail = proc_kib("/proc/meminfo", "MemAvailable")) out = HostAvailable{*avail, "MemAvailable"};
  // A container's limit binds before the host's free memory does.
  if (auto dir = cgroup_dir()) {
    const auto max = first_token(*dir + "/memory.max");
    const auto current = first_token(*dir + "/memory.current");
    if (max && current && *max != "max") {
      const std::int64_t left = std::stoll(*max) - std::stoll(*current);
      if (!out || left < out->bytes) out = HostAvailable{left, "cgroup memory.max less memory.current"};
    }
  }
  return out;
}

std::optional<std::int64_t> parse_bytes(const std::string& text) {
  double value = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%lf%n", &value, &used) != 1 || !(value >= 0)) return std::nullopt;
  const std::string unit = text.substr(static_cast<std::size_t>(used));
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit units[] = {{"", 1},      {"B", 1},      {"K", 0x1p10}, {"KiB", 0x1p10}, {"kB", 1e3},
                               {"M", 0x1p20}, {"MiB", 0x1p20}, {"MB", 1e6},   {"G", 0x1p30},  {"GiB", 0x1p30},
                               {"GB", 1e9},   {"T", 0x1p40}, {"TiB", 0x1p40}, {"TB", 1e12}};
  for (const Unit& u : units)
    if (unit == u.name) {
      const double bytes = std::round(value * u.scale);
      if (bytes > 9e18) return std::nullopt;
      return static_cast<std::int64_t>(bytes);
    }
  return std::nullopt;
}

std::string format_bytes(std::int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, std::fabs(v) < 10 ? 2 : (std::fabs(v) < 100 ? 1 : 0), units[u]);
}

}  // namespace codistill::memory
