#include "codistill/train/memory_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "checkpoint/checkpoint.hpp"
#include "codistill/eval/evaluate_text.hpp"
#include "codistill/util/config_error.hpp"
#include "codistill/util/memory_info.hpp"

namespace codistill {

namespace {

using memory::format_bytes;

std::int64_t nbytes(const kernels::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }

// One batch of `rows` examples as the model takes it: [rows, input...].
kernels::Shape batch_shape(const Model& model, std::int64_t rows) {
  kernels::Shape s = model.input_shape();
  s.insert(s.begin(), rows);
  return s;
}

// What the step holds besides the modules' buffers: each micro-batch's input and labels
// (two sets when the next batch is prepared ahead) and the loss gradient [labels, classes].
std::int64_t step_io_bytes(Model& model, const Config& cfg, const MemoryPlanInputs& in, std::int64_t rows,
                           const kernels::Shape& logits) {
  const kernels::Shape x = batch_shape(model, rows);
  const std::int64_t label_rows = logits.front();
  const std::int64_t per_micro =
      kernels::shape_numel(x) * static_cast<std::int64_t>(kernels::dtype_size(model.input_dtype())) + label_rows * 4;
  const std::int64_t sets = in.double_buffered ? 2 : 1;
  // The fused head holds no logits' gradient (TrainStep::set_fused_head).
  return sets * cfg.train.micro_batches * per_micro + (cfg.train.fused_head ? 0 : kernels::shape_numel(logits) * 4);
}

// With train.fused_head the last module (the head) never runs as a module: its logits and
// their gradient are not held. The loss instead keeps the features' gradient and a
// workspace of chunks of (K + 1) x V logits, at most DistillHeadParams::workspace_bytes.
ActivationBytes fused_head_activations(Model& model, const ActivationBytes& full, int teachers) {
  const auto head = model.linear_head();
  if (!head) return full;  // refused later by the step, naming train.fused_head
  const std::int64_t V = head->weight->dim(0), D = head->weight->dim(1);
  const std::int64_t rows = full.output.front();
  Module& last = *model.root().children().back().second;
  const ActivationBytes h = last.plan_activations({rows, D}, true, true);
  ActivationBytes a = full;
  a.forward -= h.forward;
  a.backward -= h.backward;
  a.backward += rows * D * 4;
  const auto cap = static_cast<std::int64_t>(kernels::DistillHeadParams{}.workspace_bytes);
  a.forward += std::min(cap, (teachers + 1) * rows * V * 4);
  return a;
}

// A teacher's forward (no gradients): each block keeps only its output, its internals held
// while it runs (Module::plan's transient). One planned as the student's own model is
// planned without the student's recompute, which teachers never run.
ActivationBytes teacher_activations(Model& teacher, Model& student, const kernels::Shape& x) {
  if (&teacher != &student || student.recompute() == "none") return teacher.root().plan_activations(x, false, false);
  const std::string mode = student.recompute();
  student.set_recompute("none");
  const ActivationBytes f = student.root().plan_activations(x, false, false);
  student.set_recompute(mode);
  return f;
}

// An evaluation forward at `rows` examples. Text runs a linear head on chunks of the
// features' rows (evaluate_text): its logits are a chunk's, not [rows, V].
ActivationBytes eval_activations(Model& model, const Config& cfg, std::int64_t rows) {
  ActivationBytes a = model.root().plan_activations(batch_shape(model, rows), false, false);
  if (!is_token_data(cfg.data) || !model.linear_head() || a.output.size() != 2) return a;
  const std::int64_t label_rows = a.output[0], V = a.output[1];
  a.forward -= (label_rows - eval_logit_rows(label_rows, V)) * V * 4;
  return a;
}

// train.recompute, said where the activations are counted.
std::string recompute_note(Model& model, const ActivationBytes& train) {
  if (model.recompute() == "none") return "";
  return fmt::format(" (recompute: {}, {} blocks keep their inputs; one block's internals at a time: {})",
                     model.recompute(), model.recompute_blocks(), format_bytes(train.transient));
}

// The checkpoint writer's chunk buffers: one, or with its I/O thread (files of 8 MiB and
// more) four, each the largest chunk: a tensor's rows up to WriteOptions::chunk_elements.
std::int64_t writer_buffer_bytes(Model& model, std::int64_t file_bytes) {
  std::int64_t largest = 0;
  for (const NamedParam& p : model.params()) largest = std::max(largest, p.value->numel());
  const std::int64_t chunk = std::min(largest, checkpoint::WriteOptions{}.chunk_elements) * 4 + 4;
  return (file_bytes >= (std::int64_t{8} << 20) ? 4 : 1) * chunk;
}

}  // namespace

std::int64_t MemoryPlan::host_bytes() const {
  std::int64_t sum = 0;
  for (const Line& l : lines) sum += l.on_device ? 0 : l.bytes;
  return sum;
}

std::int64_t MemoryPlan::device_bytes() const {
  std::int64_t sum = 0;
  for (const Line& l : lines) sum += l.on_device ? l.bytes : 0;
  return sum;
}

std::int64_t MemoryPlan::bytes(const std::string& name) const {
  for (const Line& l : lines)
    if (l.name == name) return l.bytes;
  return 0;
}

std::string MemoryPlan::table() const {
  std::string out = recompute == "none" ? "memory plan:\n" : "memory plan (train.recompute: " + recompute + "):\n";
  for (const Line& l : lines)
    out += fmt::format("  {:<20} {:>10}  {:<6}  {}\n", l.name, format_bytes(l.bytes), l.on_device ? device : "host",
                       l.note);
  out += fmt::format("  {:<20} {:>10}  host", "planned peak", format_bytes(host_bytes()));
  if (!device_is_host)
    out += fmt::format("\n  {:<20} {:>10}  {}", "planned peak", format_bytes(device_bytes()), device);
  return out;
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Line& l : lines) j[l.name] = l.bytes;
  j["host_bytes"] = host_bytes();
  j["device_bytes"] = device_is_host ? nlohmann::json(nullptr) : nlohmann::json(device_bytes());
  j["device"] = device;
  j["recompute"] = recompute;
  return j;
}

MemoryPlan plan_memory(Model& model, const Config& cfg, const MemoryPlanInputs& in) {
  MemoryPlan plan;
  plan.device = in.device;
  plan.device_is_host = in.device_is_host;
  plan.resident_bytes = in.resident_bytes;
  plan.recompute = model.recompute();
  const bool dev = !in.device_is_host;
  auto add = [&](std::string name, std::int64_t bytes, bool on_device, std::string note) {
    plan.lines.push_back({std::move(name), bytes, on_device, std::move(note)});
  };
  ParamArena& arena = model.arena();
  const std::int64_t values = nbytes(arena.values()), grads = nbytes(arena.grads()), bufs = nbytes(arena.buffers());
  const std::int64_t rows = cfg.data.batch_size / cfg.train.micro_batches;
  // Text evaluates whole windows: train.eval_batch_size counts tokens there.
  const std::int64_t eval_rows = is_token_data(cfg.data)
                                     ? eval_windows_per_batch(cfg.train.eval_batch_size, cfg.data.context)
                                     : cfg.train.eval_batch_size;

  ActivationBytes train = model.root().plan_activations(batch_shape(model, rows), true, false);
  if (cfg.train.fused_head) train = fused_head_activations(model, train, static_cast<int>(in.teachers.size()));
  const ActivationBytes eval = eval_activations(model, cfg, eval_rows);
  const std::string shape = kernels::shape_str(batch_shape(model, rows));

  add("runtime", in.runtime_bytes, false, "resident besides data and model when planned: code, libraries, threads");
  add("data", in.data_bytes, false, "the loaded examples and labels (or tokens)");
  add("parameters", values, dev, fmt::format("{} floats", values / 4));
  add("gradients", grads, dev, "one block like the parameters");
  if (bufs > 0) add("buffers", bufs, dev, "non-trainable (batch-norm statistics)");
  add("optimizer", in.optimizer_slots * values, dev,
      fmt::format("{} slot(s) like the parameters ({})", in.optimizer_slots, cfg.optimizer.kind));
  add("activations", train.total(), dev,
      fmt::format("batch {} ({} per micro-batch), forward {} + backward {}{}", shape, cfg.train.micro_batches,
                  format_bytes(train.forward), format_bytes(train.backward), recompute_note(model, train)));
  // Evaluation re-sizes the forward buffers to its batch while backward's stay (recomputed
  // blocks hold one block's forward at a time in both).
  add("evaluation",
      std::max<std::int64_t>(0, eval.forward + eval.transient - train.forward - train.transient), dev,
      fmt::format("forward at {} evaluation rows beyond training's{}", eval_rows,
                  is_token_data(cfg.data) && model.linear_head() ? " (logits a chunk of rows at a time)" : ""));
  // The backend's scratch (oneDNN's convolutions on the CPU) is one per queue, grown to its
  // largest call: training's or evaluation's.
  ActivationBytes scratch = train;
  scratch.merge_workspace(eval.workspace);
  add("workspace", scratch.workspace_bytes(), dev,
      "the backend's scratch slots, each at its largest call on the queue");
  add("step_io", step_io_bytes(model, cfg, in, rows, train.output), dev, "inputs, labels, loss gradient");
  // Each teacher: its parameters and buffers (no gradients), and a forward at the larger of
  // the micro-batch and the evaluation batch (churn) with its own queue's scratch.
  std::int64_t teachers = 0, largest = 0, working = 0;
  const kernels::Shape teach_x = batch_shape(model, std::max(rows, eval_rows));
  // codistill.teacher_weights: bf16: the matrices at 2 bytes, the small parameters at 4.
  const bool bf16_weights = cfg.codistill.teacher_weights == "bf16";
  for (Model* t : in.teachers) {
    if (!t) t = &model;  // the student's architecture
    const std::int64_t f32_held = nbytes(t->arena().values()) + nbytes(t->arena().buffers());
    const std::int64_t held = bf16_weights ? t->arena().bf16_matrices_bytes() : f32_held;
    const ActivationBytes f = teacher_activations(*t, model, teach_x);
    teachers += held + f.forward + f.workspace_bytes();
    largest = std::max(largest, f32_held);  // a load builds the model in float32 before rounding it
    // A block's internals stay in a pool after the forward (Model::use_eval_pool): on the host
    // the thread's, which the K teachers share (the largest once); on a device, each its own.
    working = dev ? working + f.transient : std::max(working, f.transient);
  }
  teachers += working;
  add("teachers", teachers, dev,
      fmt::format("K = {} forward-only models: parameters ({}), buffers, forward and scratch at {} rows, "
                  "one block's working set {}",
                  in.teachers.size(), bf16_weights ? "bf16 matrices" : "float32", teach_x.front(),
                  dev ? "each" : "shared"));
  if (in.teacher_reloads) add("teacher_reload", largest, dev, "a peer's checkpoint loading while the old one teaches");
  // The checkpoint's second state: spare blocks for the out-of-place update where the state
  // is host memory, a host snapshot of it where it is on a device.
  const bool staged = cfg.checkpoint.async;
  add("checkpoint_staging", staged ? values * (1 + in.optimizer_slots) + (dev ? bufs : 0) : 0, false,
      staged ? "a second copy of parameters and optimizer state (asynchronous writes)" : "none (checkpoint.async off)");
  add("checkpoint_writer", writer_buffer_bytes(model, values * (1 + in.optimizer_slots) + bufs), false,
      "chunk buffers of the HDF5 writer (checkpoint/writer.cpp)");
  return plan;
}

MemoryBudget memory_budget(const Config& cfg, const kernels::Backend& backend, const kernels::Device& device) {
  MemoryBudget b;
  const std::string& limit = cfg.train.memory_limit;
  if (limit == "off") return b;
  const auto dev = backend.device_memory(device.index);
  if (limit == "auto") {
    if (const auto host = memory::host_available()) {
      b.host = host->bytes;
      b.source = host->source;
    }
    if (dev && dev->free >= 0) {
      b.device = dev->free;
      b.source += b.source.empty() ? "device free memory" : ", device free memory";
    }
    return b;
  }
  const auto bytes = memory::parse_bytes(limit);
  if (!bytes)
    throw ConfigError("train.memory_limit", "", 0,
                      "expected auto, off or a size such as 12GiB, 800MB or a number of bytes, got '" + limit + "'");
  // A given limit applies where the model's memory is: the device, or the host.
  (dev ? b.device : b.host) = *bytes;
  b.source = "train.memory_limit";
  return b;
}

void check_memory_fits(const MemoryPlan& plan, const MemoryBudget& budget, const Config& cfg) {
  std::string over;
  // What is resident when planned is not in the host's free memory: that is for the rest.
  const bool whole = budget.source == "train.memory_limit";
  const std::int64_t host_needed = plan.host_bytes() - (whole ? 0 : plan.resident_bytes);
  if (budget.host >= 0 && host_needed > budget.host)
    over += fmt::format("host: planned {} but {} available ({})", format_bytes(host_needed), format_bytes(budget.host),
                        budget.source);
  if (budget.device >= 0 && plan.device_bytes() > budget.device)
    over += fmt::format("{}{}: planned {} but {} available ({})", over.empty() ? "" : "; ", plan.device,
                        format_bytes(plan.device_bytes()), format_bytes(budget.device), budget.source);
  if (over.empty()) return;
  std::string change = fmt::format(
      "to fit: a smaller data.batch_size ({}) or more train.micro_batches ({}: activations shrink with the rows "
      "per micro-batch)",
      cfg.data.batch_size, cfg.train.micro_batches);
  if (is_token_data(cfg.data)) {
    change += fmt::format(", a shorter data.context ({})", cfg.data.context);
    if (model_of(cfg, cfg.run.worker).attention != "flash") change += ", model.attention: flash";
    if (!cfg.train.fused_head) change += ", train.fused_head: true (no [tokens, vocabulary] logits)";
  }
  const std::string kind = model_of(cfg, cfg.run.worker).kind;
  if (cfg.train.recompute == "none" && (kind == "gpt" || kind == "resnet"))
    change += ", train.recompute: blocks (each block's internals rebuilt in backward)";
  if (plan.bytes("teachers") > 0) change += ", fewer teachers (codistill.teachers, codistill.fixed_teachers)";
  if (plan.bytes("checkpoint_staging") > 0) change += ", checkpoint.async: false (no second copy of the state)";
  if (plan.bytes("evaluation") > 0)
    change += fmt::format(", a smaller train.eval_batch_size ({})", cfg.train.eval_batch_size);
  change += ", a smaller model; or train.memory_limit: off to start anyway";
  throw ConfigError("train.memory_limit", "", 0,
                    fmt::format("the run will not fit in memory: {}\n{}\n{}", over, plan.table(), change));
}

}  // namespace codistill
