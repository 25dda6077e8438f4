#pragma once
// Internal: the table of config keys. One Field per key binds its path to the member of
// Config, its type (through the accessor's return type) and its allowed values; loading,
// overriding, printing and comparing configs all go through this one table.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "codistill/config/config.hpp"

namespace codistill::config_detail {

template <class T>
using Getter = T& (*)(Config&);

// The alternative held tells the value type of the key.
using Access = std::variant<Getter<bool>, Getter<int>, Getter<std::int64_t>, Getter<std::uint64_t>,
                            Getter<double>, Getter<std::string>, Getter<std::vector<std::int64_t>>,
                            Getter<std::vector<std::string>>, Getter<std::vector<LayerSpec>>>;

// Allowed values. Numeric bounds apply to numbers and to each element of a list.
struct Check {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;
  std::vector<std::string_view> choices;  // strings: one of these
  bool device = false;                    // strings: cpu | cuda | cuda:K
  bool non_empty = false;                 // strings (each item of a list of strings)
  std::size_t min_len = 0, max_len = std::numeric_limits<std::size_t>::max();  // lists

  Check& length(std::size_t min, std::size_t max = std::numeric_limits<std::size_t>::max()) {
    min_len = min;
    max_len = max;
    return *this;
  }
};

struct Field {
  std::string_view path;  // "optimizer.schedule.kind"
  Access access;
  Check check;
};

// All keys of a config file, grouped by section in the order to_yaml prints them.
const std::vector<Field>& config_fields();

// The model keys plus model.input_shape and model.classes: the schema of model_yaml.
const std::vector<Field>& model_fields();

// Validates `node` and stores it in the field; returns "" on success, else the reason
// ("expected a number > 0, got 'abc'"). A layer list (model.layers) throws LayerListError
// instead, which says where inside the list and on which line.
std::string assign(const Field& field, Config& config, const YAML::Node& node);

// What the field accepts, as used in messages: "a number > 0", "one of sgd, adamw".
std::string expectation(const Field& field);

// The field's current value as YAML flow text ("0.05", "[256, 256]", "\"a b\"").
std::string value_text(const Field& field, Config& config);

bool same_value(const Field& field, Config& a, Config& b);

}  // namespace codistill::config_detail
