#pragma once
// What the host says about this process's memory and the memory it may still take: the
// resident set (now and its peak, /proc/self/status VmRSS and VmHWM), the available memory
// (/proc/meminfo MemAvailable) and a cgroup v2 limit (memory.max less memory.current), for
// the memory plan (codistill/train/memory_plan.hpp). Linux; elsewhere nullopt.
#include <cstdint>
#include <optional>
#include <string>

namespace codistill::memory {

// Bytes: the resident set now, and its high-water mark since the process started.
std::optional<std::int64_t> resident_bytes();
std::optional<std::int64_t> resident_peak_bytes();

// What a process may still allocate on this host, and what says so ("MemAvailable",
// "cgroup memory.max"): the smaller of the two where both are known.
struct HostAvailable {
  std::int64_t bytes = 0;
  std::string source;
};
std::optional<HostAvailable> host_available();

// "12GiB", "800MB", "1.5G", "4096" (bytes) -> bytes; nullopt for anything else. Units are
// binary for KiB..TiB and K/M/G/T, decimal for kB/MB/GB/TB.
std::optional<std::int64_t> parse_bytes(const std::string& text);
// 1536 -> "1.5 KiB": three significant digits, binary units.
std::string format_bytes(std::int64_t bytes);

}  // namespace codistill::memory
