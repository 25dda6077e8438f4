#include "codistill/persist/membership.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/filesystem.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fs = boost::filesystem;

namespace codistill {

std::string marker_path(const std::string& worker_dir, const char* name) {
  return (fs::path(worker_dir) / name).string();
}

std::optional<Membership> read_marker(const std::string& worker_dir, const char* name) {
  const std::string path = marker_path(worker_dir, name);
  boost::system::error_code ec;
  if (!fs::exists(path, ec) || ec) return std::nullopt;
  Membership m;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  // A hand-made marker (empty, or any text) counts all the same, of unknown step.
  const auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_object()) {
    if (doc.contains("step") && doc["step"].is_number_integer()) m.step = doc["step"].get<std::int64_t>();
    if (doc.contains("reason") && doc["reason"].is_string()) m.reason = doc["reason"].get<std::string>();
  }
  return m;
}

void write_marker(const std::string& worker_dir, const char* name, int worker, const Membership& m) {
  const std::string path = marker_path(worker_dir, name);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const nlohmann::json doc = {{"worker", worker}, {"step", m.step}, {"reason", m.reason}};
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump() << "\n";
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot publish {}: {}", path, std::strerror(err)));
  }
}

}  // namespace codistill
