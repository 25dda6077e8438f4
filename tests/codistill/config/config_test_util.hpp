#pragma once
// Helpers shared by the config tests: a temp folder, loading YAML text through a real
// file, catching the expected ConfigError, and a config that sets every key.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "codistill/config/config_loader.hpp"

namespace codistill::test {

namespace fs = std::filesystem;

// A fresh folder per test case, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("codistill-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

inline Config load_text(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  TempDir dir;
  return load_config(dir.write("test.yaml", yaml), overrides);
}

// The ConfigError that loading `yaml` throws; fails the test when there is none.
inline ConfigError error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_text(yaml, overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError for:\n" << yaml);
  throw std::logic_error("unreachable");
}

// "a.b.c", "1" -> "a:\n  b:\n    c: 1\n": the key sits on line (number of components).
inline std::string nested(const std::string& path, const std::string& value) {
  std::vector<std::string> parts;
  std::istringstream in(path);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += std::string(2 * i, ' ') + parts[i] + (i + 1 < parts.size() ? ":\n" : ": " + value + "\n");
  return out;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every key set to a value other than its default (and consistent across keys).
inline const char* const kFullConfig = R"(run:
  name: exp1
  dir: /tmp/runs/exp1
  seed: 42
  worker: 1
  workers: 3
  threads: 4
  retire_at: 7000
group:
  kind: mpi
  timeout_s: 12.5
  bucket_mb: 4
  sync_batchnorm: true
device: cuda:1
data:
  kind: synthetic
  path: /data/x
  layout: nchw
  classes: 12
  train: "t_*.bin"
  valid: "v_*.bin"
  token_dtype: uint32
  train_images: a.gz
  train_labels: b.gz
  test_images: c.gz
  test_labels: d.gz
  batch_size: 64
  shard: same
  normalize: unit
  train_limit: 1000
  test_limit: 500
  context: 64
  synthetic_train: 4096
  synthetic_test: 1024
  synthetic_classes: 5
  synthetic_shape: [3, 4, 4]
  synthetic_noise: 0.5
  synthetic_seed: 99
  augment:
    crop_padding: 4
    flip: true
  prefetch: false
model:
  kind: layers
  hidden:
    - 512
  channels: [8, 16, 32]
  kernel_size: 3
  pool: 1
  blocks: 3
  activation: gelu
  gelu: tanh
  dropout: 0.25
  init: xavier_uniform
  layers:
    - flatten: {}
    - linear: {out: 5}
  vocab_size: 100
  seq_len: 32
  d_model: 64
  heads: 8
  mlp_ratio: 2
  tie_embeddings: true
  init_from: runs/pretrained/worker-000
  memory_format: nchw
  attention: flash
optimizer:
  kind: adamw
  lr: 0.001
  momentum: 0.5
  nesterov: true
  weight_decay: 0.01
  beta1: 0.8
  beta2: 0.99
  eps: 1e-6
  clip_grad_norm: 1.0
  decay: matrices
  schedule:
    kind: cosine
    warmup_steps: 100
    step_size: 200
    gamma: 0.5
    min_lr: 1.0e-5
    half_cycle_steps: 300
    cycle_mode: triangular2
    restart_steps: 400
    restart_mult: 2
train:
  steps: 5000
  micro_batches: 4
  eval_every: 250
  log_every: 10
  eval_batch_size: 500
  allow_tf32: true
  fused_head: true
  precision: bf16
  recompute: blocks
  memory_limit: 12GiB
checkpoint:
  every: 100
  keep: 5
  async: false
  on_busy: skip
  teacher_dtype: bf16
  teacher_every: 2
codistill:
  enabled: true
  burn_in: 200
  reload_every: 200
  weight: 0.5
  hard_weight: 0.75
  temperature: 2.0
  teachers: 1
  max_staleness: 1000
  mode: sync
  sync_timeout_s: 30
  sync_quorum: 2
  retired: drop
  fixed_teachers: [runs/big, "a b/worker-001"]
  teacher_precision: float32
  teacher_weights: bf16
  share_teachers: "off"
  share_dir: /run/shm/codistill
  gate:
    enabled: false
    probe: 64
    max_ratio: 3.0
    max_loss: 5.0
    accept_below: 0.2
)";

}  // namespace codistill::test
