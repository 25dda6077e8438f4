#pragma once
// The schema of `model.layers` (model kind `layers`, docs/config.md): which layer types
// exist, which arguments each takes, their types, ranges and defaults. The config loader
// reads a layer list through it (strictly: an unknown type, an unknown or duplicate key, a
// missing required key or a value out of range is an error naming the entry) and prints
// one back through it, so that a checkpoint's `model` attribute rebuilds the same model.
// Shapes are not checked here (they depend on the data): the builder
// (codistill/models/layers_model.hpp) does that.
#include <stdexcept>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "codistill/models/layer_spec.hpp"

namespace codistill {

// A problem in a layer list. `where` continues the list's key path ("[3].conv2d.kernal",
// "[4].residual.layers[1]", empty for the list itself); `line` is the 1-based line of the
// offending node in the text the list came from (0 when unknown).
class LayerListError : public std::runtime_error {
 public:
  LayerListError(std::string where, int line, std::string detail)
      : std::runtime_error(where + ": " + detail), where_(std::move(where)), line_(line), detail_(std::move(detail)) {}
  const std::string& where() const noexcept { return where_; }
  int line() const noexcept { return line_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string where_;
  int line_;
  std::string detail_;
};

// Reads a YAML sequence of entries, each `type: {key: value, ...}` (`type: {}`, `type:` or a
// bare `type` for no arguments). Throws LayerListError.
std::vector<LayerSpec> parse_layer_list(const YAML::Node& node);

// The valid layer types, sorted.
std::vector<std::string> layer_types();

// One entry as a YAML flow mapping: "conv2d: {out_channels: 32, kernel: 3, stride: 1,
// padding: 1, bias: true}", a residual block with its lists in flow style.
std::string layer_text(const LayerSpec& spec);

// A whole list: "[]" when empty, otherwise one "\n- <layer_text>" per entry, for the loader
// to indent under its key (a block sequence reads better than one long line).
std::string layer_list_text(const std::vector<LayerSpec>& layers);

}  // namespace codistill
