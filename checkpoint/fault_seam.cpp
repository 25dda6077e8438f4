#include "checkpoint/fault_seam.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace codistill::fault_seam {

namespace {
std::mutex mu;
Plan installed;
std::map<std::string, WriteFault> armed;
}  // namespace

void install(Plan p) {
  std::lock_guard lock(mu);
  installed = std::move(p);
}

Plan plan() {
  std::lock_guard lock(mu);
  return installed;
}

bool listed(const std::vector<std::int64_t>& steps, std::int64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

void arm_write(const std::string& path, WriteFault fault) {
  std::lock_guard lock(mu);
  armed[path] = fault;
}

std::optional<WriteFault> take_write(const std::string& path) {
  std::lock_guard lock(mu);
  auto it = armed.find(path);
  if (it == armed.end()) return std::nullopt;
  WriteFault f = it->second;
  armed.erase(it);
  return f;
}

}  // namespace codistill::fault_seam
