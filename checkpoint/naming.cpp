#include "checkpoint/naming.hpp"

#include <charconv>
#include <cstdio>

namespace codistill::checkpoint {

namespace {
template <class T>
std::optional<T> parse_digits(std::string_view s) {
  if (s.empty()) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}
}  // namespace

std::string worker_dir_name(int worker) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "worker-%03d", worker);
  return buf;
}

std::optional<int> parse_worker_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "worker-";
  if (!name.starts_with(prefix) || name.size() < prefix.size() + 3) return std::nullopt;
  return parse_digits<int>(name.substr(prefix.size()));
}

std::string checkpoint_file_name(std::int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%09lld.h5", static_cast<long long>(step));
  return buf;
}

std::string temp_file_name(std::int64_t step, long pid) {
  // Appends rather than `"." + std::string`: GCC 12 warns falsely (-Wrestrict) on the latter.
  std::string name = ".";
  name += checkpoint_file_name(step);
  name += ".tmp.";
  name += std::to_string(pid);
  return name;
}

namespace {
std::optional<std::int64_t> parse_step_name(std::string_view name, std::string_view prefix) {
  constexpr std::string_view suffix = ".h5";
  if (name.size() < prefix.size() + 9 + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return std::nullopt;
  return parse_digits<std::int64_t>(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
}
}  // namespace

std::optional<std::int64_t> parse_checkpoint_file_name(std::string_view name) { return parse_step_name(name, "ckpt-"); }

std::string teacher_file_name(std::int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "teacher-%09lld.h5", static_cast<long long>(step));
  return buf;
}

std::optional<std::int64_t> parse_teacher_file_name(std::string_view name) {
  return parse_step_name(name, "teacher-");
}

std::optional<long> parse_temp_file_pid(std::string_view name) {
  constexpr std::string_view marker = ".tmp.";
  if (!name.starts_with(".ckpt-") && !name.starts_with(".teacher-")) return std::nullopt;
  auto at = name.rfind(marker);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view published = name.substr(1, at - 1);
  if (!parse_checkpoint_file_name(published) && !parse_teacher_file_name(published)) return std::nullopt;
  return parse_digits<long>(name.substr(at + marker.size()));
}

std::optional<long> parse_any_temp_file_pid(std::string_view name) {
  if (auto pid = parse_temp_file_pid(name)) return pid;
  constexpr std::string_view marker = ".tmp.";
  const auto at = name.rfind(marker);
  if (at == std::string_view::npos || at == 0 || (at == 1 && name.front() == '.')) return std::nullopt;
  std::string_view tail = name.substr(at + marker.size());  // "<pid>" or "<pid>.<n>"
  if (const auto dot = tail.find('.'); dot != std::string_view::npos) {
    if (!parse_digits<long>(tail.substr(dot + 1))) return std::nullopt;
    tail = tail.substr(0, dot);
  }
  return parse_digits<long>(tail);
}

}  // namespace codistill::checkpoint
