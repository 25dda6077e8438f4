// Strict config loading: defaults, every section, errors with key path and line,
// YAML syntax errors, missing files, and the shipped configs/*.yaml.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "config_test_util.hpp"

namespace fs = std::filesystem;
using namespace codistill;
using namespace codistill::test;

TEST_CASE("an empty config takes every default", "[config]") {
  for (const char* text : {"", "{}", "# only a comment\n", "run:\ndata: {}\n"}) {
    INFO("config text: '" << text << "'");
    const Config c = load_text(text);
    CHECK(config_differences(c, Config{}).empty());
    CHECK(c.optimizer.lr == 0.05);
    CHECK(c.model.hidden == std::vector<std::int64_t>{256, 256});
    CHECK(c.device == "cpu");
  }
}

TEST_CASE("every key of every section is parsed", "[config]") {
  const Config c = load_text(kFullConfig);
  // All keys differ from the defaults, so each one reached some member.
  CHECK(config_differences(c, Config{}) == config_keys());
  CHECK(c.group.kind == "mpi");
  CHECK(c.group.timeout_s == 12.5);
  CHECK(c.group.bucket_mb == 4);
  CHECK(c.run.name == "exp1");
  CHECK(c.run.seed == 42u);
  CHECK(c.run.worker == 1);
  CHECK(c.run.workers == 3);
  CHECK(c.run.retire_at == 7000);
  CHECK(c.device == "cuda:1");
  CHECK(c.data.kind == "synthetic");
  CHECK(c.data.test_labels == "d.gz");
  CHECK(c.data.synthetic_shape == std::vector<std::int64_t>{3, 4, 4});
  CHECK(c.data.synthetic_seed == 99u);
  CHECK(c.data.augment.crop_padding == 4);
  CHECK(c.data.augment.flip);
  CHECK(c.data.prefetch == "false");
  CHECK(c.model.init_from == "runs/pretrained/worker-000");
  CHECK(c.model.memory_format == "nchw");
  CHECK(c.model.attention == "flash");
  CHECK(c.model.hidden == std::vector<std::int64_t>{512});
  CHECK(c.model.channels == std::vector<std::int64_t>{8, 16, 32});
  CHECK(c.model.dropout == 0.25);
  CHECK(c.optimizer.kind == "adamw");
  CHECK(c.optimizer.nesterov);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.schedule.kind == "cosine");
  CHECK(c.optimizer.schedule.min_lr == 1e-5);
  CHECK(c.optimizer.schedule.half_cycle_steps == 300);
  CHECK(c.optimizer.schedule.cycle_mode == "triangular2");
  CHECK(c.optimizer.schedule.restart_steps == 400);
  CHECK(c.optimizer.schedule.restart_mult == 2);
  CHECK(c.train.micro_batches == 4);
  CHECK(c.train.eval_batch_size == 500);
  CHECK(c.train.allow_tf32);
  CHECK(c.train.fused_head);
  CHECK(c.train.precision == "bf16");
  CHECK(c.train.recompute == "blocks");
  CHECK(c.codistill.teacher_precision == "float32");
  CHECK(c.codistill.teacher_weights == "bf16");
  CHECK(c.codistill.share_teachers == "off");
  CHECK(c.codistill.share_dir == "/run/shm/codistill");
  CHECK_FALSE(c.checkpoint.async);
  CHECK(c.checkpoint.on_busy == "skip");
  CHECK(c.checkpoint.teacher_dtype == "bf16");
  CHECK(c.checkpoint.teacher_every == 2);
  CHECK(c.codistill.enabled);
  CHECK(c.codistill.hard_weight == 0.75);
  CHECK(c.codistill.mode == "sync");
  CHECK(c.codistill.sync_timeout_s == 30.0);
  CHECK(c.codistill.sync_quorum == 2);
  CHECK(c.codistill.retired == "drop");
  CHECK(c.codistill.fixed_teachers == std::vector<std::string>{"runs/big", "a b/worker-001"});
}

TEST_CASE("an unknown key names its path and line and suggests a close key", "[config]") {
  TempDir dir;
  const std::string file = dir.write("x.yaml", "run:\n  seed: 3\noptimizer:\n  kind: sgd\n  lrr: 0.1\n");
  try {
    load_config(file);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "optimizer.lrr");
    CHECK(e.file() == file);
    CHECK(e.line() == 5);
    CHECK(std::string(e.what()).rfind(file + ":5: optimizer.lrr: unknown key (did you mean 'lr'?)", 0) == 0);
    CHECK(contains(e.what(), "valid keys of optimizer: kind, lr, momentum"));
  }
  ConfigError nested_error = error_of("optimizer:\n  schedule:\n    knd: step\n");
  CHECK(nested_error.key_path() == "optimizer.schedule.knd");
  CHECK(nested_error.line() == 3);
  CHECK(contains(nested_error.what(), "did you mean 'kind'?"));
  ConfigError top = error_of("device: cpu\nmodle:\n  kind: mlp\n");
  CHECK(top.key_path() == "modle");
  CHECK(top.line() == 2);
  CHECK(contains(top.what(), "did you mean 'model'?"));
  ConfigError far = error_of("data:\n  zzzzzzzz: 1\n");
  CHECK_FALSE(contains(far.what(), "did you mean"));
  CHECK(contains(far.what(), "batch_size"));
  ConfigError twice = error_of("train:\n  steps: 5\n  steps: 6\n");
  CHECK(twice.key_path() == "train.steps");
  CHECK(twice.line() == 3);
  CHECK(contains(twice.what(), "duplicate key (first given on line 2)"));
}

TEST_CASE("a value of the wrong type is an error at its key's line", "[config]") {
  ConfigError abc = error_of("# header\noptimizer:\n  lr: abc\n");
  CHECK(abc.key_path() == "optimizer.lr");
  CHECK(abc.line() == 3);
  CHECK(abc.detail() == "expected a number > 0, got 'abc'");
  struct Case {
    const char* yaml;
    const char* key;
    const char* says;
  };
  const Case cases[] = {
      {"data:\n  batch_size: 1.5\n", "data.batch_size", "expected an integer >= 1, got '1.5'"},
      {"data:\n  batch_size: 1e3\n", "data.batch_size", "an integer"},
      {"model:\n  dropout: {a: 1}\n", "model.dropout", "got a mapping"},
      {"optimizer:\n  nesterov: yes\n", "optimizer.nesterov", "expected true or false, got 'yes'"},
      {"checkpoint:\n  async: 1\n", "checkpoint.async", "true or false"},
      {"model:\n  hidden: 256\n", "model.hidden", "a list of integers >= 1, got '256'"},
      {"model:\n  hidden: [256, x]\n", "model.hidden", "got '[256, x]'"},
      {"model:\n  hidden: [[1]]\n", "model.hidden", "got a nested list"},
      {"model:\n  kind: [mlp]\n", "model.kind", "got '[mlp]'"},
      {"run: 3\n", "run", "expected a section (a mapping of keys), got '3'"},
      {"run:\n  name:\n", "run.name", "got nothing"},
      {"run:\n  seed: -1\n", "run.seed", "an integer"},
      {"run:\n  workers: 99999999999\n", "run.workers", "an integer >= 1"},
      {"- 1\n- 2\n", "", "expected a mapping of sections at the top level"},
      {"optimizer:\n  lr: .inf\n", "optimizer.lr", "a number > 0"},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    ConfigError e = error_of(c.yaml);
    CHECK(e.key_path() == c.key);
    CHECK(contains(e.detail(), c.says));
  }
  // Integers are decimal: a leading zero is not octal.
  CHECK(load_text("train:\n  steps: 010\n").train.steps == 10);
}

TEST_CASE("a value out of range is an error while the bounds themselves are accepted where allowed", "[config]") {
  const std::pair<const char*, const char*> bad[] = {
      {"optimizer.lr", "0"},
      {"optimizer.lr", "-0.1"},
      {"data.batch_size", "0"},
      {"train.steps", "0"},
      {"model.dropout", "1"},
      {"model.dropout", "-0.1"},
      {"optimizer.momentum", "1"},
      {"codistill.temperature", "0"},
      {"checkpoint.keep", "0"},
      {"run.threads", "0"},
      {"optimizer.beta1", "1"},
      {"optimizer.beta2", "-0.1"},
      {"optimizer.eps", "0"},
      {"run.workers", "0"},
      {"run.worker", "-1"},
      {"data.synthetic_shape", "[1, 8]"},
      {"data.synthetic_classes", "1"},
      {"data.synthetic_classes", "1001"},
      {"model.channels", "[]"},
      {"model.hidden", "[0]"},
      {"optimizer.schedule.step_size", "0"},
      {"optimizer.schedule.gamma", "0"},
      {"optimizer.schedule.half_cycle_steps", "0"},
      {"optimizer.schedule.restart_steps", "0"},
      {"optimizer.schedule.restart_mult", "0"},
      {"train.micro_batches", "0"},
      {"codistill.reload_every", "0"},
      {"train.log_every", "0"},
      {"codistill.weight", "-1"},
      {"data.path", "''"},
      {"data.train_limit", "-1"},
      {"codistill.sync_timeout_s", "0"},
      {"codistill.sync_quorum", "-1"},
      {"codistill.retired", "keep"},
      {"run.retire_at", "-5"},
      {"codistill.fixed_teachers", "[a, '']"},
      {"codistill.fixed_teachers", "a"},
  };

  for (const auto& [key, value] : bad) {
    const std::string yaml = nested(key, value);
    INFO(yaml);
    ConfigError e = error_of(yaml);
    CHECK(e.key_path() == key);
    CHECK(e.line() == static_cast<int>(std::count(yaml.begin(), yaml.end(), '\n')));
  }
  CHECK(error_of(nested("optimizer.lr", "0")).detail() == "expected a number > 0, got '0'");
  CHECK(error_of(nested("model.dropout", "1")).detail() == "expected a number in [0, 1), got '1'");
  CHECK(error_of(nested("data.synthetic_shape", "[1]")).detail() ==
        "expected a list of 3 integers >= 1, got '[1]'");

  const Config edge = load_text(
      "model:\n  dropout: 0\n  hidden: []\noptimizer:\n  momentum: 0\n  beta2: 0.999999\n"
      "train:\n  eval_every: 0\ncheckpoint:\n  every: 0\n");
  CHECK(edge.model.dropout == 0.0);
  CHECK(edge.model.hidden.empty());
  CHECK(edge.optimizer.momentum == 0.0);
  CHECK(edge.checkpoint.every == 0);
}

TEST_CASE("enum-like strings list their valid values", "[config]") {
  ConfigError kind = error_of("data:\n  kind: foo\n");
  CHECK(kind.detail() == "expected one of arrays, fashion-mnist, idx, synthetic, text, tokens, got 'foo'");
  for (const char* key : {"data.shard", "data.normalize", "data.prefetch", "model.kind", "model.activation",
                          "model.init", "optimizer.kind", "optimizer.schedule.kind", "optimizer.schedule.cycle_mode",
                          "checkpoint.on_busy", "codistill.mode", "group.kind"}) {
    INFO(key);
    ConfigError e = error_of(nested(key, "bogus"));
    CHECK(e.key_path() == key);
    CHECK(contains(e.detail(), "expected one of "));
  }
  // data.prefetch was a bool: YAML's true and false still load.
  for (const char* ok : {"auto", "true", "false"}) CHECK(load_text(nested("data.prefetch", ok)).data.prefetch == ok);
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:12"}) CHECK(load_text(nested("device", ok)).device == ok);
  for (const char* no : {"gpu", "CPU", "'cuda:'", "cuda:x", "cuda:-1", "cuda:+1", "cuda:1x"}) {
    INFO(no);
    ConfigError e = error_of(nested("device", no));
    CHECK(e.key_path() == "device");
    CHECK(contains(e.detail(), "one of cpu, cuda, cuda:K"));
  }
}

TEST_CASE("a YAML syntax error reports its line", "[config]") {
  ConfigError bracket = error_of("model:\n  hidden: [1, 2\nrun:\n  seed: 1\n");
  CHECK(bracket.line() == 3);
  CHECK(contains(bracket.what(), "YAML syntax error"));
  CHECK(bracket.key_path().empty());
  ConfigError two = error_of("run:\n  seed: 2\n---\nrun:\n  seed: 3\n");
  CHECK(two.line() == 4);
  CHECK(contains(two.what(), "expected one YAML document, found 2"));
  ConfigError indent = error_of("run:\n  name: a\n   bad: b\n");
  CHECK(indent.line() == 3);
  CHECK(contains(indent.what(), "test.yaml:3: YAML syntax error"));
}

TEST_CASE("a missing or unreadable file is a ConfigError", "[config]") {
  TempDir dir;
  const std::string missing = (dir.path / "nope.yaml").string();
  try {
    load_config(missing);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.file() == missing);
    CHECK(e.line() == 0);
    CHECK(contains(e.what(), "No such file or directory"));
  }
  CHECK_THROWS_AS(load_config(dir.path.string()), ConfigError);
}

TEST_CASE("every shipped config in configs/ loads and round-trips", "[config]") {
  const fs::path folder = fs::path(CODISTILL_SOURCE_DIR) / "configs";
  REQUIRE(fs::is_directory(folder));
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    Config c;
    REQUIRE_NOTHROW(c = load_config(entry.path().string()));
    CHECK(config_differences(load_text(to_yaml(c)), c).empty());
  }
}

TEST_CASE("the group section: defaults and ranges", "[config]") {
  const Config d = load_text("");
  CHECK(d.group.kind == "auto");
  CHECK(d.group.timeout_s == 300);
  CHECK(d.group.bucket_mb == 25);
  CHECK_FALSE(d.group.sync_batchnorm);
  CHECK(load_text("group:\n  sync_batchnorm: false\n").group.sync_batchnorm == false);
  CHECK(load_text("group:\n  sync_batchnorm: true\n").group.sync_batchnorm);
  CHECK(error_of("group:\n  sync_batchnorm: 3\n").key_path() == "group.sync_batchnorm");
  for (const char* key : {"group.timeout_s", "group.bucket_mb"}) {
    INFO(key);
    ConfigError e = error_of(nested(key, "0"));
    CHECK(e.key_path() == key);
    CHECK(e.detail() == "expected a number > 0, got '0'");
  }
  // Mixed precision: the student's and the teachers' GEMM arithmetic, named and listed.
  CHECK(load_text("").train.precision == "float32");
  CHECK(load_text("").codistill.teacher_precision == "same");
  CHECK(load_text(nested("train.precision", "bf16")).train.precision == "bf16");
  CHECK(load_text(nested("codistill.teacher_precision", "bf16")).codistill.teacher_precision == "bf16");
  const ConfigError fp16 = error_of(nested("train.precision", "fp16"));
  CHECK(fp16.key_path() == "train.precision");
  CHECK(fp16.detail() == "expected one of float32, bf16, got 'fp16'");
  const ConfigError tp = error_of(nested("codistill.teacher_precision", "float16"));
  CHECK(tp.key_path() == "codistill.teacher_precision");
  CHECK(tp.detail() == "expected one of same, float32, bf16, got 'float16'");
  // How teachers hold their matrices: float32 unless asked (the products' bf16 is checked
  // against it when a trainer starts: test_training_options).
  CHECK(load_text("").codistill.teacher_weights == "float32");
  CHECK(load_text(nested("codistill.teacher_weights", "bf16")).codistill.teacher_weights == "bf16");
  const ConfigError tw = error_of(nested("codistill.teacher_weights", "fp8"));
  CHECK(tw.key_path() == "codistill.teacher_weights");
  CHECK(tw.detail() == "expected one of float32, bf16, got 'fp8'");
  // Teacher sharing between a group's ranks on a node: on where it can be, unless off.
  CHECK(load_text("").codistill.share_teachers == "auto");
  CHECK(load_text("").codistill.share_dir == "/dev/shm");
  CHECK(load_text(nested("codistill.share_teachers", "off")).codistill.share_teachers == "off");
  const ConfigError st = error_of(nested("codistill.share_teachers", "always"));
  CHECK(st.key_path() == "codistill.share_teachers");
  CHECK(st.detail() == "expected one of auto, off, got 'always'");
  CHECK(error_of(nested("codistill.share_dir", "\"\"")).key_path() == "codistill.share_dir");
  // Activation recomputation: off unless asked, two modes.
  CHECK(load_text("").train.recompute == "none");
  CHECK(load_text(nested("train.recompute", "blocks")).train.recompute == "blocks");
  const ConfigError rc = error_of(nested("train.recompute", "all"));
  CHECK(rc.key_path() == "train.recompute");
  CHECK(rc.detail() == "expected one of none, blocks, got 'all'");
  // nccl is a valid kind, but only with the model on a GPU (it all-reduces GPU memory): a
  // config that leaves device at cpu is refused naming group.kind, before any group is made.
  CHECK(error_of(nested("group.kind", "bogus")).detail() == "expected one of auto, single, mpi, nccl, got 'bogus'");
  const ConfigError cpu_nccl = error_of(nested("group.kind", "nccl"));
  CHECK(cpu_nccl.key_path() == "group.kind");
  CHECK(contains(cpu_nccl.detail(), "expected device cuda or cuda:K with group.kind nccl"));
  CHECK(contains(cpu_nccl.detail(), "got device 'cpu'"));
  for (const char* device : {"cuda", "cuda:1"}) {
    INFO(device);
    const Config c = load_text(nested("group.kind", "nccl") + "device: " + device + "\n");
    CHECK(c.group.kind == "nccl");
    CHECK(c.device == device);
  }
  // The rank count is the launcher's, never a key.
  CHECK(contains(error_of("group:\n  ranks: 2\n").detail(), "unknown key"));
}
