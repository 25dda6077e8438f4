#pragma once
// Checkpoints of briefly trained tiny models for the codistill-inspect tests, written
// through the trainer's own snapshot code (make_state_view + checkpoint::write), and
// MNIST-format files to evaluate them on.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "codistill/config/feed_options.hpp"
#include "checkpoint/edit.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/loss/distill_loss.hpp"

namespace codistill::test {

namespace fs = std::filesystem;
using Tensor = codistill::kernels::Tensor;

// A synthetic 10-class problem on 1x8x8 inputs and an MLP with these hidden widths.
inline codistill::Config synthetic_config(std::vector<std::int64_t> hidden = {32}) {
  codistill::Config c;
  c.data.kind = "synthetic";
  c.data.synthetic_train = 2048;
  c.data.synthetic_test = 512;
  c.data.synthetic_shape = {1, 8, 8};
  c.data.batch_size = 64;
  c.model.hidden = std::move(hidden);
  c.train.eval_batch_size = 200;  // 512 = 200 + 200 + 112: a short last batch too
  return c;
}

// A worker trained for a few steps on the config's data, as the trainer would (until the
// trainer publishes checkpoints itself, the tests write them through the same snapshot
// code): its model, optimizer and sampler are what a checkpoint holds.
struct TinyWorker {
  codistill::Config cfg;
  codistill::data::Splits splits;
  codistill::ModelConfig mc;
  codistill::Model model;
  std::unique_ptr<codistill::Optimizer> optimizer;
  std::unique_ptr<codistill::data::BatchSampler> sampler;
  std::int64_t step = 0;

  TinyWorker(codistill::Config c, int worker) : cfg(std::move(c)) {
    cfg.run.worker = worker;
    cfg.run.workers = 2;
    splits = codistill::data::load_dataset(cfg.data);
    mc = cfg.model;
    mc.input_shape = splits.train.example_shape();
    mc.classes = splits.train.classes;
    codistill::Rng init(cfg.run.seed, static_cast<std::uint64_t>(worker), 1);
    model = codistill::build_model(mc, init);
    optimizer = codistill::make_optimizer(cfg.optimizer, model);
    sampler = std::make_unique<codistill::data::BatchSampler>(splits.train, codistill::data::sampler_options(cfg));
  }
  TinyWorker(const TinyWorker&) = delete;  // the sampler points into splits

  void train(int steps) {
    const std::int64_t B = cfg.data.batch_size, V = mc.classes;
    codistill::kernels::Shape shape = splits.train.example_shape();
    shape.insert(shape.begin(), B);
    Tensor x = Tensor::empty(shape), grad = Tensor::empty({B, V});
    std::vector<std::int32_t> labels;
    for (int i = 0; i < steps; ++i, ++step) {
      sampler->next_batch(x, labels);
      model.zero_grad();
      Tensor logits = model.forward(x, true);
      codistill::kernels::cpu::distill_loss<float>(logits.data<float>(), nullptr, 0, labels.data(),
                                                   grad.data<float>(), B, V, {});
      model.backward(grad);
      optimizer->step(cfg.optimizer.lr);
    }
  }

  std::string write(const fs::path& path) {
    fs::create_directories(path.parent_path());
    codistill::WorkerState w;
    w.model = &model;
    w.optimizer = optimizer.get();
    codistill::ImageBatchSource source(splits.train, *sampler);
    w.source = &source;
    w.normalization = splits.train.normalization;
    w.worker = cfg.run.worker;
    w.step = step;
    w.examples_seen = step * cfg.data.batch_size;
    w.model_yaml = codistill::model_yaml(mc);
    w.config_yaml = codistill::to_yaml(cfg);
    codistill::checkpoint::WriteOptions o;
    o.fsync = false;    // scratch files
    o.chunk_elements = 256;  // several chunks per weight, so one can be damaged alone
    codistill::checkpoint::write(path.string(), codistill::make_state_view(w).view, o);
    return path.string();
  }
};

inline void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Damages the middle chunk of fc1/weight: a fletcher32 mismatch names that dataset.
inline void corrupt(const std::string& path) {
  auto chunks = codistill::checkpoint::stored_extents(path, "/params/fc1/weight");
  REQUIRE(chunks.size() > 1);
  const auto& c = chunks[chunks.size() / 2];
  flip_byte(path, c.file_offset + c.bytes / 2);
}

// An uncompressed IDX file: magic (0, 0, 0x08, rank), big-endian dimensions, bytes.
inline void write_idx(const fs::path& path, const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  auto be32 = [&](std::uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
    out.write(b, 4);
  };
  be32(0x0800u | static_cast<std::uint32_t>(dims.size()));
  for (auto d : dims) be32(d);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// n 4x4 images of 3 classes: class k has a bright row k on a dim, noisy background.
inline void write_idx_split(const fs::path& dir, const std::string& prefix, std::uint32_t n, std::uint32_t seed) {
  codistill::Rng rng(seed);
  std::vector<std::uint8_t> pixels, labels;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::uint8_t>(rng.below(3));
    labels.push_back(k);
    for (int p = 0; p < 16; ++p)
      pixels.push_back(static_cast<std::uint8_t>((p / 4 == k ? 150 : 0) + rng.below(100)));
  }
  write_idx(dir / (prefix + "-images"), {n, 4, 4}, pixels);
  write_idx(dir / (prefix + "-labels"), {n}, labels);
}

}  // namespace codistill::test
