#pragma once
// One entry of `model.layers` (model kind `layers`): a layer type and its arguments, as the
// strict layer schema (layer_schema.hpp) read them. Every argument the type declares is
// present, defaults filled in, so that printing a spec gives the whole architecture and two
// equal specs build the same model. A plain value type: the schema, not this struct,
// knows which arguments a type has.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace codistill {

// Integer, real or boolean; the schema decides which one an argument is.
using LayerValue = std::variant<std::int64_t, double, bool>;

struct LayerSpec {
  std::string type;  // "conv2d", "relu", "residual", ...
  std::vector<std::pair<std::string, LayerValue>> args;  // in the schema's order
  std::vector<LayerSpec> layers;    // residual: the body
  std::vector<LayerSpec> shortcut;  // residual: an explicit shortcut (empty: automatic)

  bool operator==(const LayerSpec&) const = default;

  // The argument's value; std::logic_error when the schema gave the type no such argument
  // of that kind (a bug, not a user error: parsing already checked the config).
  std::int64_t integer(const std::string& name) const { return get<std::int64_t>(name); }
  double number(const std::string& name) const { return get<double>(name); }
  bool flag(const std::string& name) const { return get<bool>(name); }

 private:
  template <class T>
  T get(const std::string& name) const {
    for (const auto& [key, value] : args)
      if (key == name && std::holds_alternative<T>(value)) return std::get<T>(value);
    throw std::logic_error("layer '" + type + "' has no argument '" + name + "' of that type");
  }
};

}  // namespace codistill
