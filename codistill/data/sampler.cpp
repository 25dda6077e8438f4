#include "codistill/data/sampler.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "codistill/util/rng.hpp"

namespace codistill::data {

namespace {

// Stream ids for Rng(seed, stream, b). A tag in the high bits keeps them apart from
// streams other parts of the program derive from the same run seed (e.g. per-worker
// initialization), so the data order is never correlated with them.
constexpr std::uint64_t kTag = 0xDA7AULL << 48;
constexpr std::uint64_t kPartitionStream = kTag | (1ULL << 32);
constexpr std::uint64_t kEpochStream = kTag | (2ULL << 32);  // | (worker + 1), or | 0 when shared

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("BatchSampler: " + what); }

}  // namespace

ShardMode parse_shard_mode(std::string_view name) {
  if (name == "disjoint") return ShardMode::disjoint;
  if (name == "full") return ShardMode::full;
  if (name == "same") return ShardMode::same;
  if (name == "none") return ShardMode::none;
  if (name == "auto") return ShardMode::disjoint;
  throw std::invalid_argument("data.shard: unknown mode '" + std::string(name) +
                              "' (valid: auto, disjoint, full, same, none)");
}

const char* shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::disjoint: return "disjoint";
    case ShardMode::full: return "full";
    case ShardMode::same: return "same";
    case ShardMode::none: return "none";
  }
  return "?";
}

BatchSampler::BatchSampler(const Dataset& train, const SamplerOptions& options) : data_(&train), opt_(options) {
  train.validate();
  const std::int64_t n = train.size();
  if (opt_.batch_size < 1) bad("batch_size must be >= 1, got " + std::to_string(opt_.batch_size));
  if (opt_.workers < 1) bad("workers must be >= 1, got " + std::to_string(opt_.workers));
  if (opt_.worker < 0 || opt_.worker >= opt_.workers)
    bad("worker " + std::to_string(opt_.worker) + " is outside [0, " + std::to_string(opt_.workers) + ")");

  if (opt_.mode == ShardMode::disjoint) {
    if (n < opt_.workers)
      bad("cannot split " + std::to_string(n) + " training examples into " + std::to_string(opt_.workers) +
          " non-empty disjoint shards");
    // One permutation shared by all workers (it depends on the seed only), cut into
    // contiguous parts whose sizes differ by at most one.
    std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
    std::iota(perm.begin(), perm.end(), std::int64_t{0});
    Rng rng(opt_.seed, kPartitionStream);
    shuffle(perm.begin(), static_cast<std::uint64_t>(n), rng);
    const std::int64_t w = opt_.worker, base = n / opt_.workers, extra = n % opt_.workers;
    const std::int64_t begin = w * base + std::min(w, extra);
    const std::int64_t size = base + (w < extra ? 1 : 0);
    shard_.assign(perm.begin() + begin, perm.begin() + begin + size);
    std::sort(shard_.begin(), shard_.end());
  } else {
    shard_.resize(static_cast<std::size_t>(n));
    std::iota(shard_.begin(), shard_.end(), std::int64_t{0});
  }
  if (opt_.batch_size > shard_size())
    bad("batch_size " + std::to_string(opt_.batch_size) + " exceeds worker " + std::to_string(opt_.worker) +
        "'s shard of " + std::to_string(shard_size()) + " examples (" + shard_mode_name(opt_.mode) + " sharding of " +
        std::to_string(n) + " examples among " + std::to_string(opt_.workers) + " workers)");
  scratch_.resize(static_cast<std::size_t>(opt_.batch_size));
  start_epoch(0);
}

void BatchSampler::start_epoch(std::int64_t epoch) {
  // Always from the sorted shard, so that an epoch's order needs no earlier state.
  const std::uint64_t who = opt_.mode == ShardMode::same ? 0 : static_cast<std::uint64_t>(opt_.worker) + 1;
  Rng rng(opt_.seed, kEpochStream | who, static_cast<std::uint64_t>(epoch));
  order_ = shard_;
  shuffle(order_.begin(), order_.size(), rng);
  pos_ = {epoch, 0};
}

void BatchSampler::next_indices(std::vector<std::int64_t>& indices) {
  const std::int64_t b = opt_.batch_size, n = shard_size();
  indices.resize(static_cast<std::size_t>(b));
  for (std::int64_t i = 0; i < b;) {
    const std::int64_t take = std::min(b - i, n - pos_.cursor);
    std::copy_n(order_.begin() + pos_.cursor, take, indices.begin() + i);
    i += take;
    pos_.cursor += take;
    // Wrap eagerly: after the last example of an epoch the position already reads
    // (epoch + 1, 0), so a checkpoint taken there never holds cursor == shard size.
    if (pos_.cursor == n) start_epoch(pos_.epoch + 1);
  }
}

void BatchSampler::next_batch(kernels::Tensor& images, std::vector<std::int32_t>& labels) {
  next_indices(scratch_);
  gather(*data_, scratch_, images, labels);
}

void BatchSampler::set_position(const SamplerPosition& position) {
  if (position.epoch < 0 || position.cursor < 0 || position.cursor >= shard_size())
    bad("invalid position (epoch " + std::to_string(position.epoch) + ", cursor " + std::to_string(position.cursor) +
        "): need epoch >= 0 and cursor in [0, " + std::to_string(shard_size()) + ")");
  if (position.epoch != pos_.epoch) start_epoch(position.epoch);
  pos_.cursor = position.cursor;
}

EvalBatches::EvalBatches(const Dataset& data, std::int64_t batch_size) : data_(&data), batch_size_(batch_size) {
  data.validate();
  if (batch_size < 1) throw std::invalid_argument("EvalBatches: batch_size must be >= 1, got " + std::to_string(batch_size));
}

std::int64_t EvalBatches::num_batches() const { return (data_->size() + batch_size_ - 1) / batch_size_; }

bool EvalBatches::next(kernels::Tensor& images, std::vector<std::int32_t>& labels) {
  const std::int64_t n = std::min(batch_size_, data_->size() - begin_);
  if (n <= 0) return false;
  kernels::Shape shape = data_->shape();
  shape[0] = n;
  if (images.shape() != shape || images.dtype() != kernels::DType::f32 || !images.device().is_cpu() ||
      !images.defined())
    images = kernels::Tensor::empty(shape);
  // The test split is read in order, so a batch is one contiguous block of rows.
  data_->copy_rows(begin_, n, images.data<float>());
  labels.assign(data_->labels.begin() + begin_, data_->labels.begin() + begin_ + n);
  begin_ += n;
  return true;
}

}  // namespace codistill::data
