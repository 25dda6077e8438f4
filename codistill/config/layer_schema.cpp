// The layer-list schema: one table row per layer type, its arguments in the order they are
// printed. To add a layer type: a row here, a builder line in
// codistill/models/layers_model.cpp, a row in docs/config.md and a twin in the exporter
// (scripts/codistill_export/layers.py).
#include "codistill/config/layer_schema.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "codistill/config/config_text.hpp"

namespace codistill {
namespace {

using config_detail::join;

enum class ArgKind { integer, number, flag, list };

struct ArgSpec {
  const char* name = "";
  ArgKind kind = ArgKind::integer;
  bool required = false;
  LayerValue fallback = std::int64_t{0};  // the default when not required
  std::optional<double> lo, hi;           // numbers: the allowed range
  bool lo_open = false, hi_open = false;
  const char* default_from = nullptr;  // the default is this other argument's value

  ArgSpec& needed() {
    required = true;
    return *this;
  }
  ArgSpec& or_else(LayerValue v) {
    fallback = v;
    return *this;
  }
  ArgSpec& at_least(double v, bool open = false) {
    lo = v;
    lo_open = open;
    return *this;
  }
  ArgSpec& at_most(double v, bool open = false) {
    hi = v;
    hi_open = open;
    return *this;
  }
  ArgSpec& or_same_as(const char* other) {
    default_from = other;
    return *this;
  }
};

ArgSpec arg(const char* name, ArgKind kind) {
  ArgSpec a;
  a.name = name;
  a.kind = kind;
  return a;
}
ArgSpec size_arg(const char* name) { return arg(name, ArgKind::integer).needed().at_least(1); }
ArgSpec bias_arg() { return arg("bias", ArgKind::flag).or_else(true); }
ArgSpec eps_arg() { return arg("eps", ArgKind::number).or_else(1e-5).at_least(0, /*open=*/true); }

struct LayerType {
  const char* name;
  std::vector<ArgSpec> args;
};

// Sorted by name (the order of the error messages' lists).
const std::vector<LayerType>& types() {
  static const std::vector<LayerType> kTypes = {
      {"batchnorm", {eps_arg(), arg("momentum", ArgKind::number).or_else(0.1).at_least(0, true).at_most(1)}},
      {"conv2d",
       {size_arg("out_channels"), size_arg("kernel"), arg("stride", ArgKind::integer).or_else(std::int64_t{1}).at_least(1),
        arg("padding", ArgKind::integer).or_else(std::int64_t{0}).at_least(0), bias_arg()}},
      {"dropout", {arg("p", ArgKind::number).needed().at_least(0).at_most(1, /*open=*/true)}},
      {"flatten", {}},
      {"gelu", {}},
      {"global_avg_pool", {}},
      {"layernorm", {eps_arg()}},
      {"linear", {size_arg("out"), bias_arg()}},
      {"maxpool", {size_arg("window"), arg("stride", ArgKind::integer).or_same_as("window").at_least(1)}},
      {"relu", {}},
      {"residual", {arg("layers", ArgKind::list).needed(), arg("shortcut", ArgKind::list)}},
  };
  return kTypes;
}

std::vector<std::string> arg_names(const LayerType& t) {
  std::vector<std::string> out;
  for (const auto& a : t.args) out.emplace_back(a.name);
  return out;
}

int line_of(const YAML::Node& node) { return node.Mark().line >= 0 ? node.Mark().line + 1 : 0; }

std::string shown(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  return node.IsSequence() ? "a list" : "a mapping";
}

std::string range_text(const ArgSpec& a) {
  // Every bounded argument of the table has a lower bound.
  using config_detail::plain_number;
  if (!a.lo) return "";
  if (!a.hi) return (a.lo_open ? " > " : " >= ") + plain_number(*a.lo);
  return std::string(" in ") + (a.lo_open ? "(" : "[") + plain_number(*a.lo) + ", " + plain_number(*a.hi) +
         (a.hi_open ? ")" : "]");
}

bool in_range(const ArgSpec& a, double v) {
  if (a.lo && (a.lo_open ? v <= *a.lo : v < *a.lo)) return false;
  if (a.hi && (a.hi_open ? v >= *a.hi : v > *a.hi)) return false;
  return true;
}

std::string expectation(const ArgSpec& a) {
  switch (a.kind) {
    case ArgKind::integer: return "an integer" + range_text(a);
    case ArgKind::number: return "a number" + range_text(a);
    case ArgKind::flag: return "true or false";
    case ArgKind::list: return "a non-empty list of layers";
  }
  return "";
}

// A scalar argument's value, or nullopt when the node is not one of the kind in range.
std::optional<LayerValue> read_value(const ArgSpec& a, const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& s = node.Scalar();
  if (a.kind == ArgKind::flag) {
    // YAML 1.2 booleans only, as everywhere in the config.
    if (s == "true" || s == "True" || s == "TRUE") return LayerValue{true};
    if (s == "false" || s == "False" || s == "FALSE") return LayerValue{false};
    return std::nullopt;
  }
  if (a.kind == ArgKind::integer) {
    auto v = config_detail::parse_integer<std::int64_t>(s);
    if (!v || !in_range(a, static_cast<double>(*v))) return std::nullopt;
    return LayerValue{*v};
  }
  auto v = config_detail::parse_number(s);
  if (!v || !in_range(a, *v)) return std::nullopt;
  return LayerValue{*v};
}

const LayerType* find_type(const std::string& name) {
  for (const auto& t : types())
    if (name == t.name) return &t;
  return nullptr;
}

std::vector<LayerSpec> parse_list(const YAML::Node& node, const std::string& where, int line);

// An entry's type (found in the table) and its argument mapping, before the arguments are read.
struct EntryHead {
  const LayerType* type = nullptr;
  YAML::Node args;
  int line = 0, args_line = 0;
};

EntryHead read_head(const YAML::Node& entry, const std::string& where) {
  const int line = line_of(entry);
  std::string type_name;
  YAML::Node args;
  int args_line = line;
  if (entry.IsScalar()) {
    type_name = entry.Scalar();  // a bare "- relu"
  } else if (entry.IsMap() && entry.size() == 1) {
    type_name = entry.begin()->first.IsScalar() ? entry.begin()->first.Scalar() : "";
    args = entry.begin()->second;
    args_line = line_of(entry.begin()->first);
  } else if (entry.IsMap()) {
    std::vector<std::string> keys;
    for (const auto& kv : entry) keys.push_back(kv.first.IsScalar() ? kv.first.Scalar() : "?");
    throw LayerListError(where, line,
                         "expected one layer type per entry, got " + std::to_string(keys.size()) + " keys (" +
                             join(keys) + "); arguments go in the type's mapping, e.g. '- conv2d: {out_channels: "
                             "32, kernel: 3}', and each layer is its own '-' entry");
  } else {
    throw LayerListError(where, line, "expected a layer ('- type: {key: value, ...}'), got " + shown(entry));
  }
  const LayerType* type = find_type(type_name);
  if (!type) {
    const std::string hint = config_detail::closest_name(type_name, layer_types());
    throw LayerListError(where, line,
                         "unknown layer type '" + type_name + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                             "; valid types: " + join(layer_types()));
  }
  return {type, args, line, args_line};
}

LayerSpec parse_entry(const YAML::Node& entry, const std::string& where) {
  const auto [type, args, line, args_line] = read_head(entry, where);
  const std::string at = where + "." + type->name;
  if (args && !args.IsNull() && !args.IsMap())
    throw LayerListError(at, args_line, "expected a mapping of arguments ({} for none), got " + shown(args));

  // Unknown and duplicate keys first, each at its own line.
  std::map<std::string, YAML::Node> given;
  std::map<std::string, int> given_line;
  if (args && args.IsMap()) {
    for (auto it = args.begin(); it != args.end(); ++it) {
      const int key_line = line_of(it->first);
      if (!it->first.IsScalar()) throw LayerListError(at, key_line, "keys must be plain names, got " + shown(it->first));
      const std::string key = it->first.Scalar();
      const auto names = arg_names(*type);
      if (std::find(names.begin(), names.end(), key) == names.end()) {
        const std::string hint = config_detail::closest_name(key, names);
        throw LayerListError(at + "." + key, key_line,
                             "unknown key" + (hint.empty() ? std::string() : " (did you mean '" + hint + "'?)") +
                                 "; valid keys of " + type->name + ": " + (names.empty() ? "none" : join(names)));
      }
      if (given.count(key))
        throw LayerListError(at + "." + key, key_line,
                             "duplicate key (first given on line " + std::to_string(given_line[key]) + ")");
      given[key] = it->second;
      given_line[key] = key_line;
    }
  }
  std::vector<std::string> missing;
  for (const auto& a : type->args)
    if (a.required && !given.count(a.name)) missing.emplace_back(a.name);
  if (!missing.empty())
    throw LayerListError(at, args_line, std::string("missing required key") + (missing.size() > 1 ? "s " : " ") +
                                            join(missing) + " (" + type->name + " takes " + join(arg_names(*type)) + ")");

  LayerSpec spec;
  spec.type = type->name;
  for (const auto& a : type->args) {
    auto it = given.find(a.name);
    const std::string key_at = at + "." + a.name;
    if (a.kind == ArgKind::list) {
      if (it == given.end()) continue;
      if (!it->second.IsSequence() || it->second.size() == 0)
        throw LayerListError(key_at, given_line[a.name],
                             "expected " + expectation(a) + ", got " + shown(it->second) +
                                 (a.required ? "" : " (leave the key out for the default)"));
      auto list = parse_list(it->second, key_at, given_line[a.name]);
      (a.name == std::string("layers") ? spec.layers : spec.shortcut) = std::move(list);
      continue;
    }
    if (it == given.end()) {
      // default_from names an argument earlier in the table, already in spec.args.
      spec.args.emplace_back(a.name, a.default_from ? LayerValue{spec.integer(a.default_from)} : a.fallback);
      continue;
    }
    auto value = read_value(a, it->second);
    if (!value)
      throw LayerListError(key_at, given_line[a.name], "expected " + expectation(a) + ", got " + shown(it->second));
    spec.args.emplace_back(a.name, *value);
  }
  return spec;
}

std::vector<LayerSpec> parse_list(const YAML::Node& node, const std::string& where, int line) {
  if (!node.IsSequence())
    throw LayerListError(where, line, "expected a list of layers ('- type: {key: value, ...}'), got " + shown(node));
  std::vector<LayerSpec> out;
  std::size_t index = 0;
  for (const auto& entry : node) out.push_back(parse_entry(entry, where + "[" + std::to_string(index++) + "]"));
  return out;
}

std::string value_text(const LayerValue& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return config_detail::yaml_number(*d);
  return std::get<bool>(v) ? "true" : "false";
}

std::string flow_list(const std::vector<LayerSpec>& layers) {
  std::vector<std::string> items;
  // Appended piece by piece: GCC 12 gives a false -Wrestrict on "x" + std::string(...).
  for (const auto& l : layers) {
    std::string item = "{";
    item += layer_text(l);
    item += '}';
    items.push_back(std::move(item));
  }
  std::string out = "[";
  out += join(items);
  out += ']';
  return out;
}

}  // namespace

std::vector<LayerSpec> parse_layer_list(const YAML::Node& node) {
  return parse_list(node, "", node ? line_of(node) : 0);
}

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const auto& t : types()) out.emplace_back(t.name);
  return out;
}

std::string layer_text(const LayerSpec& spec) {
  std::vector<std::string> items;
  for (const auto& [name, value] : spec.args) items.push_back(name + ": " + value_text(value));
  if (!spec.layers.empty()) items.push_back("layers: " + flow_list(spec.layers));
  if (!spec.shortcut.empty()) items.push_back("shortcut: " + flow_list(spec.shortcut));
  return spec.type + ": {" + join(items) + "}";
}

std::string layer_list_text(const std::vector<LayerSpec>& layers) {
  if (layers.empty()) return "[]";
  std::string out;
  for (const auto& l : layers) out += "\n- " + layer_text(l);
  return out;
}

}  // namespace codistill
