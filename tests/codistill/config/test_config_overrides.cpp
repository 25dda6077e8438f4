// --set overrides, checks across keys, and round trips through to_yaml and model_yaml.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "config_test_util.hpp"

using namespace codistill;
using namespace codistill::test;

TEST_CASE("overrides set scalars and lists and nested keys", "[config]") {
  const std::string file = "optimizer:\n  lr: 0.1\nmodel:\n  hidden: [64]\n";
  const Config c = load_text(file, {"optimizer.lr=0.5", "model.hidden=[512,512]", "optimizer.schedule.kind=cosine",
                                    "device=cuda:1", "run.workers=4", "run.worker=3", " run.name = my run",
                                    "optimizer.lr=0.25"});
  CHECK(c.optimizer.lr == 0.25);  // the later override wins
  CHECK(c.model.hidden == std::vector<std::int64_t>{512, 512});
  CHECK(c.optimizer.schedule.kind == "cosine");
  CHECK(c.device == "cuda:1");
  CHECK(c.run.worker == 3);
  CHECK(c.run.workers == 4);
  CHECK(c.run.name == "my run");
  const Config direct = apply_overrides(Config{}, {"train.steps=7"});
  CHECK(direct.train.steps == 7);
}

TEST_CASE("a bad --set names the key and its source", "[config]") {
  ConfigError unknown = error_of("", {"optimizer.lrr=1"});
  CHECK(unknown.key_path() == "optimizer.lrr");
  CHECK(unknown.file() == "--set");
  CHECK(unknown.line() == 0);
  CHECK(contains(unknown.what(), "did you mean 'lr'?"));
  CHECK(contains(unknown.what(), "valid keys of optimizer: kind, lr, momentum, nesterov"));
  CHECK(contains(error_of("", {"optimzer.lr=1"}).what(), "did you mean 'optimizer'?"));
  CHECK(contains(error_of("", {"optimizer.lr.x=1"}).what(), "optimizer.lr is a key, not a section"));
  CHECK(contains(error_of("", {"optimizer.schedule=3"}).what(), "is a section, not a key"));
  ConfigError malformed = error_of("", {"optimizer.lr"});
  CHECK(malformed.file() == "--set");
  CHECK(contains(malformed.what(), "expected key.path=value, got 'optimizer.lr'"));
  CHECK(contains(error_of("", {"=3"}).what(), "expected key.path=value"));
  CHECK(std::string(error_of("", {"optimizer.lr=-1"}).what()) ==
        "--set: optimizer.lr: expected a number > 0, got '-1'");
  CHECK(contains(error_of("", {"model.hidden=[1,"}).what(), "cannot parse value '[1,'"));
  CHECK_THROWS_AS(apply_overrides(Config{}, {"nope=1"}), ConfigError);
}

TEST_CASE("worker < workers is checked after the overrides", "[config]") {
  const std::string file = "run:\n  worker: 3\n";
  ConfigError from_file = error_of(file);
  CHECK(from_file.key_path() == "run.worker");
  CHECK(from_file.line() == 2);
  CHECK(from_file.detail() == "expected an integer in [0, run.workers) = [0, 1), got '3'");
  CHECK(load_text(file, {"run.workers=4"}).run.worker == 3);
  ConfigError from_set = error_of(file, {"run.worker=5", "run.workers=4"});
  CHECK(from_set.file() == "--set");
  CHECK(from_set.key_path() == "run.worker");
}

TEST_CASE("checks across keys", "[config]") {
  ConfigError cosine = error_of("optimizer:\n  lr: 0.01\n  schedule:\n    kind: cosine\n    min_lr: 0.1\n");
  CHECK(cosine.key_path() == "optimizer.schedule.min_lr");
  CHECK(cosine.line() == 5);
  CHECK(load_text("optimizer:\n  lr: 0.01\n  schedule:\n    min_lr: 0.1\n").optimizer.schedule.min_lr == 0.1);
  for (const char* kind : {"exponential", "cyclical", "sgdr"}) {  // min_lr is their floor too
    INFO(kind);
    ConfigError floor = error_of(std::string("optimizer:\n  lr: 0.01\n  schedule:\n    kind: ") + kind +
                                 "\n    min_lr: 0.1\n");
    CHECK(floor.key_path() == "optimizer.schedule.min_lr");
    CHECK(floor.line() == 5);
    CHECK(contains(floor.detail(), std::string("for the ") + kind + " schedule"));
  }
  CHECK(load_text("optimizer:\n  schedule:\n    kind: step\n    min_lr: 0.1\n").optimizer.schedule.min_lr == 0.1);
  // Micro-batches must split the batch evenly; the key that was set is blamed.
  ConfigError micro = error_of("data:\n  batch_size: 30\ntrain:\n  micro_batches: 4\n");
  CHECK(micro.key_path() == "train.micro_batches");
  CHECK(micro.line() == 4);
  CHECK(micro.detail() ==
        "expected a divisor of data.batch_size = 30 (micro-batches are equal parts of a step's batch), got '4'");
  ConfigError micro_set = error_of("data:\n  batch_size: 30\n", {"train.micro_batches=7"});
  CHECK(micro_set.file() == "--set");
  CHECK(micro_set.key_path() == "train.micro_batches");
  CHECK(load_text("data:\n  batch_size: 30\ntrain:\n  micro_batches: 5\n").train.micro_batches == 5);
  CHECK(load_text("train:\n  micro_batches: 128\n").train.micro_batches == 128);  // one row each
  CHECK(error_of("codistill:\n  hard_weight: 0\n").key_path() == "codistill.hard_weight");
  CHECK(load_text("codistill:\n  enabled: true\n  hard_weight: 0\n").codistill.hard_weight == 0.0);
  ConfigError sync = error_of("codistill:\n  enabled: true\n  mode: sync\n  reload_every: 50\n");
  CHECK(sync.key_path() == "codistill.reload_every");
  CHECK(sync.line() == 4);
  ConfigError sync_defaults = error_of("codistill:\n  enabled: true\n  mode: sync\n");
  CHECK(sync_defaults.key_path() == "codistill.mode");  // the only key of the three that was set
  CHECK(sync_defaults.line() == 3);
  CHECK(load_text("codistill:\n  enabled: true\n  mode: sync\n  reload_every: 2000\n").codistill.mode == "sync");
}

TEST_CASE("to_yaml gives back an equal config", "[config]") {
  const Config defaults;
  const std::string text = to_yaml(defaults);
  CHECK(contains(text, "run:\n  name: run\n"));
  CHECK(contains(text, "\ndevice: cpu\n"));
  CHECK(contains(text, "  lr: 0.05\n"));
  CHECK(contains(text, "  eps: 1.0e-08\n"));
  CHECK(contains(text, "  schedule:\n    kind: constant\n"));
  CHECK_FALSE(contains(text, "input_shape"));
  CHECK(config_differences(load_text(text), defaults).empty());

  Config full = load_text(kFullConfig);
  full.run.name = "yes";  // would read back as a bool if printed plain
  full.run.dir = "/tmp/a dir/#x: \"q\" \\ end";
  full.data.path = "123";
  full.data.train_images = "tab\there";
  full.optimizer.lr = 1.0 / 3.0;
  full.codistill.weight = 1e300;
  full.data.synthetic_seed = 18446744073709551615ull;
  full.model.input_shape = {1, 28, 28};  // not a config key: not printed, not compared
  const Config back = load_text(to_yaml(full));
  CHECK(config_differences(back, full).empty());
  CHECK(back.run.name == "yes");
  CHECK(back.run.dir == full.run.dir);
  CHECK(back.optimizer.lr == 1.0 / 3.0);
  CHECK(back.data.synthetic_seed == 18446744073709551615ull);
  CHECK(config_differences(back, Config{}).size() == config_keys().size());
}

TEST_CASE("model_yaml carries the model with its shape and classes", "[config]") {
  ModelConfig m;
  m.kind = "cnn";
  m.channels = {8, 16};
  m.dropout = 0.1;
  m.input_shape = {1, 28, 28};
  m.classes = 10;
  m.init_from = "runs/pretrained";  // how the run started, not the architecture
  const std::string text = model_yaml(m);
  CHECK(text.rfind("kind: cnn\n", 0) == 0);
  CHECK_FALSE(contains(text, "init_from"));
  CHECK(contains(text, "\ninput_shape: [1, 28, 28]\nclasses: 10\n"));
  const ModelConfig back = model_from_yaml(text);
  CHECK(back.kind == "cnn");
  CHECK(back.channels == m.channels);
  CHECK(back.hidden == m.hidden);
  CHECK(back.dropout == 0.1);
  CHECK(back.input_shape == m.input_shape);
  CHECK(back.classes == 10);
  CHECK(back.init_from.empty());
  ModelConfig wider = back;
  wider.hidden = {64};
  CHECK(model_differences(back, wider) == std::vector<std::string>{"model.hidden [256, 256] vs [64]"});
  CHECK(model_differences(back, back).empty());
  try {
    model_from_yaml("kind: mlp\nclases: 3\n", "ckpt.h5");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "model.clases");
    CHECK(e.line() == 2);
    CHECK(contains(e.what(), "did you mean 'classes'?"));
  }
}

