#pragma once
// The trainer Config that the engine tests run (tests/codistill/train/test_training.cpp,
// test_training_options.cpp, test_training_cuda.cpp, test_checkpointing.cpp): synthetic
// 1x8x8 images and a small mlp or cnn (one hidden layer, one 4-channel 3x3 block). Each test
// passes its own sizes and seed and sets what it checks on the Config it gets back.
#include <cstdint>
#include <string>

#include "codistill/config/config.hpp"

namespace codistill::test {

struct SmallRun {
  std::string model = "mlp";  // mlp or cnn
  std::uint64_t seed = 11;
  int threads = 2;
  int batch = 32;
  std::int64_t train_examples = 1024, test_examples = 256;
  std::int64_t hidden = 32;  // the one hidden linear layer's width
  double dropout = 0.0;
  std::int64_t steps = 60;
  std::int64_t log_every = 20;
};

inline Config small_run_config(const std::string& run_dir, const SmallRun& s) {
  Config c;
  c.run.dir = run_dir;
  c.run.seed = s.seed;
  c.run.threads = s.threads;
  c.data.kind = "synthetic";
  c.data.batch_size = s.batch;
  c.data.synthetic_train = s.train_examples;
  c.data.synthetic_test = s.test_examples;
  c.data.synthetic_shape = {1, 8, 8};
  c.model.kind = s.model;
  c.model.hidden = {s.hidden};
  c.model.channels = {4};
  c.model.kernel_size = 3;
  c.model.dropout = s.dropout;
  c.train.steps = s.steps;
  c.train.eval_every = 0;
  c.train.log_every = s.log_every;
  return c;
}

}  // namespace codistill::test
