// codistill-inspect list, show and verify: what is in a run directory and in one file.
#include <signal.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/naming.hpp"
#include "checkpoint/store.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/inspect/format.hpp"
#include "codistill/inspect/inspect.hpp"

namespace codistill::inspect {

namespace fs = std::filesystem;
using json = Json;

namespace {

double now_unix() { return static_cast<double>(std::time(nullptr)); }

// Seconds since the last modification of a file, for files whose created_unix attribute
// cannot be read; nullopt when the file is gone.
std::optional<double> mtime_age(const std::string& path) {
  std::error_code ec;
  auto t = fs::last_write_time(path, ec);
  if (ec) return std::nullopt;
  auto sys = std::chrono::file_clock::to_sys(t);
  return now_unix() - static_cast<double>(std::chrono::system_clock::to_time_t(sys));
}

// One published checkpoint of a listing. Another process may prune it at any moment, so
// every step tolerates the file being gone.
json list_entry(const checkpoint::CheckpointFile& f, bool verify) {
  json e = {{"file", fs::path(f.path).filename().string()},
            {"path", f.path},
            {"step", f.step},
            {"bytes", nullptr},
            {"created_unix", nullptr},
            {"age_s", nullptr},
            {"examples_seen", nullptr},
            {"valid", nullptr},
            {"reason", nullptr}};
  std::error_code ec;
  const auto bytes = fs::file_size(f.path, ec);
  if (ec) {
    e["valid"] = false;
    e["reason"] = "vanished while listing (pruned by its worker?)";
    return e;
  }
  e["bytes"] = bytes;
  std::string meta_error;
  try {
    auto meta = checkpoint::read_meta(f.path);
    e["created_unix"] = meta.created_unix;
    e["age_s"] = now_unix() - static_cast<double>(meta.created_unix);
    e["examples_seen"] = meta.examples_seen;
    meta_error = name_step_mismatch(f.path, meta.step);
  } catch (const checkpoint::CheckpointError& err) {
    meta_error = err.reason();
    if (auto age = mtime_age(f.path)) e["age_s"] = *age;
  }
  if (verify) {
    auto v = checkpoint::verify(f.path);
    const std::string& reason = !v.valid ? v.reason : meta_error;
    e["valid"] = reason.empty();
    if (!reason.empty()) e["reason"] = reason;
  } else if (!meta_error.empty()) {
    // Unreadable attributes settle it without reading the data.
    e["valid"] = false;
    e["reason"] = meta_error;
  }
  return e;
}

// Temp files (.ckpt-*.tmp.<pid>) of a worker folder. A live writer's file is normal; one
// whose writer is gone is debris its worker removes at its next start. The pid can only
// be checked on this host: on a shared file system the writer may run elsewhere.
json temp_files(const std::string& worker_dir) {
  json out = json::array();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(worker_dir, ec)) {
    const std::string name = entry.path().filename().string();
    auto pid = checkpoint::parse_temp_file_pid(name);
    if (!pid) continue;
    std::error_code size_ec;
    const auto bytes = fs::file_size(entry.path(), size_ec);
    const bool alive = ::kill(static_cast<pid_t>(*pid), 0) == 0 || errno == EPERM;
    out.push_back({{"file", name},
                   {"path", entry.path().string()},
                   {"bytes", size_ec ? json(nullptr) : json(bytes)},
                   {"pid", *pid},
                   {"writer_alive", alive}});
  }
  return out;
}

std::string status_text(const json& e) {
  if (e["valid"].is_null()) return "unchecked";
  if (e["valid"].get<bool>()) return "valid";
  return "INVALID: " + e["reason"].get<std::string>();
}

std::string list_text(const json& doc) {
  std::int64_t files = 0, teacher_files = 0, invalid = 0;
  Table table({"WORKER", "STEP", "FILE", "SIZE", "AGE", "STATUS"}, "rrlrrl");
  std::vector<std::string> temps;
  for (const auto& w : doc["workers"]) {
    const std::string id = std::to_string(w["worker"].get<int>());
    if (w["checkpoints"].empty()) table.add({id, "-", "(no checkpoints)", "", "", ""});
    for (const auto& e : w["checkpoints"]) {
      ++files;
      invalid += e["valid"] == false;
      table.add({id, std::to_string(e["step"].get<std::int64_t>()), e["file"].get<std::string>(),
                 e["bytes"].is_null() ? "-" : human_bytes(e["bytes"].get<std::uint64_t>()),
                 e["age_s"].is_null() ? "-" : human_duration(e["age_s"].get<double>()), status_text(e)});
    }
    for (const auto& e : w.value("teacher_files", json::array())) {
      ++teacher_files;
      invalid += e["valid"] == false;
      table.add({id, std::to_string(e["step"].get<std::int64_t>()), e["file"].get<std::string>(),
                 e["bytes"].is_null() ? "-" : human_bytes(e["bytes"].get<std::uint64_t>()),
                 e["age_s"].is_null() ? "-" : human_duration(e["age_s"].get<double>()), status_text(e)});
    }
    for (const auto& t : w["temp_files"]) {
      std::string what = t["writer_alive"].get<bool>()
                             ? fmt::format("being written by pid {} (running)", t["pid"].get<long>())
                             : fmt::format("stray: pid {} is not running on this host (its worker removes "
                                           "it at its next start)",
                                           t["pid"].get<long>());
      temps.push_back(fmt::format("  {}/{}  {}  {}", fs::path(w["dir"].get<std::string>()).filename().string(),
                                  t["file"].get<std::string>(),
                                  t["bytes"].is_null() ? "-" : human_bytes(t["bytes"].get<std::uint64_t>()), what));
    }
  }
  std::string out = fmt::format("run directory {}: {} worker(s), {} checkpoint(s)", doc["run_dir"].get<std::string>(),
                                doc["workers"].size(), files);
  if (teacher_files > 0) out += fmt::format(", {} teacher file(s)", teacher_files);
  if (invalid > 0) out += fmt::format(", {} invalid", invalid);
  out += "\n";
  if (!doc["workers"].empty()) out += table.render();
  if (!temps.empty()) {
    out += "temp files:\n";
    for (const auto& t : temps) out += t + "\n";
  }
  return out;
}

}  // namespace

Report list_run(const std::string& run_dir, const ListOptions& options) {
  if (!fs::is_directory(run_dir))
    throw InspectError(run_dir + ": not a folder (expected a run directory holding worker-XXX folders)");
  checkpoint::RunStore store(run_dir);
  json workers = json::array();
  for (int w : store.workers()) {
    json jw = {{"worker", w}, {"dir", store.worker_dir(w)}, {"checkpoints", json::array()}};
    json freshest = nullptr;
    for (const auto& f : store.checkpoints(w)) {
      json e = list_entry(f, options.verify);
      if (e["valid"] == true) freshest = f.step;  // ascending steps: the last valid one wins
      jw["checkpoints"].push_back(std::move(e));
    }
    jw["freshest_valid_step"] = freshest;
    // Teacher files (docs/checkpoint-format.md): what peers read instead of the checkpoints.
    jw["teacher_files"] = json::array();
    for (const auto& f : store.teacher_files(w)) jw["teacher_files"].push_back(list_entry(f, options.verify));
    jw["temp_files"] = temp_files(store.worker_dir(w));
    workers.push_back(std::move(jw));
  }
  Report r;
  r.doc = {{"command", "list"}, {"run_dir", run_dir}, {"verified", options.verify}, {"workers", std::move(workers)}};
  r.text = list_text(r.doc);
  return r;
}

namespace {

json tensor_json(checkpoint::Section section, const checkpoint::TensorValue& t) {
  Stats s = tensor_stats(t);
  return {{"section", checkpoint::section_group(section)},
          {"name", t.name},
          {"path", std::string("/") + checkpoint::section_group(section) + "/" + t.name},
          {"shape", t.shape},
          {"dtype", checkpoint::elem_name(t.type)},
          {"numel", t.numel()},
          {"mean", json_number(s.mean)},
          {"std", json_number(s.std)},
          {"min", json_number(s.min)},
          {"max", json_number(s.max)}};
}

std::string stat_cell(const json& v) { return v.is_null() ? "-" : num(v.get<double>()); }

std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out += indent + text.substr(begin, end - begin) + "\n";
    begin = end + 1;
  }
  return out;
}

std::string show_text(const json& doc, bool with_config) {
  std::string teachers;
  for (const auto& t : doc["teacher_steps"])
    teachers += fmt::format("{}worker {} at step {}", teachers.empty() ? "" : ", ", t["worker"].get<std::int64_t>(),
                            t["step"].get<std::int64_t>());
  std::string norm = doc["normalization"].is_null()
                         ? "none stored"
                         : fmt::format("shift {}, scale {} (inputs = (raw - shift) / scale)",
                                       num(doc["normalization"]["shift"].get<double>()),
                                       num(doc["normalization"]["scale"].get<double>()));
  auto line = [](const char* key, const std::string& value) { return fmt::format("{:<14}{}\n", key, value); };
  std::string out = line("checkpoint", fmt::format("{} ({})", doc["path"].get<std::string>(),
                                                   human_bytes(doc["bytes"].get<std::uint64_t>())));
  out += line("worker", std::to_string(doc["worker"].get<std::int64_t>()));
  out += line("step", std::to_string(doc["step"].get<std::int64_t>()));
  out += line("examples seen", std::to_string(doc["examples_seen"].get<std::int64_t>()));
  out += line("created", fmt::format("{} ({} ago)", doc["created"].get<std::string>(),
                                     human_duration(now_unix() - doc["created_unix"].get<double>())));
  out += line("fingerprint", doc["model_fingerprint"].get<std::string>());
  out += line("digest", fmt::format("{} ({}, verified)", doc["content_digest"].get<std::string>(),
                                    doc["content_digest_algorithm"].get<std::string>()));
  out += line("teachers", teachers.empty() ? "none" : teachers);
  out += line("normalization", norm);
  out += line("parameters", fmt::format("{} in {} tensors", doc["parameters"].get<std::int64_t>(),
                                        doc["parameter_tensors"].get<std::int64_t>()));
  if (doc.contains("warning")) out += line("warning", doc["warning"].get<std::string>());
  out += "model:\n" + indented(doc["model"].get<std::string>(), "  ");
  if (with_config) out += "config:\n" + indented(doc["config"].get<std::string>(), "  ");
  Table table({"TENSOR", "SHAPE", "DTYPE", "MEAN", "STD", "MIN", "MAX"}, "lllrrrr");
  for (const auto& t : doc["tensors"])
    table.add({t["path"].get<std::string>(), kernels::shape_str(t["shape"].get<kernels::Shape>()),
               t["dtype"].get<std::string>(), stat_cell(t["mean"]),
               stat_cell(t["std"]), stat_cell(t["min"]), stat_cell(t["max"])});
  return out + table.render();
}

}  // namespace

Report show(const std::string& path, const ShowOptions& options) {
  using checkpoint::Section;
  // The state is small and holds the normalization; the optimizer slots can be as large
  // as the parameters, so they are read (beyond the digest check) only when shown.
  checkpoint::CheckpointData data = read_checkpoint(path, options.all, true);
  const auto& m = data.meta;
  json teachers = json::array();
  for (const auto& t : m.teacher_steps) teachers.push_back({{"worker", t.worker}, {"step", t.step}});
  data::Normalization n = normalization_from_checkpoint(data);
  json norm = n.kind == "none" ? json(nullptr) : json{{"shift", n.shift}, {"scale", n.scale}};
  std::int64_t params = 0;
  for (const auto& t : data.params) params += t.numel();
  json tensors = json::array();
  for (Section s : checkpoint::kSections) {
    if (s != Section::params && s != Section::buffers && !options.all) continue;
    for (const auto& t : data.section(s)) tensors.push_back(tensor_json(s, t));
  }
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  Report r;
  r.doc = {{"command", "show"},
           {"path", path},
           {"bytes", ec ? 0 : bytes},
           {"format_version", checkpoint::kFormatVersion},
           {"worker", m.worker},
           {"step", m.step},
           {"examples_seen", m.examples_seen},
           {"created_unix", m.created_unix},
           {"created", utc_time(m.created_unix)},
           {"model_fingerprint", m.model_fingerprint},
           {"content_digest", m.content_digest},
           {"content_digest_algorithm", m.content_digest_algorithm},
           {"teacher_steps", std::move(teachers)},
           {"normalization", std::move(norm)},
           {"parameters", params},
           {"parameter_tensors", data.params.size()},
           {"model", m.model},
           {"config", m.config},
           {"tensors", std::move(tensors)}};
  if (auto mismatch = name_step_mismatch(path, m.step); !mismatch.empty()) r.doc["warning"] = mismatch;
  r.text = show_text(r.doc, options.config);
  return r;
}

Report verify(const std::vector<std::string>& paths) {
  json results = json::array();
  Table table({"STATUS", "CHECKPOINT", "DETAIL"}, "lll");
  std::int64_t valid = 0;
  for (const auto& path : paths) {
    auto v = checkpoint::verify(path);
    json e = {{"path", path}, {"valid", v.valid}, {"reason", nullptr}, {"worker", nullptr}, {"step", nullptr}};
    std::string reason = v.reason, detail;
    if (v.valid) {
      try {
        auto meta = checkpoint::read_meta(path);
        e["worker"] = meta.worker;
        e["step"] = meta.step;
        detail = describe(meta);
        reason = name_step_mismatch(path, meta.step);
      } catch (const checkpoint::CheckpointError& err) {
        reason = err.reason();  // replaced between the two reads: report what is there now
      }
    }
    e["valid"] = reason.empty();
    if (!reason.empty()) e["reason"] = reason;
    valid += reason.empty();
    table.add({reason.empty() ? "OK" : "INVALID", path, reason.empty() ? detail : reason});
    results.push_back(std::move(e));
  }
  Report r;
  const auto total = static_cast<std::int64_t>(paths.size());
  r.ok = valid == total;
  r.doc = {{"command", "verify"}, {"results", std::move(results)}, {"valid", valid}, {"invalid", total - valid}};
  r.text = table.render() + fmt::format("{} of {} checkpoint(s) valid\n", valid, total);
  return r;
}

}  // namespace codistill::inspect
