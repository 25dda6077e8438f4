// Scalar parsing and formatting helpers of the config loader (see config_text.hpp).
#include "codistill/config/config_text.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace codistill::config_detail {

std::optional<double> parse_number(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty() || text.front() == '+') return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string plain_number(double value) {
  std::array<char, 64> buffer{};
  auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  (void)ec;  // 64 characters always hold a shortest double
  return std::string(buffer.data(), end);
}

std::string yaml_number(double value) {
  std::string text = plain_number(value);
  if (text.find_first_of(".n") != std::string::npos) return text;  // has a dot, or inf/nan
  auto e = text.find('e');
  if (e == std::string::npos) return text + ".0";
  return text.insert(e, ".0");
}

namespace {

bool is_plain_safe(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front()))) {
    // Paths are common values; a leading '/' cannot start a number or a YAML indicator.
    if (s.empty() || s.front() != '/') return false;
  }
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && ch != '_' && ch != '-' && ch != '.' && ch != '/' && ch != ':') return false;
  }
  if (s.back() == ':') return false;  // "abc:" would read as a mapping key
  // Words that YAML 1.1 or 1.2 resolve to bool or null.
  static const std::array<const char*, 9> reserved = {"true", "false", "yes", "no", "on",
                                                      "off", "y", "n", "null"};
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::none_of(reserved.begin(), reserved.end(), [&](const char* w) { return lower == w; });
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
// transpositions ("lrr" -> "lr" and "bacth_size" -> "batch_size" are both distance 1).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string yaml_string(const std::string& value) {
  if (is_plain_safe(value)) return value;
  std::string out = "\"";
  for (char ch : value) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
          out += buffer;
        } else {
          out += ch;  // UTF-8 bytes pass through; YAML text is UTF-8
        }
    }
  }
  return out + "\"";
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  // Allow roughly one typo per three characters, so "lrr" finds "lr" but "foo" finds
  // nothing in a list of unrelated names.
  const std::size_t limit = name.size() <= 3 ? 1 : name.size() <= 6 ? 2 : 3;
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    std::size_t d = edit_distance(lowercase(name), lowercase(candidate));
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace codistill::config_detail
