// Printing and comparing configs through the schema table (loading them: config_loader.cpp).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "codistill/config/config_schema.hpp"
#include "codistill/config/config_text.hpp"

namespace codistill {
namespace {

using config_detail::Field;

// Prints fields in table order, opening a nested block whenever the section changes;
// `strip` removes a leading section so model_yaml prints the model keys at the top level.
// A value printed as a block (text starting with a newline: a layer list) is indented
// under its key. Keys in `skip` are left out.
std::string emit(const std::vector<Field>& fields, Config config, const std::string& strip,
                 const std::vector<std::string>& skip = {}) {
  std::string out;
  std::vector<std::string> open;
  for (const auto& field : fields) {
    std::string path(field.path);
    if (path.rfind(strip, 0) != 0) continue;
    if (std::find(skip.begin(), skip.end(), path) != skip.end()) continue;
    path = path.substr(strip.size());
    std::vector<std::string> parts;
    std::istringstream components(path);
    for (std::string name; std::getline(components, name, '.');) parts.push_back(name);
    const std::size_t depth = parts.size() - 1;
    std::size_t common = 0;
    while (common < open.size() && common < depth && open[common] == parts[common]) ++common;
    open.resize(common);
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on the chained
    // string sums here.
    for (; open.size() < depth; open.push_back(parts[open.size()]))
      out.append(2 * open.size(), ' ').append(parts[open.size()]).append(":\n");
    const std::string value = config_detail::value_text(field, config);
    if (value.empty() || value.front() != '\n') {
      out.append(2 * depth, ' ').append(parts.back()).append(": ").append(value).append("\n");
      continue;
    }
    out.append(2 * depth, ' ').append(parts.back()).append(":");
    for (char ch : value) {
      out += ch;
      if (ch == '\n') out.append(2 * depth + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string to_yaml(const Config& config) {
  std::string out = emit(config_detail::config_fields(), config, "");
  if (config.worker_models.empty()) return out;
  out += "worker_models:\n";
  for (const auto& [id, model] : config.worker_models) {
    Config c;
    c.model = model;
    out += "  " + std::to_string(id) + ":\n";
    std::istringstream lines(emit(config_detail::config_fields(), c, "model."));
    for (std::string line; std::getline(lines, line);) out += "    " + line + "\n";
  }
  return out;
}

std::string model_yaml(const ModelConfig& model) {
  Config config;
  config.model = model;
  // model.layers only where set: the attribute of the other kinds stays what builds and
  // exporters that predate the key read.
  std::vector<std::string> skip;
  if (model.layers.empty()) skip.emplace_back("model.layers");
  // model.gelu only where not the default: the attribute of every earlier model stays as it was.
  if (model.gelu == "erf") skip.emplace_back("model.gelu");
  // The gpt keys only for a gpt, likewise.
  if (model.kind != "gpt")
    for (const char* k : {"model.vocab_size", "model.seq_len", "model.d_model", "model.heads", "model.mlp_ratio",
                          "model.tie_embeddings"})
      skip.emplace_back(k);
  return emit(config_detail::model_fields(), config, "model.", skip);
}

std::vector<std::string> config_differences(const Config& a, const Config& b) {
  Config left = a, right = b;  // the table's accessors take mutable configs
  std::vector<std::string> paths;
  for (const auto& field : config_detail::config_fields())
    if (!config_detail::same_value(field, left, right)) paths.emplace_back(field.path);
  if (a.worker_models.size() != b.worker_models.size() ||
      !std::equal(a.worker_models.begin(), a.worker_models.end(), b.worker_models.begin(),
                  [](const auto& x, const auto& y) {
                    return x.first == y.first && model_yaml(x.second) == model_yaml(y.second) &&
                           x.second.init_from == y.second.init_from &&  // not in model_yaml
                           x.second.memory_format == y.second.memory_format &&
                           x.second.attention == y.second.attention;
                  }))
    paths.emplace_back("worker_models");
  return paths;
}

std::vector<std::string> model_differences(const ModelConfig& a, const ModelConfig& b) {
  Config left, right;
  left.model = a;
  right.model = b;
  std::vector<std::string> out;
  for (const auto& field : config_detail::model_fields())
    if (!config_detail::same_value(field, left, right))
      out.push_back(std::string(field.path) + " " + config_detail::value_text(field, left) + " vs " +
                    config_detail::value_text(field, right));
  return out;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> paths;
  for (const auto& field : config_detail::config_fields()) paths.emplace_back(field.path);
  return paths;
}

}  // namespace codistill
