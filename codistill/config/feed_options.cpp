#include "codistill/config/feed_options.hpp"

namespace codistill::data {

AugmentOptions augment_options(const Config& cfg, const Normalization& normalization) {
  AugmentOptions o;
  o.crop_padding = cfg.data.augment.crop_padding;
  o.flip = cfg.data.augment.flip;
  o.fill = static_cast<float>((0.0 - normalization.shift) / normalization.scale);
  o.seed = cfg.run.seed;
  o.worker = cfg.run.worker;
  return o;
}

SamplerOptions sampler_options(const Config& cfg) {
  SamplerOptions o;
  o.batch_size = cfg.data.batch_size;
  o.mode = parse_shard_mode(cfg.data.shard);
  o.seed = cfg.run.seed;
  o.worker = cfg.run.worker;
  o.workers = cfg.run.workers;
  return o;
}

}  // namespace codistill::data
