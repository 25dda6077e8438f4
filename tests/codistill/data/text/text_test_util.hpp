#pragma once
// Helpers of the text-data tests: real text (the project's own docs, always in the
// source tree: prose, tables and code), random bytes, and files of bytes.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codistill/util/rng.hpp"

namespace codistill::test::text {

// Every docs/*.md file of the repository, sorted by name.
inline std::vector<std::string> project_docs() {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CODISTILL_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> texts;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
  }
  return texts;
}

inline std::string random_bytes(std::size_t n, Rng& rng) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.below(256));
  return s;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace codistill::test::text
