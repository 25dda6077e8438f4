#include "codistill/data/feed/batch_source.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace codistill {

ImageBatchSource::ImageBatchSource(const data::Dataset& train, data::BatchSampler& sampler,
                                   data::AugmentOptions augment, bool prefetch, RankSlice slice)
    : train_(train), sampler_(sampler), loader_(train, augment, prefetch, slice) {}

BatchLayout ImageBatchSource::layout(std::int64_t rows) const {
  BatchLayout l;
  l.input = train_.example_shape();
  l.input.insert(l.input.begin(), rows);
  l.input_dtype = kernels::DType::f32;
  l.labels = rows;
  l.classes = train_.classes;
  return l;
}

void ImageBatchSource::load(std::int64_t step, HostBatch& into, HostBatch* next) {
  loader_.load(step, sampler_, into, next);
}

SourceState ImageBatchSource::checkpoint_state() const {
  const data::SamplerPosition pos = sampler_.position();
  return {{"position", {pos.epoch, pos.cursor}}, {"shard_size", {sampler_.shard_size()}}};
}

void ImageBatchSource::restore(const SourceStateReader& read) {
  const std::int64_t shard = read("shard_size", 1)[0];
  if (shard != sampler_.shard_size())
    throw std::runtime_error("checkpoint was taken with a data shard of " + std::to_string(shard) +
                             " examples, this run's shard has " + std::to_string(sampler_.shard_size()) +
                             " (data, shard mode or worker count changed)");
  const std::vector<std::int64_t> pos = read("position", 2);
  sampler_.set_position({pos[0], pos[1]});
}

std::string ImageBatchSource::describe() const {
  return fmt::format("{} of {} training examples ({} mode)", sampler_.shard_size(), train_.size(),
                     data::shard_mode_name(sampler_.options().mode));
}

}  // namespace codistill
