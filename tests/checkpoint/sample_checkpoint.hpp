#pragma once
// A small checkpoint with every kind of entry the format holds, for the checkpoint tests:
// float32 params and optimizer slots (with shapes whose chunks need padding), and state
// of all four element types, a scalar and an empty array among them.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace codistill::test {

struct SampleCheckpoint {
  std::vector<float> w1, b1, conv, m_w1, m_b1;
  std::vector<std::uint64_t> rng{0x0123456789abcdefULL, 42, ~0ULL, 7};
  std::vector<std::int64_t> epoch_cursor{3, 1234};
  std::vector<std::int64_t> opt_step{1000};
  std::vector<double> schedule{0.5, 1e-300, -2.25};
  std::vector<std::int64_t> nothing;
  checkpoint::CheckpointMeta meta;

  explicit SampleCheckpoint(std::uint64_t seed = 1, std::int64_t step = 100) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& v, std::size_t n) {
      v.resize(n);
      for (auto& x : v) x = normal(gen);
    };
    fill(w1, 65 * 301);
    fill(b1, 65);
    fill(conv, 4 * 3 * 5 * 5);
    fill(m_w1, 65 * 301);
    fill(m_b1, 65);
    meta.worker = 2;
    meta.step = step;
    meta.examples_seen = step * 128;
    meta.created_unix = 1700000000;
    meta.model = "kind: mlp\nhidden: [301]\n";
    meta.model_fingerprint = "fp-0123456789abcdef";
    meta.config = "run:\n  seed: 1\nmodel:\n  kind: mlp\n";
    meta.teacher_steps = {{0, step - 50}, {1, step - 20}};
  }

  checkpoint::CheckpointView view() const {
    using checkpoint::TensorRef;
    checkpoint::CheckpointView v;
    v.meta = meta;
    v.params = {TensorRef::of<float>("fc1/weight", {65, 301}, w1.data()),
                TensorRef::of<float>("fc1/bias", {65}, b1.data()),
                TensorRef::of<float>("conv/weight", {4, 3, 5, 5}, conv.data())};
    v.optimizer = {TensorRef::of<float>("fc1/weight/momentum", {65, 301}, m_w1.data()),
                   TensorRef::of<float>("fc1/bias/momentum", {65}, m_b1.data())};
    v.state = {TensorRef::of("rng/model_init", rng), TensorRef::of("sampler/position", epoch_cursor),
               TensorRef::of<std::int64_t>("optimizer/step", {}, opt_step.data()),
               TensorRef::of("schedule/position", schedule), TensorRef::of("empty", nothing)};
    return v;
  }
};

// Small chunks so that even this small checkpoint has several, and padded edge chunks.
inline checkpoint::WriteOptions small_chunks() {
  checkpoint::WriteOptions o;
  o.chunk_elements = 1000;
  return o;
}

inline bool same_bytes(const checkpoint::TensorValue& a, const checkpoint::TensorRef& b) {
  return a.name == b.name && a.shape == b.shape && a.type == b.type && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data, a.nbytes()) == 0);
}

}  // namespace codistill::test
