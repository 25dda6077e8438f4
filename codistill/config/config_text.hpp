#pragma once
// Internal helpers of the config loader: strict scalar parsing, YAML-safe formatting and
// the "did you mean" suggestion. Kept apart from the schema so each stays small.
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace codistill::config_detail {

// Decimal integers only (an optional sign, digits): yaml-cpp's own conversion would read
// "010" as octal and silently accept other spellings, and "1.5" or "1e3" for an integer
// key must be an error rather than a truncation.
template <class T>
std::optional<T> parse_integer(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty() || text.front() == '+') return std::nullopt;
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A finite decimal number ("0.05", "1e-3", "3"); inf and nan are rejected because no key
// of the config has a use for them.
std::optional<double> parse_number(std::string_view text);

// The shortest text that reads back to exactly `value`, always with a '.' so that YAML 1.1
// readers (PyYAML) see a float too: 0.05 -> "0.05", 1 -> "1.0", 1e-8 -> "1.0e-08".
std::string yaml_number(double value);

// Shortest text for messages: 1 -> "1", 0.5 -> "0.5".
std::string plain_number(double value);

// A string as a YAML scalar: plain when that reads back as the same string and not as a
// number, bool or null; double-quoted with escapes otherwise.
std::string yaml_string(const std::string& value);

// The candidate closest to `name` by edit distance (case-insensitive, adjacent swaps
// count once), when it is close enough to be a likely typo; empty otherwise.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

// "a, b, c"
std::string join(const std::vector<std::string>& items, const char* separator = ", ");

}  // namespace codistill::config_detail
