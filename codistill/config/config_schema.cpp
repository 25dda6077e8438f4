// The config schema's machinery: reading, checking, printing and comparing the values of the
// keys that config_keys.cpp lists.
#include "codistill/config/config_schema.hpp"

#include <cctype>
#include <type_traits>
#include <utility>

#include "codistill/config/config_text.hpp"
#include "codistill/config/layer_schema.hpp"

namespace codistill::config_detail {
namespace {

// How a rejected value is shown: scalars quoted as written, structures by their kind.
std::string describe(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsMap()) return "a mapping";
  std::vector<std::string> items;
  for (const auto& item : node) {
    if (!item.IsScalar()) return "a nested list";
    items.push_back(item.Scalar());
  }
  return "'[" + join(items) + "]'";
}

std::string range_text(const Check& c) {
  if (c.lo && c.hi)
    return std::string("in ") + (c.lo_open ? "(" : "[") + plain_number(*c.lo) + ", " + plain_number(*c.hi) +
           (c.hi_open ? ")" : "]");
  if (c.lo) return (c.lo_open ? "> " : ">= ") + plain_number(*c.lo);
  if (c.hi) return (c.hi_open ? "< " : "<= ") + plain_number(*c.hi);
  return "";
}

bool in_range(const Check& c, double v) {
  if (c.lo && (c.lo_open ? v <= *c.lo : v < *c.lo)) return false;
  if (c.hi && (c.hi_open ? v >= *c.hi : v > *c.hi)) return false;
  return true;
}

bool valid_device(const std::string& s) {
  if (s == "cpu" || s == "cuda") return true;
  if (s.rfind("cuda:", 0) != 0 || s.size() == 5 || !std::isdigit(static_cast<unsigned char>(s[5]))) return false;
  return parse_integer<int>(std::string_view(s).substr(5)).has_value();
}

template <class T>
std::optional<T> read(const YAML::Node& node) {
  if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
    return parse_layer_list(node);  // throws LayerListError with the entry and its line
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    if (!node.IsSequence()) return std::nullopt;
    T values;
    for (const auto& item : node) {
      if (!item.IsScalar()) return std::nullopt;
      auto v = parse_integer<std::int64_t>(item.Scalar());
      if (!v) return std::nullopt;
      values.push_back(*v);
    }
    return values;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!node.IsSequence()) return std::nullopt;
    T values;
    for (const auto& item : node) {
      if (!item.IsScalar()) return std::nullopt;
      values.push_back(item.Scalar());
    }
    return values;
  } else {
    if (!node.IsScalar()) return std::nullopt;  // null, sequence or mapping
    const std::string& s = node.Scalar();
    if constexpr (std::is_same_v<T, std::string>) {
      return s;
    } else if constexpr (std::is_same_v<T, bool>) {
      // YAML 1.2 booleans only: "yes"/"on"/"1" are more likely mistakes than intent.
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      return std::nullopt;
    } else if constexpr (std::is_same_v<T, double>) {
      return parse_number(s);
    } else {
      return parse_integer<T>(s);
    }
  }
}

template <class T>
bool allowed(const Check& c, const T& value) {
  if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
    return true;  // parse_layer_list checked every entry
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    if (value.size() < c.min_len || value.size() > c.max_len) return false;
    for (auto v : value)
      if (!in_range(c, static_cast<double>(v))) return false;
    return true;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (value.size() < c.min_len || value.size() > c.max_len) return false;
    for (const auto& v : value)
      if (c.non_empty && v.empty()) return false;
    return true;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (c.non_empty && value.empty()) return false;
    if (c.device) return valid_device(value);
    if (c.choices.empty()) return true;
    for (auto choice : c.choices)
      if (value == choice) return true;
    return false;
  } else if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else {
    return in_range(c, static_cast<double>(value));
  }
}

template <class T>
std::string value_of(const T& value) {
  if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
    return layer_list_text(value);
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    std::vector<std::string> items;
    for (auto v : value) items.push_back(std::to_string(v));
    // Appended rather than "[" + join(...): GCC 12 gives a false -Wrestrict on that form.
    std::string out = "[";
    out += join(items);
    out += ']';
    return out;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    std::vector<std::string> items;
    for (const auto& v : value) items.push_back(yaml_string(v));
    std::string out = "[";
    out += join(items);
    out += ']';
    return out;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return yaml_string(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    return yaml_number(value);
  } else {
    return std::to_string(value);
  }
}

}  // namespace
std::string expectation(const Field& field) {
  const Check& c = field.check;
  const std::string range = range_text(c);
  const std::string suffix = range.empty() ? "" : " " + range;
  return std::visit(
      [&](auto get) -> std::string {
        using T = std::remove_reference_t<decltype(get(std::declval<Config&>()))>;
        if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
          return "a list of layers";
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          if (c.min_len == c.max_len) return "a list of " + std::to_string(c.min_len) + " integers" + suffix;
          return std::string(c.min_len > 0 ? "a non-empty list" : "a list") + " of integers" + suffix;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return std::string(c.min_len > 0 ? "a non-empty list" : "a list") +
                 (c.non_empty ? " of non-empty strings" : " of strings");
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (c.device) return "one of cpu, cuda, cuda:K (K a device index >= 0)";
          if (!c.choices.empty()) {
            std::vector<std::string> names(c.choices.begin(), c.choices.end());
            return "one of " + join(names);
          }
          return c.non_empty ? "a non-empty string" : "a string";
        } else if constexpr (std::is_same_v<T, bool>) {
          return "true or false";
        } else if constexpr (std::is_same_v<T, double>) {
          return "a number" + suffix;
        } else {
          return "an integer" + suffix;
        }
      },
      field.access);
}

std::string assign(const Field& field, Config& config, const YAML::Node& node) {
  return std::visit(
      [&](auto get) -> std::string {
        using T = std::remove_reference_t<decltype(get(config))>;
        std::optional<T> value = read<T>(node);
        if (!value || !allowed(field.check, *value))
          return "expected " + expectation(field) + ", got " + describe(node);
        get(config) = std::move(*value);
        return "";
      },
      field.access);
}

std::string value_text(const Field& field, Config& config) {
  return std::visit([&](auto get) { return value_of(get(config)); }, field.access);
}

bool same_value(const Field& field, Config& a, Config& b) {
  return std::visit([&](auto get) { return get(a) == get(b); }, field.access);
}

}  // namespace codistill::config_detail
