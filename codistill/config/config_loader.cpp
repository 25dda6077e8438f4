// Loading and overriding configs through the schema table (printing and comparing them:
// config_print.cpp).
#include "codistill/config/config_loader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "codistill/config/config_schema.hpp"
#include "codistill/config/config_text.hpp"
#include "codistill/config/layer_schema.hpp"

namespace codistill {
namespace {

using config_detail::Field;

const char* const kOverrideSource = "--set";

std::string child_path(const std::string& section, const std::string& name) {
  return section.empty() ? name : section + "." + name;
}

std::string trim(const std::string& s) {
  auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// Binds YAML nodes to one Config through a field table, remembering where each key was
// set (file line or --set) so that checks made later can still point at it.
class Binder {
 public:
  Binder(const std::vector<Field>& fields, Config& config, std::string file)
      : fields_(fields), config_(config), file_(std::move(file)) {}

  // A section's node: a mapping of keys, or null for "all defaults".
  void walk(const YAML::Node& node, const std::string& section, int line) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      const char* what = section.empty() ? "expected a mapping of sections at the top level, got "
                                         : "expected a section (a mapping of keys), got ";
      fail(section, line, what + show(node));
    }
    std::map<std::string, int> seen;  // yaml-cpp keeps duplicate keys; a later one would win silently
    for (auto it = node.begin(); it != node.end(); ++it) {
      const int key_line = it->first.Mark().line + 1;
      if (!it->first.IsScalar()) fail(section, key_line, "keys must be plain names, got " + show(it->first));
      const std::string name = it->first.Scalar();
      const std::string path = child_path(section, name);
      if (auto [first, fresh] = seen.emplace(name, key_line); !fresh)
        fail(path, key_line, "duplicate key (first given on line " + std::to_string(first->second) + ")");
      // The key's line, not the value's: a null value's mark points at the next token.
      if (const Field* field = find(path)) {
        set(*field, it->second, file_, key_line);
      } else if (is_section(path)) {
        walk(it->second, path, key_line);
      } else {
        fail(path, key_line, unknown_key(section, name));
      }
    }
  }

  // One "key.path=value" from the command line.
  void apply_override(const std::string& spec) {
    const auto eq = spec.find('=');
    const std::string path = trim(spec.substr(0, eq));
    if (eq == std::string::npos || path.empty())
      throw ConfigError("", kOverrideSource, 0, "expected key.path=value, got '" + spec + "'");
    const Field* field = find(path);
    if (!field) reject_override_path(path);
    const std::string text = spec.substr(eq + 1);
    YAML::Node node;
    try {
      node = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(path, kOverrideSource, 0, "cannot parse value '" + text + "': " + e.msg);
    }
    set(*field, node, kOverrideSource, 0);
  }

  // Checks that involve several keys; they run once all overrides are in.
  void cross_check() {
    const Config& c = config_;
    // Neither default can break these two, so the blamed key is always one the user set.
    if (c.run.worker >= c.run.workers)
      fail_at({"run.worker"}, "expected an integer in [0, run.workers) = [0, " + std::to_string(c.run.workers) +
                                  "), got '" + std::to_string(c.run.worker) + "'");
    // min_lr is the floor of these schedules (constant and step ignore it).
    const std::string& schedule = c.optimizer.schedule.kind;
    if ((schedule == "cosine" || schedule == "exponential" || schedule == "cyclical" || schedule == "sgdr") &&
        c.optimizer.schedule.min_lr > c.optimizer.lr)
      fail_at({"optimizer.schedule.min_lr"}, "expected a number <= optimizer.lr (" +
                                                 config_detail::plain_number(c.optimizer.lr) + ") for the " +
                                                 schedule + " schedule, got '" +
                                                 config_detail::plain_number(c.optimizer.schedule.min_lr) + "'");
    if (c.data.batch_size % c.train.micro_batches != 0)
      fail_at({"train.micro_batches", "data.batch_size"},
              "expected a divisor of data.batch_size = " + std::to_string(c.data.batch_size) +
                  " (micro-batches are equal parts of a step's batch), got '" + std::to_string(c.train.micro_batches) + "'");
    if (!(c.codistill.hard_weight > 0) &&
        !((c.codistill.enabled || !c.codistill.fixed_teachers.empty()) && c.codistill.weight > 0))
      fail_at({"codistill.hard_weight"},
              "is 0 and no distillation term is enabled (codistill.enabled or codistill.fixed_teachers, with weight > 0): the loss would be 0");
    // The nccl group all-reduces GPU memory (docs/architecture.md section 5): a CPU model has
    // none. Refused here, before the group is made (and MPI started) for nothing.
    if (c.group.kind == "nccl" && c.device == "cpu")
      fail_at({"group.kind", "device"},
              "expected device cuda or cuda:K with group.kind nccl (it all-reduces GPU memory), got device 'cpu': "
              "on the CPU use group.kind mpi or auto");
    // Sync mode waits at step s for each peer's checkpoint of step s - reload_every; one
    // that is never written would stall every worker until sync_timeout_s.
    if (c.codistill.enabled && c.codistill.mode == "sync" &&
        (c.checkpoint.every == 0 || c.codistill.reload_every % c.checkpoint.every != 0))
      fail_at({"codistill.reload_every", "checkpoint.every", "codistill.mode"},
              "mode sync needs checkpoint.every > 0 dividing codistill.reload_every, got checkpoint.every " +
                  std::to_string(c.checkpoint.every) + " and reload_every " +
                  std::to_string(c.codistill.reload_every));
    // Text data: the image-only keys that would change what is trained are refused rather
    // than ignored (docs/config.md, "data.kind text"); file names and data.normalize have
    // no meaning for tokens and are ignored.
    if (is_token_data(c.data)) {
      if (c.data.augment.crop_padding != 0 || c.data.augment.flip)
        fail_at({"data.augment.crop_padding", "data.augment.flip"},
                "image augmentation has no meaning for data.kind text (set crop_padding 0 and flip false)");
      if (c.data.train_limit != 0)
        fail_at({"data.train_limit"}, "is not used by data.kind text (windows are drawn from the whole shard); set 0");
      // A gpt takes windows of exactly model.seq_len tokens (worker_models entries are
      // checked at start, data/feed/text_source.cpp).
      if (c.model.kind == "gpt" && c.data.context != c.model.seq_len)
        fail_at({"data.context", "model.seq_len"}, "expected model.seq_len = " + std::to_string(c.model.seq_len) +
                                                       " (a gpt model takes windows of exactly seq_len tokens), got '" +
                                                       std::to_string(c.data.context) + "'");
    }
    // A layer list with another kind would be ignored without a word (and the model trained
    // would not be the one written down).
    if (c.model.kind == "layers" && c.model.layers.empty())
      fail_at({"model.layers", "model.kind"}, "model.kind layers needs a non-empty list of layers in model.layers");
    if (c.model.kind != "layers" && !c.model.layers.empty())
      fail_at({"model.kind", "model.layers"}, "is '" + c.model.kind +
                                                  "' but model.layers is set; it is read by model.kind layers only");
  }

 private:
  const Field* find(const std::string& path) const {
    for (const auto& f : fields_)
      if (f.path == path) return &f;
    return nullptr;
  }

  bool is_section(const std::string& path) const {
    for (const auto& f : fields_)
      if (f.path.size() > path.size() && f.path.substr(0, path.size()) == path && f.path[path.size()] == '.')
        return true;
    return false;
  }

  // The names directly under a section ("" is the top level), in schema order.
  std::vector<std::string> children(const std::string& section) const {
    std::vector<std::string> names;
    const std::string prefix = section.empty() ? "" : section + ".";
    for (const auto& f : fields_) {
      if (f.path.substr(0, prefix.size()) != prefix) continue;
      std::string rest(f.path.substr(prefix.size()));
      std::string name = rest.substr(0, rest.find('.'));
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  }

  std::string unknown_key(const std::string& section, const std::string& name) const {
    const auto valid = children(section);
    const std::string hint = config_detail::closest_name(name, valid);
    return std::string("unknown key") + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; valid keys of " +
           (section.empty() ? std::string("the top level") : section) + ": " + config_detail::join(valid);
  }

  // Explains why an override path names no key: the first component that is unknown,
  // or a key used as a section, or a section used as a key.
  [[noreturn]] void reject_override_path(const std::string& path) const {
    std::string section;
    std::istringstream components(path);
    for (std::string name; std::getline(components, name, '.');) {
      const std::string next = child_path(section, name);
      if (find(next))
        throw ConfigError(path, kOverrideSource, 0, next + " is a key, not a section");
      if (!is_section(next)) throw ConfigError(path, kOverrideSource, 0, unknown_key(section, name));
      section = next;
    }
    throw ConfigError(path, kOverrideSource, 0,
                      "is a section, not a key; set one of its keys: " + config_detail::join(children(section)));
  }

  void set(const Field& field, const YAML::Node& node, const std::string& file, int line) {
    const std::string path(field.path);
    std::string problem;
    try {
      problem = config_detail::assign(field, config_, node);
    } catch (const LayerListError& e) {
      // Inside a layer list: the entry's own path and line ("model.layers[3].conv2d.kernel").
      // An override's lines count within its value, not in any file: left out.
      throw ConfigError(path + e.where(), file, line > 0 && e.line() > 0 ? e.line() : line, e.detail());
    }
    if (!problem.empty()) throw ConfigError(path, file, line, problem);
    origins_[path] = {file, line};
  }

  static std::string show(const YAML::Node& node) {
    if (node.IsScalar()) return "'" + node.Scalar() + "'";
    return node.IsSequence() ? "a list" : node.IsMap() ? "a mapping" : "nothing";
  }

  [[noreturn]] void fail(const std::string& path, int line, const std::string& detail) const {
    throw ConfigError(path, file_, line, detail);
  }

  // Blames the first of `paths` that the user set (its file line or --set); a check that
  // fails on defaults alone names the first path without a line.
  [[noreturn]] void fail_at(std::initializer_list<const char*> paths, const std::string& detail) const {
    for (const char* path : paths)
      if (auto it = origins_.find(path); it != origins_.end())
        throw ConfigError(path, it->second.first, it->second.second, detail);
    fail(*paths.begin(), 0, detail);
  }

  const std::vector<Field>& fields_;
  Config& config_;
  std::string file_;
  std::map<std::string, std::pair<std::string, int>> origins_;
};

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("", source, e.mark.line >= 0 ? e.mark.line + 1 : 0, "YAML syntax error: " + e.msg);
  }
  // A second document would otherwise be ignored without a word.
  if (documents.size() > 1)
    throw ConfigError("", source, std::max(0, documents[1].Mark().line + 1),
                      "expected one YAML document, found " + std::to_string(documents.size()));
  return documents.empty() ? YAML::Node() : documents.front();
}

}  // namespace

namespace {

// worker_models: {ID: model section, ...}. Each section is bound like `model` (same keys,
// checks and messages), with its errors' key paths named worker_models.ID.KEY.
std::map<int, ModelConfig> parse_worker_models(const YAML::Node& node, const std::string& source, int workers) {
  std::map<int, ModelConfig> out;
  const int line = node.Mark().line + 1;
  if (!node.IsMap())
    throw ConfigError("worker_models", source, line,
                      "expected a mapping of worker ids to model sections, e.g. {1: {kind: resnet}}");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const int key_line = it->first.Mark().line + 1;
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    const auto id = config_detail::parse_integer<int>(key);
    if (!id || *id < 0 || *id >= workers)
      throw ConfigError("worker_models", source, key_line,
                        "expected a worker id in [0, run.workers) = [0, " + std::to_string(workers) + "), got '" +
                            key + "'");
    if (out.count(*id)) throw ConfigError("worker_models." + key, source, key_line, "duplicate worker id");
    Config tmp;
    try {
      Binder binder(config_detail::config_fields(), tmp, source);
      binder.walk(it->second, "model", key_line);
      binder.cross_check();
    } catch (const ConfigError& e) {
      std::string path = e.key_path();
      if (path.rfind("model", 0) == 0) path = "worker_models." + key + path.substr(5);
      throw ConfigError(path, e.file(), e.line(), e.detail());
    }
    out.emplace(*id, tmp.model);
  }
  return out;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  YAML::Node root = parse_yaml(yaml_text, source_name);
  // worker_models maps worker ids to whole model sections: bound below, entry by entry,
  // once run.workers (which bounds the ids) is known.
  YAML::Node worker_models;  // a handle: it stays valid (marks and all) after the removal
  bool has_worker_models = false;
  if (root.IsMap())
    for (auto it = root.begin(); it != root.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == "worker_models") {
        worker_models = it->second;
        has_worker_models = true;
      }
  if (has_worker_models) root.remove("worker_models");
  Config config;
  Binder binder(config_detail::config_fields(), config, source_name);
  binder.walk(root, "", root.Mark().line + 1);
  for (const auto& spec : overrides) binder.apply_override(spec);
  binder.cross_check();
  if (has_worker_models) config.worker_models = parse_worker_models(worker_models, source_name, config.run.workers);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("", path, 0, "cannot read config file: it is a directory");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw ConfigError("", path, 0,
                      std::string("cannot open config file: ") + (err ? std::strerror(err) : "unknown error"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("", path, 0, "cannot read config file");
  return parse_config(text.str(), path, overrides);
}

Config apply_overrides(Config config, const std::vector<std::string>& overrides) {
  Binder binder(config_detail::config_fields(), config, "");
  for (const auto& spec : overrides) binder.apply_override(spec);
  binder.cross_check();
  return config;
}

ModelConfig model_from_yaml(const std::string& yaml_text, const std::string& source_name) {
  const YAML::Node root = parse_yaml(yaml_text, source_name);
  Config config;
  Binder binder(config_detail::model_fields(), config, source_name);
  binder.walk(root, "model", root.Mark().line + 1);
  return config.model;
}

}  // namespace codistill
