#pragma once
// Strict configuration loading (DESIGN.md section 8, keys in docs/config.md).
//
// A config is read from YAML, `--set key.path=value` overrides are applied on top, and
// the result is validated key by key against the schema in config_keys.cpp: an
// unknown key, a wrong type or an out-of-range value throws ConfigError naming the key
// path and the file line (the trainer maps it to exit code 2). Keys that are absent
// keep the defaults of config.hpp.
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/util/config_error.hpp"

namespace codistill {

// Reads and validates the YAML file at `path`, then applies `overrides`, each
// "key.path=value" with value a YAML scalar or flow sequence ("model.hidden=[512,512]"),
// in order. Cross-key checks (run.worker < run.workers, ...) run after the overrides.
// Throws ConfigError for a missing or unreadable file, a YAML syntax error, or any
// invalid key or value.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from YAML text; `source_name` stands for the file in error messages. Used for
// the `config` attribute of a checkpoint and by tests.
Config parse_config(const std::string& yaml_text, const std::string& source_name = "<string>",
                    const std::vector<std::string>& overrides = {});

// Applies overrides to an already validated config and re-runs the cross-key checks.
// Errors name "--set" as their source.
Config apply_overrides(Config config, const std::vector<std::string>& overrides);

// The resolved config as YAML: every key, defaults included, in schema order. parse_config
// of the result gives back an equal config (config_differences is empty). The model's
// input_shape and classes are not config keys (they come from the data) and are left out.
std::string to_yaml(const Config& config);

// The model section alone, as a top-level mapping, with input_shape and classes included:
// a checkpoint embeds it so that the model can be rebuilt without the data.
std::string model_yaml(const ModelConfig& model);

// Reads model_yaml's output back, validated like the model section of a config.
ModelConfig model_from_yaml(const std::string& yaml_text, const std::string& source_name = "<model>");

// Key paths whose values differ between a and b, in schema order (config keys only, so
// model.input_shape and model.classes are not compared). Empty when the configs are equal.
std::vector<std::string> config_differences(const Config& a, const Config& b);

// The architecture keys (model_yaml's, input_shape and classes included) whose values
// differ, as "model.hidden [256, 256] vs [128]" (a's value first), in schema order.
std::vector<std::string> model_differences(const ModelConfig& a, const ModelConfig& b);

// Every key path of the schema, in order ("run.name", ..., "device", ...).
std::vector<std::string> config_keys();

}  // namespace codistill
