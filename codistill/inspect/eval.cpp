// codistill-inspect eval and churn: checkpoints run offline over a data set, alone and
// as an ensemble, and how often two of them disagree.
#include <algorithm>
#include <cfloat>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codistill/config/config_loader.hpp"
#include "codistill/data/idx.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/inspect/format.hpp"
#include "codistill/inspect/inspect.hpp"
#include "kernels/backend.hpp"

namespace codistill::inspect {

using json = Json;

namespace {

struct DataSpec {
  std::string kind;  // test | train | idx
  std::string images, labels;
};

DataSpec parse_spec(const std::string& spec) {
  if (spec == "test" || spec == "train") return {spec, "", ""};
  if (spec.starts_with("idx:")) {
    const std::string files = spec.substr(4);
    const auto comma = files.find(',');
    if (comma != std::string::npos && comma > 0 && comma + 1 < files.size())
      return {"idx", files.substr(0, comma), files.substr(comma + 1)};
    throw UsageError("--data " + spec + ": expected idx:IMAGES,LABELS (two MNIST-format files)");
  }
  throw UsageError("--data: unknown data spec '" + spec + "' (valid: test, train, idx:IMAGES,LABELS)");
}

// One checkpoint taking part: its model rebuilt offline and the normalization its inputs
// need.
struct Member {
  std::string path;
  checkpoint::CheckpointMeta meta;
  Model model;
  data::Normalization norm;
  std::string norm_source;  // checkpoint | config | none
};

// The data of a run and how it was requested.
struct EvalData {
  data::Dataset raw;  // raw values, as the files or the generator give them
  std::int64_t batch = 0;
  json desc;
  std::vector<std::string> warnings;
  std::optional<Config> config;  // the first checkpoint's, when it parses
  std::optional<data::Normalization> config_norm;  // computed on demand (see member_norm)
};

// Usage problems are reported before any file is opened.
DataSpec check_options(const EvalOptions& opt) {
  if (opt.batch < 0 || opt.limit < 0 || opt.threads < 0)
    throw UsageError("--batch, --limit and --threads take a number >= 0 (0: the default)");
  return parse_spec(opt.data);
}

// Language models (data.kind text or tokens) are scored by their runs' eval events for now: the
// held-out windows need the prepared folder and a per-token pass (eval/evaluate_text.hpp).
// Checked before the model attribute is read, so the message says this whatever the model.
void refuse_text(const std::string& path, const checkpoint::CheckpointMeta& meta) {
  std::optional<Config> c;
  try {
    c = parse_config(meta.config, "config attribute of " + path);
  } catch (const ConfigError&) {
    return;  // an unreadable config is load_data's to report
  }
  if (is_token_data(c->data))
    throw InspectError(path + " is a language model trained on text (data.kind " + c->data.kind + "): eval and churn take image "
                       "checkpoints only for now; its run's eval events (metrics.jsonl) hold its held-out loss, "
                       "perplexity, next-token accuracy and churn");
}

EvalData load_data(const std::string& first_path, const checkpoint::CheckpointMeta& first,
                   const EvalOptions& opt) {
  const DataSpec spec = check_options(opt);
  EvalData ed;
  const std::string source = "config attribute of " + first_path;
  try {
    ed.config = parse_config(first.config, source);
  } catch (const ConfigError& e) {
    // Only test and train need the config; idx files can still be evaluated.
    if (spec.kind != "idx") throw InspectError(std::string("--data ") + spec.kind + " needs the data section of " +
                                               "the checkpoint's embedded config, which does not load: " + e.what());
    ed.warnings.push_back(std::string("embedded config does not load (") + e.what() + "): default batch and threads");
  }
  ed.batch = opt.batch > 0 ? opt.batch : ed.config ? ed.config->train.eval_batch_size : 1000;
  kernels::backend_for(kernels::DeviceKind::cpu).set_threads(opt.threads > 0 ? opt.threads : ed.config ? ed.config->run.threads : 1);
  if (spec.kind == "idx") {
    const ModelConfig mc = model_from_yaml(first.model, "model attribute of " + first_path);
    ed.raw = data::read_idx_dataset(spec.images, spec.labels, mc.classes, opt.data);
  } else {
    // Raw values here; each checkpoint's own stored normalization is applied below.
    DataConfig dc = ed.config->data;
    dc.normalize = "none";
    data::Splits splits = data::load_dataset(dc);
    ed.raw = std::move(spec.kind == "test" ? splits.test : splits.train);
  }
  if (opt.limit > 0) data::truncate(ed.raw, opt.limit);
  ed.desc = {{"spec", opt.data}, {"name", ed.raw.name}, {"examples", ed.raw.size()}, {"classes", ed.raw.classes}};
  return ed;
}

// The normalization training applied: the one stored in the checkpoint; for a checkpoint
// without it, the one the config computes (a second load, in this rare case only).
void member_norm(Member& m, EvalData& ed, const checkpoint::CheckpointData& data) {
  m.norm = normalization_from_checkpoint(data);
  m.norm_source = "checkpoint";
  if (m.norm.kind != "none") return;
  if (ed.config) {
    if (!ed.config_norm) ed.config_norm = data::load_dataset(ed.config->data).train.normalization;
    m.norm = *ed.config_norm;
    m.norm_source = "config";
  } else {
    m.norm_source = "none";
  }
  ed.warnings.push_back(m.path + " stores no input normalization: using " +
                        (m.norm_source == "config" ? "the one its config computes" : "raw inputs"));
}

Member load_member(const std::string& path, EvalData& ed) {
  checkpoint::CheckpointData data = read_checkpoint(path, false, true);
  Member m{path, data.meta, model_from_checkpoint(data), {}, {}};
  if (m.model.input_shape() != ed.raw.example_shape())
    throw InspectError(fmt::format("{}: the model takes inputs of shape {}, the data ({}) has {}", path,
                                   kernels::shape_str(m.model.input_shape()), ed.raw.name,
                                   kernels::shape_str(ed.raw.example_shape())));
  const ModelConfig mc = model_from_yaml(data.meta.model, "model attribute of " + path);
  if (mc.classes < ed.raw.classes)
    throw InspectError(fmt::format("{}: the model has {} classes, the data ({}) has labels up to {}", path, mc.classes,
                                   ed.raw.name, ed.raw.classes - 1));
  member_norm(m, ed, data);
  return m;
}

// The inputs as a member sees them. Same expression as data::normalize (multiply by the
// inverse in double, round to float) so that the values are bit-identical to training's.
const data::Dataset& normalized(const Member& m, const data::Dataset& raw,
                                std::map<std::pair<double, double>, data::Dataset>& cache) {
  const auto key = std::make_pair(m.norm.shift, m.norm.scale);
  if (key == std::make_pair(0.0, 1.0)) return raw;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  data::Dataset d = raw;
  d.images = raw.images.clone();
  d.codes.clear();  // they stood for raw's values (evaluation reads the floats)
  d.normalization = m.norm;
  float* x = d.images.data<float>();
  const double shift = m.norm.shift, inv = 1.0 / m.norm.scale;
  for (std::int64_t i = 0, n = d.images.numel(); i < n; ++i) x[i] = static_cast<float>((x[i] - shift) * inv);
  return cache.emplace(key, std::move(d)).first->second;
}

struct Pass {
  double loss = 0, accuracy = 0;
  std::vector<std::int32_t> predictions;
};

// The engine's own evaluate() (the very loss and argmax a run measured); when prob_sum is
// given, each example's softmax probabilities (in double) are added to it, [N, V] row-major.
Pass run_pass(Model& model, const data::Dataset& d, std::int64_t batch, std::vector<double>* prob_sum) {
  Pass p;
  LogitsFn add_probabilities;
  if (prob_sum)
    add_probabilities = [&](const kernels::Tensor& logits, std::int64_t first) {
      const std::int64_t b = logits.dim(0), V = logits.dim(1);
      const float* z = logits.data<float>();
      for (std::int64_t i = 0; i < b; ++i) {
        const float* row = z + i * V;
        double* out = prob_sum->data() + (first + i) * V;
        const double m = *std::max_element(row, row + V);
        double sum = 0;
        for (std::int64_t c = 0; c < V; ++c) sum += std::exp(row[c] - m);
        for (std::int64_t c = 0; c < V; ++c) out[c] += std::exp(row[c] - m) / sum;
      }
    };
  const EvalResult r = evaluate(model, d, batch, &p.predictions, add_probabilities);
  p.loss = r.loss;
  p.accuracy = r.accuracy;
  return p;
}

json member_json(const Member& m, const Pass& p, std::int64_t examples) {
  return {{"path", m.path},
          {"worker", m.meta.worker},
          {"step", m.meta.step},
          {"model_fingerprint", m.meta.model_fingerprint},
          {"loss", json_number(p.loss)},
          {"accuracy", p.accuracy},
          {"examples", examples},
          {"normalization", {{"shift", m.norm.shift}, {"scale", m.norm.scale}, {"source", m.norm_source}}}};
}

std::string data_line(const EvalData& ed) {
  const auto name = ed.desc["name"].get<std::string>(), spec = ed.desc["spec"].get<std::string>();
  // An idx spec is its own name (the two files): no need to say it twice.
  std::string s = fmt::format("data: {}, {} examples, {} classes{}, batch {}\n", name, ed.raw.size(),
                              ed.raw.classes, name == spec ? "" : " (--data " + spec + ")", ed.batch);
  for (const auto& w : ed.warnings) s += "warning: " + w + "\n";
  return s;
}

// eval --predictions: probs holds the sum over K members, [N, V] row-major. Written
// through a temp file and renamed, so a reader never sees half a file.
void write_predictions(const std::string& path, const std::vector<double>& probs, std::int64_t V, double K,
                       const std::vector<std::int32_t>& labels) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out), "index,label,predicted");
  for (std::int64_t c = 0; c < V; ++c) fmt::format_to(std::back_inserter(out), ",p{}", c);
  out.push_back('\n');
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double* row = probs.data() + static_cast<std::int64_t>(i) * V;
    fmt::format_to(std::back_inserter(out), "{},{},{}", i, labels[i], std::max_element(row, row + V) - row);
    for (std::int64_t c = 0; c < V; ++c) fmt::format_to(std::back_inserter(out), ",{}", row[c] / K);
    out.push_back('\n');
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InspectError("--predictions " + path + ": cannot write " + tmp + ": " + std::strerror(errno));
  int err = std::fwrite(out.data(), 1, out.size(), f) == out.size() ? 0 : errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (!err && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (!err) return;
  std::remove(tmp.c_str());
  throw InspectError("--predictions " + path + ": cannot write: " + std::strerror(err));
}

json base_doc(const char* command, const EvalData& ed) {
  return {{"command", command}, {"data", ed.desc}, {"batch_size", ed.batch}, {"warnings", ed.warnings}};
}

}  // namespace

Report eval(const std::vector<std::string>& paths, const EvalOptions& opt) {
  if (paths.empty()) throw UsageError("eval needs at least one checkpoint");
  check_options(opt);
  std::vector<checkpoint::CheckpointMeta> metas;
  for (const auto& p : paths) {
    metas.push_back(checkpoint::read_meta(p));
    refuse_text(p, metas.back());
  }
  // Attributes first, so that a mismatch is reported before any data is loaded. An
  // ensemble averages class probabilities of the same inputs, so its members may be of any
  // architecture (a mixed cohort) as long as they read inputs of one shape and predict one
  // set of classes; each member gets the data under its own stored normalization.
  const ModelConfig first = model_from_yaml(metas[0].model, "model attribute of " + paths[0]);
  for (std::size_t i = 1; i < paths.size(); ++i) {
    const ModelConfig m = model_from_yaml(metas[i].model, "model attribute of " + paths[i]);
    if (m.input_shape != first.input_shape || m.classes != first.classes)
      throw InspectError(fmt::format("{} and {} hold models of different inputs or classes ({} [{}] -> {} classes, "
                                     "{} [{}] -> {} classes): eval and its ensemble need one input shape and one "
                                     "set of classes",
                                     paths[0], paths[i], first.kind, fmt::join(first.input_shape, ", "),
                                     first.classes, m.kind, fmt::join(m.input_shape, ", "), m.classes));
  }
  EvalData ed = load_data(paths[0], metas[0], opt);
  const std::int64_t N = ed.raw.size();
  const bool ensemble = paths.size() > 1;
  const bool keep_probs = ensemble || !opt.predictions.empty();
  std::vector<double> probs;
  std::map<std::pair<double, double>, data::Dataset> cache;
  json results = json::array();
  Table table({"CHECKPOINT", "WORKER", "STEP", "LOSS", "ACCURACY"}, "lrrrr");
  std::int64_t V = 0;
  for (const auto& path : paths) {
    // One model at a time: only the probabilities stay, however many checkpoints there are.
    Member m = load_member(path, ed);
    if (keep_probs && probs.empty()) {
      V = model_from_yaml(m.meta.model).classes;
      probs.assign(static_cast<std::size_t>(N * V), 0.0);
    }
    Pass p = run_pass(m.model, normalized(m, ed.raw, cache), ed.batch, keep_probs ? &probs : nullptr);
    table.add({path, std::to_string(m.meta.worker), std::to_string(m.meta.step), fixed(p.loss, 4),
               percent(p.accuracy)});
    results.push_back(member_json(m, p, N));
  }
  json ens = nullptr;
  if (ensemble) {
    const double K = static_cast<double>(paths.size());
    double loss_sum = 0;
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      const double* row = probs.data() + i * V;
      const std::int32_t y = ed.raw.labels[static_cast<std::size_t>(i)];
      // A probability that underflowed to 0 would make the loss infinite: floor it.
      loss_sum -= std::log(std::max(row[y] / K, DBL_MIN));
      correct += std::max_element(row, row + V) - row == y;
    }
    ens = {{"members", paths.size()},
           {"combine", "mean of softmax probabilities"},
           {"loss", loss_sum / static_cast<double>(N)},
           {"accuracy", static_cast<double>(correct) / static_cast<double>(N)},
           {"examples", N}};
    table.add({fmt::format("ensemble of {} (mean probability)", paths.size()), "", "",
               fixed(ens["loss"].get<double>(), 4), percent(ens["accuracy"].get<double>())});
  }
  Report r;
  r.doc = base_doc("eval", ed);
  r.doc["results"] = std::move(results);
  r.doc["ensemble"] = std::move(ens);
  if (!opt.predictions.empty()) {
    write_predictions(opt.predictions, probs, V, static_cast<double>(paths.size()), ed.raw.labels);
    r.doc["predictions"] = opt.predictions;
  }
  r.text = data_line(ed) + table.render();
  return r;
}

Report churn(const std::string& path_a, const std::string& path_b, const EvalOptions& opt) {
  check_options(opt);
  auto meta_a = checkpoint::read_meta(path_a), meta_b = checkpoint::read_meta(path_b);
  refuse_text(path_a, meta_a);
  refuse_text(path_b, meta_b);
  // Different architectures may be compared, but only over the same set of classes.
  const auto classes_a = model_from_yaml(meta_a.model, "model attribute of " + path_a).classes;
  const auto classes_b = model_from_yaml(meta_b.model, "model attribute of " + path_b).classes;
  if (classes_a != classes_b)
    throw InspectError(fmt::format("{} predicts {} classes and {} predicts {}: churn compares predictions over "
                                   "one set of classes",
                                   path_a, classes_a, path_b, classes_b));
  EvalData ed = load_data(path_a, meta_a, opt);
  std::map<std::pair<double, double>, data::Dataset> cache;
  Member a = load_member(path_a, ed);
  Pass pa = run_pass(a.model, normalized(a, ed.raw, cache), ed.batch, nullptr);
  Member b = load_member(path_b, ed);
  Pass pb = run_pass(b.model, normalized(b, ed.raw, cache), ed.batch, nullptr);
  const std::int64_t N = ed.raw.size();
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < pa.predictions.size(); ++i) differ += pa.predictions[i] != pb.predictions[i];
  const double fraction = static_cast<double>(differ) / static_cast<double>(N);

  Report r;
  r.doc = base_doc("churn", ed);
  r.doc["a"] = member_json(a, pa, N);
  r.doc["b"] = member_json(b, pb, N);
  r.doc["examples"] = N;
  r.doc["differ"] = differ;
  r.doc["churn"] = fraction;
  Table table({"", "CHECKPOINT", "WORKER", "STEP", "LOSS", "ACCURACY"}, "llrrrr");
  table.add({"A", path_a, std::to_string(a.meta.worker), std::to_string(a.meta.step), fixed(pa.loss, 4),
             percent(pa.accuracy)});
  table.add({"B", path_b, std::to_string(b.meta.worker), std::to_string(b.meta.step), fixed(pb.loss, 4),
             percent(pb.accuracy)});
  r.text = data_line(ed) + table.render() +
           fmt::format("churn: {} ({} of {} examples predicted differently)\n", percent(fraction), differ, N);
  return r;
}

}  // namespace codistill::inspect
