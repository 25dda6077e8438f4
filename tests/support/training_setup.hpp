#pragma once
// Set-up shared by the tests that train small models (tests/codistill/train/test_step.cpp,
// test_mixed_precision.cpp, tests/codistill/models/test_gpt_model.cpp): synthetic image
// data, small mlp and gpt configs, a forward-only teacher, the distillation loss weights
// they train with, a period-11 token stream, and the parameters read back as floats.
// Each test keeps its own sizes and seeds: only the construction is shared here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/data/synthetic.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"

namespace codistill::test {

// The synthetic Gaussian-mixture data set (data.kind synthetic) with these sizes.
inline data::Splits synthetic_splits(std::int64_t train, std::int64_t test, int classes,
                                     std::vector<std::int64_t> shape) {
  DataConfig dc;
  dc.kind = "synthetic";
  dc.synthetic_train = train;
  dc.synthetic_test = test;
  dc.synthetic_classes = classes;
  dc.synthetic_shape = std::move(shape);
  return data::make_synthetic(dc);
}

inline ModelConfig mlp_config(std::vector<std::int64_t> hidden, std::vector<std::int64_t> input_shape,
                              std::int64_t classes, double dropout = 0.0) {
  ModelConfig mc;
  mc.kind = "mlp";
  mc.hidden = std::move(hidden);
  mc.dropout = dropout;
  mc.input_shape = std::move(input_shape);
  mc.classes = classes;
  return mc;
}

// A gpt small enough to train in seconds on one CPU thread.
inline ModelConfig tiny_gpt(std::int64_t blocks = 2, std::int64_t d = 32, std::int64_t heads = 2,
                            std::int64_t T = 16, std::int64_t V = 64) {
  ModelConfig c;
  c.kind = "gpt";
  c.blocks = blocks, c.d_model = d, c.heads = heads, c.seq_len = T, c.vocab_size = V;
  return c;
}

// `t` becomes a forward-only teacher: the model of `config` initialized from `seed`, moved
// to `device` (on CUDA, its own queue) with `options` (e.g. its compute precision).
inline void make_teacher(Teacher& t, const ModelConfig& config, std::uint64_t seed, kernels::Device device,
                         kernels::QueueOptions options = {}) {
  Rng rng(seed);
  t.model = build_model(config, rng);
  t.model.drop_grads();
  options.frozen_params = true;  // as TeacherPool makes them: written once, never trained
  t.model.to_device(device, options);
}

// The loss weights the step tests train with: temperature 2, distillation 0.7, hard 0.5.
inline kernels::DistillLossParams distill_params() {
  kernels::DistillLossParams loss;
  loss.temperature = 2.0;
  loss.weight = 0.7;
  loss.hard_weight = 0.5;
  return loss;
}

// Every parameter's values, in parameter order, copied to the host.
inline std::vector<float> flat_params(Model& m) {
  m.synchronize();
  std::vector<float> out;
  for (auto& p : m.params()) {
    const kernels::Tensor host = p.value->to(kernels::Device::cpu());
    out.insert(out.end(), host.data<float>(), host.data<float>() + host.numel());
  }
  return out;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// A period-11 stream over 11 distinct tokens of a vocabulary of V: each token determines the
// next one, so a tiny language model can learn it to near zero loss. Each batch row starts
// at a random offset drawn from `seed`'s generator.
class PeriodStream {
 public:
  explicit PeriodStream(std::int64_t V, std::uint64_t seed = 17) : rng_(seed) {
    for (int i = 0; i < 11; ++i) period_.push_back(static_cast<std::int32_t>((i * 37 + 5) % V));
  }

  // The next batch: ids [B, T] and, for each, the token that follows it (labels [B*T]).
  void next(std::int32_t* ids, std::int32_t* labels, std::int64_t B, std::int64_t T) {
    for (std::int64_t b = 0; b < B; ++b) {
      const auto off = static_cast<std::int64_t>(rng_.below(11));
      for (std::int64_t t = 0; t < T; ++t) {
        ids[b * T + t] = period_[static_cast<std::size_t>((off + t) % 11)];
        labels[b * T + t] = period_[static_cast<std::size_t>((off + t + 1) % 11)];
      }
    }
  }

 private:
  std::vector<std::int32_t> period_;
  Rng rng_;
};

}  // namespace codistill::test
