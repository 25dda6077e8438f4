#pragma once
// The config mapped onto the data layer's option structs where they take more than the data
// section (the run's seed and worker): the config layer's side of the one-way ground
// (DESIGN.md section 2), so that data/ never sees the whole config.
#include "codistill/config/config.hpp"
#include "codistill/data/augment.hpp"
#include "codistill/data/sampler.hpp"

namespace codistill::data {

// From data.augment.*, run.seed and run.worker. Padding is raw value 0 (black, the
// background of MNIST-like images), so `fill` is 0 mapped through the training split's
// normalization: (0 - shift) / scale.
AugmentOptions augment_options(const Config& cfg, const Normalization& normalization);

// From data.batch_size, data.shard, run.seed, run.worker and run.workers.
SamplerOptions sampler_options(const Config& cfg);

}  // namespace codistill::data
