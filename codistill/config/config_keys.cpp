// The config schema: one line per key (path, member, type, allowed values). To add a key,
// add its member to config.hpp, a line here and a row in docs/config.md.
#include <string_view>

#include "codistill/config/config_schema.hpp"
#include "codistill/config/layer_schema.hpp"

namespace codistill::config_detail {
namespace {

Check any() { return {}; }
Check ge(double v) {
  Check c;
  c.lo = v;
  return c;
}
Check gt(double v) {
  Check c = ge(v);
  c.lo_open = true;
  return c;
}
Check in_co(double lo, double hi) {  // [lo, hi)
  Check c = ge(lo);
  c.hi = hi;
  c.hi_open = true;
  return c;
}
Check in_cc(double lo, double hi) {  // [lo, hi]
  Check c = ge(lo);
  c.hi = hi;
  return c;
}
Check one_of(std::initializer_list<std::string_view> values) {
  Check c;
  c.choices = values;
  return c;
}
Check text() {
  Check c;
  c.non_empty = true;
  return c;
}
Check device_name() {
  Check c;
  c.device = true;
  return c;
}

// The key path is the member path itself (#member), so the two can never drift apart;
// the accessor's return type selects the value type.
#define CODISTILL_KEY(member, check) \
  Field { #member, +[](Config& c) -> auto& { return c.member; }, check }

std::vector<Field> make_model_keys() {
  return {
      CODISTILL_KEY(model.kind, one_of({"mlp", "cnn", "resnet", "layers", "gpt"})),
      CODISTILL_KEY(model.hidden, ge(1)),
      CODISTILL_KEY(model.channels, ge(1).length(1)),
      CODISTILL_KEY(model.kernel_size, ge(1)),
      CODISTILL_KEY(model.pool, ge(1)),
      CODISTILL_KEY(model.blocks, ge(1)),
      CODISTILL_KEY(model.activation, one_of({"relu", "gelu"})),
      CODISTILL_KEY(model.gelu, one_of({"erf", "tanh"})),
      CODISTILL_KEY(model.dropout, in_co(0, 1)),
      CODISTILL_KEY(model.init, one_of({"kaiming_uniform", "kaiming_normal", "xavier_uniform"})),
      CODISTILL_KEY(model.layers, any()),  // checked entry by entry by the layer schema
      CODISTILL_KEY(model.vocab_size, ge(0)),
      CODISTILL_KEY(model.seq_len, ge(1)),
      CODISTILL_KEY(model.d_model, ge(1)),
      CODISTILL_KEY(model.heads, ge(1)),  // divides model.d_model (checked by build_model)
      CODISTILL_KEY(model.mlp_ratio, ge(1)),
      CODISTILL_KEY(model.tie_embeddings, any()),
  };
}

// The keys of the sections before the model: run, group, device, data.
std::vector<Field> make_run_and_data_keys() {
  return {
      CODISTILL_KEY(run.name, text()),
      CODISTILL_KEY(run.dir, text()),
      CODISTILL_KEY(run.seed, any()),
      CODISTILL_KEY(run.worker, ge(0)),  // < run.workers: checked after the overrides
      CODISTILL_KEY(run.workers, ge(1)),
      CODISTILL_KEY(run.retire_at, ge(0)),
      CODISTILL_KEY(run.threads, ge(1)),
      CODISTILL_KEY(group.kind, one_of({"auto", "single", "mpi", "nccl"})),
      CODISTILL_KEY(group.timeout_s, gt(0)),
      CODISTILL_KEY(group.bucket_mb, gt(0)),
      CODISTILL_KEY(group.sync_batchnorm, any()),
      CODISTILL_KEY(device, device_name()),
      CODISTILL_KEY(data.kind, one_of({"arrays", "fashion-mnist", "idx", "synthetic", "text", "tokens"})),
      CODISTILL_KEY(data.train, any()),  // kind tokens: non-empty (checked at start, lm_data.cpp)
      CODISTILL_KEY(data.valid, any()),
      CODISTILL_KEY(data.token_dtype, one_of({"auto", "uint16", "uint32"})),
      CODISTILL_KEY(data.layout, one_of({"nhwc", "nchw"})),
      CODISTILL_KEY(data.classes, in_cc(0, 1000)),
      CODISTILL_KEY(data.path, text()),
      CODISTILL_KEY(data.train_images, text()),
      CODISTILL_KEY(data.train_labels, text()),
      CODISTILL_KEY(data.test_images, text()),
      CODISTILL_KEY(data.test_labels, text()),
      CODISTILL_KEY(data.batch_size, ge(1)),
      CODISTILL_KEY(data.shard, one_of({"auto", "disjoint", "full", "same", "none"})),
      CODISTILL_KEY(data.normalize, one_of({"standard", "unit", "none"})),
      CODISTILL_KEY(data.train_limit, ge(0)),
      CODISTILL_KEY(data.test_limit, ge(0)),
      CODISTILL_KEY(data.context, ge(1)),  // kind text; <= model.seq_len: checked at start
      CODISTILL_KEY(data.synthetic_train, ge(1)),
      CODISTILL_KEY(data.synthetic_test, ge(1)),
      CODISTILL_KEY(data.synthetic_classes, in_cc(2, 1000)),
      CODISTILL_KEY(data.synthetic_shape, ge(1).length(3, 3)),
      CODISTILL_KEY(data.synthetic_noise, ge(0)),
      CODISTILL_KEY(data.synthetic_seed, any()),
      CODISTILL_KEY(data.augment.crop_padding, ge(0)),
      CODISTILL_KEY(data.augment.flip, any()),
      CODISTILL_KEY(data.prefetch, one_of({"auto", "true", "false"})),
  };
}

// The keys of the sections after the model: optimizer, train, checkpoint, codistill.
std::vector<Field> make_training_keys() {
  return {
      CODISTILL_KEY(optimizer.kind, one_of({"sgd", "adamw"})),
      CODISTILL_KEY(optimizer.lr, gt(0)),
      CODISTILL_KEY(optimizer.momentum, in_co(0, 1)),
      CODISTILL_KEY(optimizer.nesterov, any()),
      CODISTILL_KEY(optimizer.weight_decay, ge(0)),
      CODISTILL_KEY(optimizer.beta1, in_co(0, 1)),
      CODISTILL_KEY(optimizer.beta2, in_co(0, 1)),
      CODISTILL_KEY(optimizer.eps, gt(0)),
      CODISTILL_KEY(optimizer.clip_grad_norm, ge(0)),
      CODISTILL_KEY(optimizer.decay, one_of({"all", "matrices"})),
      // The kinds of learning_rate (codistill/optim/schedule.cpp); a test keeps the two equal.
      CODISTILL_KEY(optimizer.schedule.kind, one_of({"constant", "step", "exponential", "cosine", "cyclical", "sgdr"})),
      CODISTILL_KEY(optimizer.schedule.warmup_steps, ge(0)),
      CODISTILL_KEY(optimizer.schedule.step_size, ge(1)),
      CODISTILL_KEY(optimizer.schedule.gamma, gt(0)),
      CODISTILL_KEY(optimizer.schedule.min_lr, ge(0)),  // <= optimizer.lr where it is a floor
      CODISTILL_KEY(optimizer.schedule.half_cycle_steps, ge(1)),
      CODISTILL_KEY(optimizer.schedule.cycle_mode, one_of({"triangular", "triangular2"})),
      CODISTILL_KEY(optimizer.schedule.restart_steps, ge(1)),
      CODISTILL_KEY(optimizer.schedule.restart_mult, ge(1)),
      CODISTILL_KEY(train.steps, ge(1)),
      CODISTILL_KEY(train.micro_batches, ge(1)),  // divides data.batch_size
      CODISTILL_KEY(train.eval_every, ge(0)),
      CODISTILL_KEY(train.log_every, ge(1)),
      CODISTILL_KEY(train.eval_batch_size, ge(1)),
      CODISTILL_KEY(train.allow_tf32, any()),
      CODISTILL_KEY(train.fused_head, any()),
      CODISTILL_KEY(train.precision, one_of({"float32", "bf16"})),
      CODISTILL_KEY(train.recompute, one_of({"none", "blocks"})),
      CODISTILL_KEY(train.memory_limit, text()),  // auto | off | a size (memory_plan.cpp parses it)
      CODISTILL_KEY(checkpoint.every, ge(0)),
      CODISTILL_KEY(checkpoint.keep, ge(1)),
      CODISTILL_KEY(checkpoint.async, any()),
      CODISTILL_KEY(checkpoint.on_busy, one_of({"wait", "skip"})),
      CODISTILL_KEY(checkpoint.teacher_dtype, one_of({"none", "float32", "bf16"})),
      CODISTILL_KEY(checkpoint.teacher_every, ge(1)),
      CODISTILL_KEY(codistill.enabled, any()),
      CODISTILL_KEY(codistill.burn_in, ge(0)),
      CODISTILL_KEY(codistill.reload_every, ge(1)),
      CODISTILL_KEY(codistill.weight, ge(0)),
      CODISTILL_KEY(codistill.hard_weight, ge(0)),
      CODISTILL_KEY(codistill.temperature, gt(0)),
      CODISTILL_KEY(codistill.teachers, ge(0)),
      CODISTILL_KEY(codistill.max_staleness, ge(0)),
      CODISTILL_KEY(codistill.mode, one_of({"async", "sync"})),
      CODISTILL_KEY(codistill.sync_timeout_s, gt(0)),
      CODISTILL_KEY(codistill.sync_quorum, ge(0)),
      CODISTILL_KEY(codistill.retired, one_of({"teach", "drop"})),
      CODISTILL_KEY(codistill.fixed_teachers, text()),
      CODISTILL_KEY(codistill.teacher_precision, one_of({"same", "float32", "bf16"})),
      CODISTILL_KEY(codistill.teacher_weights, one_of({"float32", "bf16"})),
      CODISTILL_KEY(codistill.share_teachers, one_of({"auto", "off"})),
      CODISTILL_KEY(codistill.share_dir, text()),
      CODISTILL_KEY(codistill.gate.enabled, any()),
      CODISTILL_KEY(codistill.gate.probe, ge(0)),
      CODISTILL_KEY(codistill.gate.max_ratio, ge(0)),
      CODISTILL_KEY(codistill.gate.max_loss, ge(0)),
      CODISTILL_KEY(codistill.gate.accept_below, ge(0)),
  };
}

std::vector<Field> make_config_keys() {
  std::vector<Field> keys = make_run_and_data_keys();
  for (auto& f : make_model_keys()) keys.push_back(f);
  // Model keys of the config file but not of the architecture (model_fields()).
  keys.push_back(CODISTILL_KEY(model.init_from, any()));
  keys.push_back(CODISTILL_KEY(model.memory_format, one_of({"auto", "nchw", "nhwc"})));
  keys.push_back(CODISTILL_KEY(model.attention, one_of({"materialized", "flash"})));
  for (auto& f : make_training_keys()) keys.push_back(f);
  return keys;
}

std::vector<Field> make_model_schema() {
  std::vector<Field> keys = make_model_keys();
  // Derived from the data when training; stored with a checkpoint's model. classes may be
  // 0 and input_shape empty for a model section that was never resolved.
  keys.push_back(CODISTILL_KEY(model.input_shape, ge(1)));
  keys.push_back(CODISTILL_KEY(model.classes, ge(0)));
  return keys;
}

#undef CODISTILL_KEY

}  // namespace


const std::vector<Field>& config_fields() {
  static const std::vector<Field> fields = make_config_keys();
  return fields;
}

const std::vector<Field>& model_fields() {
  static const std::vector<Field> fields = make_model_schema();
  return fields;
}

}  // namespace codistill::config_detail
