// BatchLoader (data/feed/batch_loader.hpp): with prefetch, the same batches and the same
// sampler positions as without; a moved sampler discards the speculation; a failure on the
// helper thread reaches the step that uses its batch. A worker group's ranks together load
// exactly the rows of one process with the group's batch.
#include <catch2/catch.hpp>
#include <sched.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "codistill/data/sampler.hpp"
#include "codistill/data/synthetic.hpp"
#include "codistill/data/feed/batch_loader.hpp"

using namespace codistill;

namespace {

constexpr std::int64_t kBatch = 16, kParts = 2;

data::Splits tiny_data() {
  DataConfig dc;
  dc.kind = "synthetic";
  dc.synthetic_train = 100;  // an epoch boundary every 6.25 batches, inside batches too
  dc.synthetic_test = 8;
  dc.synthetic_classes = 5;
  dc.synthetic_shape = {2, 5, 5};
  return data::make_synthetic(dc);
}

HostBatch host_batch(const data::Dataset& d, std::int64_t parts = kParts) {
  HostBatch b;
  for (std::int64_t i = 0; i < parts; ++i) {
    kernels::Shape s = d.example_shape();
    s.insert(s.begin(), kBatch / kParts);
    b.x.push_back(kernels::Tensor::empty(s));
    b.labels.push_back(kernels::Tensor::empty({kBatch / kParts}, kernels::DType::i32));
  }
  return b;
}

// The bytes of a batch: images then labels of every micro-batch.
std::vector<unsigned char> bytes(const HostBatch& b) {
  std::vector<unsigned char> out;
  for (std::size_t i = 0; i < b.x.size(); ++i)
    for (const kernels::Tensor* t : {&b.x[i], &b.labels[i]}) {
      const auto* p = static_cast<const unsigned char*>(t->raw());
      out.insert(out.end(), p, p + t->nbytes());
    }
  return out;
}

data::AugmentOptions augment() {
  data::AugmentOptions o;
  o.crop_padding = 1;
  o.flip = true;
  o.fill = -1.0f;
  o.seed = 4;
  return o;
}

struct Loaded {
  std::vector<std::vector<unsigned char>> batches;
  std::vector<data::SamplerPosition> positions;  // the sampler's after each load
};

// Steps 1..n; at step `rewind_at` the sampler is first set back to where it was after step 2
// (as restoring a checkpoint would).
Loaded load_steps(const data::Dataset& d, bool prefetch, int n, int rewind_at = 0,
                  std::int64_t* inline_count = nullptr) {
  data::SamplerOptions so;
  so.batch_size = kBatch;
  so.seed = 8;
  data::BatchSampler sampler(d, so);
  HostBatch slots[2] = {host_batch(d), host_batch(d)};
  BatchLoader loader(d, augment(), prefetch);  // after the batches: it may still write one at its end
  Loaded out;
  int current = 0;
  for (int step = 1; step <= n; ++step) {
    if (step == rewind_at) sampler.set_position(out.positions[1]);
    loader.load(step, sampler, slots[current], &slots[1 - current]);
    out.batches.push_back(bytes(slots[current]));
    out.positions.push_back(sampler.position());
    current = 1 - current;
  }
  if (inline_count) *inline_count = loader.prepared_inline();
  if (prefetch) CHECK(loader.prefetched() + loader.prepared_inline() == n);
  return out;
}

}  // namespace

TEST_CASE("prefetch gives the same batches and sampler positions as loading in place", "[feed][prefetch]") {
  const data::Splits splits = tiny_data();
  std::int64_t inline_count = 0;
  const Loaded plain = load_steps(splits.train, false, 30);
  const Loaded ahead = load_steps(splits.train, true, 30, 0, &inline_count);
  CHECK(inline_count == 1);  // only the first step had nothing prefetched
  REQUIRE(ahead.batches.size() == plain.batches.size());
  for (std::size_t s = 0; s < plain.batches.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(ahead.batches[s] == plain.batches[s]);
    CHECK(ahead.positions[s] == plain.positions[s]);  // what a checkpoint after the step saves
  }
  // The positions cross epochs, and augmentation changed the batches (steps differ).
  CHECK(plain.positions.back().epoch >= 4);
  CHECK(plain.batches[0] != plain.batches[1]);
}

TEST_CASE("a sampler moved between steps discards the prefetched batch", "[feed][prefetch]") {
  const data::Splits splits = tiny_data();
  std::int64_t inline_count = 0;
  const Loaded plain = load_steps(splits.train, false, 12, 7);
  const Loaded ahead = load_steps(splits.train, true, 12, 7, &inline_count);
  CHECK(inline_count == 2);  // step 1 and the step after the move
  CHECK(ahead.batches == plain.batches);
  CHECK(ahead.positions == plain.positions);
  // Step 7 drew from step 3's position: the indices of step 3 (the augmentation of step 7).
  CHECK(plain.positions[6] == plain.positions[2]);
}

TEST_CASE("a failure on the helper thread is thrown by the step that uses its batch", "[feed][prefetch]") {
  const data::Splits splits = tiny_data();
  data::SamplerOptions so;
  so.batch_size = kBatch;
  data::BatchSampler sampler(splits.train, so);
  HostBatch good = host_batch(splits.train);
  HostBatch bad = host_batch(splits.train);
  BatchLoader loader(splits.train, augment(), true);
  bad.x[0] = kernels::Tensor::empty({3, 3});  // a wrong shape: gather throws on the helper
  loader.load(1, sampler, good, &bad);
  CHECK_THROWS_AS(loader.load(2, sampler, bad, &good), std::invalid_argument);
}

TEST_CASE("a group's ranks load, between them, the rows one process loads with the group's batch",
          "[feed][group]") {
  const data::Splits splits = tiny_data();
  const data::Dataset& d = splits.train;
  constexpr int kRanks = 3;
  // One process: batch kRanks x kBatch in kRanks x kParts micro-batches of the same rows.
  data::SamplerOptions so;
  so.batch_size = kRanks * kBatch;
  so.seed = 8;
  data::BatchSampler one_sampler(d, so);
  HostBatch one = host_batch(d, kRanks * kParts);
  BatchLoader one_loader(d, augment(), false);
  // kRanks ranks, each with the same sampler stream (the group's batch) and its own slice.
  std::vector<data::BatchSampler> samplers(kRanks, data::BatchSampler(d, so));
  std::vector<std::array<HostBatch, 2>> slots;  // alternating, as the step does with prefetch
  std::vector<std::unique_ptr<BatchLoader>> loaders;
  for (int r = 0; r < kRanks; ++r) slots.push_back({host_batch(d), host_batch(d)});
  for (int r = 0; r < kRanks; ++r)  // after the batches (see load_steps); with prefetch
    loaders.push_back(std::make_unique<BatchLoader>(d, augment(), true, RankSlice{r, kRanks}));
  for (int step = 1; step <= 12; ++step) {
    INFO("step " << step);
    one_loader.load(step, one_sampler, one, nullptr);
    std::vector<unsigned char> joined;
    for (int r = 0; r < kRanks; ++r) {
      HostBatch& mine = slots[r][step % 2];
      loaders[r]->load(step, samplers[r], mine, &slots[r][(step + 1) % 2]);
      const auto part = bytes(mine);
      joined.insert(joined.end(), part.begin(), part.end());
      CHECK(samplers[r].position() == one_sampler.position());  // what every rank's checkpoint would say
      CHECK(mine.group_rows == kRanks * kBatch);
    }
    CHECK(joined == bytes(one));  // images (augmented by their row in the group batch) and labels
  }
  CHECK_THROWS_AS(BatchLoader(d, augment(), false, RankSlice{2, 2}), std::invalid_argument);
}

TEST_CASE("data.prefetch: true and false are obeyed, auto prefetches for a device and for a CPU with a core to spare",
          "[feed][prefetch]") {
  const auto cpu = kernels::Device::cpu(), gpu = kernels::Device::cuda(0);
  for (const auto& d : {cpu, gpu}) {
    CHECK(prefetch_batches("true", d, 4096));
    CHECK_FALSE(prefetch_batches("false", d, 1));
  }
  CHECK(prefetch_batches("auto", gpu, 4096));
  CHECK_FALSE(prefetch_batches("auto", cpu, 4096));  // more threads than any test machine's cores
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  CHECK_FALSE(prefetch_batches("auto", cpu, cores));  // every core computing: gathered inline
  if (cores > 1) CHECK(prefetch_batches("auto", cpu, cores - 1));
  REQUIRE_THROWS_WITH(prefetch_batches("yes", cpu, 1),
                      Catch::Contains("data.prefetch") && Catch::Contains("auto, true or false"));
}
