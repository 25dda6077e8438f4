// Sharding and shuffling: disjoint shards partition the data, full and same modes give
// per-worker and shared orders, batches stay full across epochs, and a saved position
// resumes bit-exactly. Plus in-order evaluation batches.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "codistill/config/feed_options.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;
using Indices = std::vector<std::int64_t>;

namespace {

// n examples of shape [2, 3, 1]; value j of example i is i * 10 + j, label i % 5, so a
// row identifies its example.
Dataset numbered(std::int64_t n) {
  Dataset d;
  d.name = "numbered";
  d.classes = 5;
  d.images = kernels::Tensor::empty({n, 2, 3, 1});
  for (std::int64_t i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<std::int32_t>(i % 5));
    for (int j = 0; j < 6; ++j) d.images.data<float>()[i * 6 + j] = static_cast<float>(i * 10 + j);
  }
  return d;
}

SamplerOptions options(ShardMode mode, int worker, int workers, std::int64_t batch, std::uint64_t seed = 42) {
  SamplerOptions o;
  o.mode = mode;
  o.worker = worker;
  o.workers = workers;
  o.batch_size = batch;
  o.seed = seed;
  return o;
}

// The first `count` examples the sampler serves, batch after batch.
Indices stream(BatchSampler& s, std::int64_t count) {
  Indices all, batch;
  while (static_cast<std::int64_t>(all.size()) < count) {
    s.next_indices(batch);
    REQUIRE(static_cast<std::int64_t>(batch.size()) == s.batch_size());
    all.insert(all.end(), batch.begin(), batch.end());
  }
  all.resize(static_cast<std::size_t>(count));
  return all;
}

// Epoch e of a stream: its e-th chunk of shard_size examples.
Indices epoch_of(const Indices& all, std::int64_t shard, std::int64_t e) {
  return Indices(all.begin() + e * shard, all.begin() + (e + 1) * shard);
}

Indices sorted(Indices v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("disjoint shards partition the training set", "[data][sampler]") {
  const std::int64_t n = 103;
  Dataset d = numbered(n);
  const int workers = GENERATE(1, 2, 3, 4, 7);
  INFO(workers << " workers");
  std::vector<std::int64_t> seen(n, 0);
  std::int64_t smallest = n, largest = 0;
  for (int w = 0; w < workers; ++w) {
    BatchSampler s(d, options(ShardMode::disjoint, w, workers, 5));
    const std::int64_t m = s.shard_size();
    smallest = std::min(smallest, m);
    largest = std::max(largest, m);
    for (auto i : s.shard()) seen.at(i)++;
    // Every epoch (three of them, batches crossing epoch boundaries) visits the shard
    // exactly once, and consecutive epochs differ in order.
    Indices all = stream(s, 3 * m);
    for (int e = 0; e < 3; ++e) CHECK(sorted(epoch_of(all, m, e)) == s.shard());
    if (m > 3) CHECK(epoch_of(all, m, 0) != epoch_of(all, m, 1));
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](std::int64_t c) { return c == 1; }));
  CHECK(largest - smallest <= (workers > 1 ? 1 : 0));
}

TEST_CASE("the disjoint partition depends on the run seed, not on the worker alone", "[data][sampler]") {
  Dataset d = numbered(100);
  BatchSampler a(d, options(ShardMode::disjoint, 0, 4, 5, 1));
  BatchSampler b(d, options(ShardMode::disjoint, 0, 4, 5, 2));
  CHECK(a.shard() != b.shard());
  // Random, not contiguous blocks of the file order (which could be sorted by class).
  CHECK(a.shard().back() - a.shard().front() > 25);
}

TEST_CASE("full mode: every worker sees everything, each in its own order", "[data][sampler]") {
  const std::int64_t n = 64;
  Dataset d = numbered(n);
  Indices everything(n);
  std::iota(everything.begin(), everything.end(), 0);
  BatchSampler w0(d, options(ShardMode::full, 0, 3, 10));
  BatchSampler w1(d, options(ShardMode::full, 1, 3, 10));
  Indices a = stream(w0, 2 * n), b = stream(w1, 2 * n);
  for (int e = 0; e < 2; ++e) {
    CHECK(sorted(epoch_of(a, n, e)) == everything);
    CHECK(sorted(epoch_of(b, n, e)) == everything);
    CHECK(epoch_of(a, n, e) != epoch_of(b, n, e));
  }
  CHECK(epoch_of(a, n, 0) != epoch_of(a, n, 1));
}

TEST_CASE("same mode: every worker sees everything in the same order", "[data][sampler]") {
  const std::int64_t n = 50;
  Dataset d = numbered(n);
  BatchSampler w0(d, options(ShardMode::same, 0, 4, 8));
  BatchSampler w3(d, options(ShardMode::same, 3, 4, 8));
  Indices a = stream(w0, 3 * n), b = stream(w3, 3 * n);
  CHECK(a == b);
  Indices everything(n);
  std::iota(everything.begin(), everything.end(), 0);
  CHECK(sorted(epoch_of(a, n, 2)) == everything);
  CHECK(epoch_of(a, n, 0) != epoch_of(a, n, 1));
  // A different run seed gives a different order.
  BatchSampler other(d, options(ShardMode::same, 0, 4, 8, 7));
  CHECK(stream(other, n) != epoch_of(a, n, 0));
}

TEST_CASE("batches stay full across epoch boundaries", "[data][sampler]") {
  Dataset d = numbered(23);
  BatchSampler s(d, options(ShardMode::full, 0, 1, 10));
  Indices first_epoch = s.epoch_order();
  Indices batch;
  s.next_indices(batch);
  s.next_indices(batch);
  CHECK(s.position() == SamplerPosition{0, 20});
  s.next_indices(batch);  // 3 from epoch 0, then 7 from epoch 1
  CHECK(batch.size() == 10);
  CHECK(s.position() == SamplerPosition{1, 7});
  CHECK(Indices(batch.begin(), batch.begin() + 3) == Indices(first_epoch.begin() + 20, first_epoch.end()));
  CHECK(Indices(batch.begin() + 3, batch.end()) == Indices(s.epoch_order().begin(), s.epoch_order().begin() + 7));
  // Ending exactly at an epoch's end wraps at once: the position never holds cursor == 23.
  BatchSampler t(d, options(ShardMode::full, 0, 1, 23));
  t.next_indices(batch);
  CHECK(t.position() == SamplerPosition{1, 0});
}

TEST_CASE("next_batch copies the rows and labels of the sampled examples", "[data][sampler]") {
  Dataset d = numbered(40);
  BatchSampler s(d, options(ShardMode::disjoint, 1, 2, 6));
  BatchSampler twin(d, options(ShardMode::disjoint, 1, 2, 6));
  kernels::Tensor x = kernels::Tensor::full({6, 2, 3, 1}, std::nan(""));  // poisoned
  std::vector<std::int32_t> y;
  Indices idx;
  for (int step = 0; step < 7; ++step) {
    s.next_batch(x, y);
    twin.next_indices(idx);
    REQUIRE(y.size() == 6);
    for (int r = 0; r < 6; ++r) {
      CHECK(y[r] == idx[r] % 5);
      for (int j = 0; j < 6; ++j) REQUIRE(x.data<float>()[r * 6 + j] == static_cast<float>(idx[r] * 10 + j));
    }
  }
  kernels::Tensor wrong = kernels::Tensor::empty({5, 2, 3, 1});
  CHECK_THROWS_WITH(s.next_batch(wrong, y), Catch::Contains("expected a CPU float32 tensor of shape [6, 2, 3, 1]"));
  const Indices out_of_range{0, 40};
  kernels::Tensor two = kernels::Tensor::empty({2, 2, 3, 1});
  CHECK_THROWS_WITH(gather(d, out_of_range, two, y), Catch::Contains("index 40 out of range"));
}

TEST_CASE("a restored position continues bit-exactly", "[data][sampler]") {
  Dataset d = numbered(37);
  const ShardMode mode = GENERATE(ShardMode::disjoint, ShardMode::full, ShardMode::same);
  const int k = GENERATE(0, 1, 3, 8);  // 8 batches of 4 cross an epoch of a 12..13-example shard
  INFO(shard_mode_name(mode) << ", restored after " << k << " batches");
  const SamplerOptions opt = options(mode, 2, 3, 4, 99);
  BatchSampler original(d, opt);
  kernels::Tensor x = kernels::Tensor::empty({4, 2, 3, 1}), x2 = kernels::Tensor::empty({4, 2, 3, 1});
  std::vector<std::int32_t> y, y2;
  for (int i = 0; i < k; ++i) original.next_batch(x, y);
  const SamplerPosition saved = original.position();

  BatchSampler resumed(d, opt);
  resumed.set_position(saved);
  CHECK(resumed.position() == saved);
  for (int i = 0; i < 10; ++i) {
    original.next_batch(x, y);
    resumed.next_batch(x2, y2);
    REQUIRE(std::memcmp(x.raw(), x2.raw(), x.nbytes()) == 0);
    REQUIRE(y == y2);
  }
  CHECK(original.position() == resumed.position());
  // Going back to an earlier position (here: a sampler already further on) also works.
  resumed.set_position(saved);
  BatchSampler again(d, opt);
  again.set_position(saved);
  Indices a, b;
  resumed.next_indices(a);
  again.next_indices(b);
  CHECK(a == b);
}

TEST_CASE("bad sampler settings are refused with a reason", "[data][sampler]") {
  Dataset d = numbered(10);
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::full, 0, 1, 0)), Catch::Contains("batch_size must be >= 1"));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::full, 0, 0, 2)), Catch::Contains("workers must be >= 1"));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::full, 3, 3, 2)), Catch::Contains("worker 3 is outside [0, 3)"));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::full, -1, 3, 2)), Catch::Contains("outside"));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::disjoint, 0, 11, 1)),
                    Catch::Contains("cannot split 10 training examples into 11"));
  // 10 examples among 4 workers: shards of 3, 3, 2, 2.
  CHECK_NOTHROW(BatchSampler(d, options(ShardMode::disjoint, 0, 4, 3)));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::disjoint, 3, 4, 3)),
                    Catch::Contains("batch_size 3 exceeds worker 3's shard of 2 examples"));
  CHECK_THROWS_WITH(BatchSampler(d, options(ShardMode::full, 0, 1, 11)), Catch::Contains("batch_size 11 exceeds"));
  BatchSampler s(d, options(ShardMode::full, 0, 1, 2));
  CHECK_THROWS_WITH(s.set_position({0, 10}), Catch::Contains("cursor in [0, 10)"));
  CHECK_THROWS_AS(s.set_position({-1, 0}), std::invalid_argument);
  CHECK_THROWS_WITH(parse_shard_mode("random"), Catch::Contains("valid: auto, disjoint, full, same, none"));
  Dataset broken = numbered(5);
  broken.labels[2] = 9;
  CHECK_THROWS_WITH(BatchSampler(broken, options(ShardMode::full, 0, 1, 2)), Catch::Contains("label 9 at index 2"));
}

TEST_CASE("sampler options come from the run and data config", "[data][sampler]") {
  Config cfg;
  cfg.run.seed = 5;
  cfg.run.worker = 2;
  cfg.run.workers = 4;
  cfg.data.batch_size = 32;
  cfg.data.shard = "same";
  SamplerOptions o = sampler_options(cfg);
  CHECK(o.seed == 5);
  CHECK(o.worker == 2);
  CHECK(o.workers == 4);
  CHECK(o.batch_size == 32);
  CHECK(o.mode == ShardMode::same);
  cfg.data.shard = "bogus";
  CHECK_THROWS_WITH(sampler_options(cfg), Catch::Contains("data.shard"));
}

TEST_CASE("evaluation batches cover the split in order, the last one short", "[data][sampler]") {
  Dataset d = numbered(25);
  EvalBatches batches(d, 10);
  CHECK(batches.num_batches() == 3);
  kernels::Tensor x;
  std::vector<std::int32_t> y;
  std::vector<std::int64_t> sizes;
  std::int64_t next_row = 0;
  for (int pass = 0; pass < 2; ++pass) {
    sizes.clear();
    next_row = 0;
    while (batches.next(x, y)) {
      sizes.push_back(x.dim(0));
      REQUIRE(x.shape() == kernels::Shape{x.dim(0), 2, 3, 1});
      REQUIRE(static_cast<std::int64_t>(y.size()) == x.dim(0));
      for (std::int64_t r = 0; r < x.dim(0); ++r, ++next_row) {
        CHECK(y[r] == next_row % 5);
        CHECK(x.data<float>()[r * 6 + 5] == static_cast<float>(next_row * 10 + 5));
      }
    }
    CHECK(sizes == std::vector<std::int64_t>{10, 10, 5});
    CHECK(next_row == 25);
    batches.reset();
  }
  CHECK_THROWS_AS(EvalBatches(d, 0), std::invalid_argument);
}
