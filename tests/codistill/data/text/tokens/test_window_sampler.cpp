// Document shards and [B, T+1] windows: shards disjoint, covering and balanced; windows
// deterministic in (seed, worker, step), cut from the worker's own stream, in range; the
// held-out windows cover the split once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/data/text/tokens/window_sampler.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;
using namespace codistill::data::text;

namespace {

// Document d holds tokens 1000 + 100 d + i: every token names its document.
constexpr std::uint32_t kVocab = 5000;

std::string write_docs(const codistill::test::TempDir& dir, const std::vector<std::int64_t>& sizes) {
  TokenDocuments docs;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    std::vector<std::int32_t> t(static_cast<std::size_t>(sizes[d]));
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>(1000 + 100 * d + i);
    docs.add(t);
  }
  const std::string path = dir.str("train.tokens");
  write_token_file(path, docs, kVocab, 1);
  return path;
}

std::int64_t doc_of(std::int32_t token) { return (token - 1000) / 100; }

// The stream of a list of documents, built the obvious way.
std::vector<std::int32_t> reference_stream(const TokenFile& f, const std::vector<std::int64_t>& docs) {
  std::vector<std::int32_t> s;
  for (std::int64_t d : docs) {
    const auto t = f.document(d);
    s.insert(s.end(), t.begin(), t.end());
    s.push_back(kEndOfDocument);
  }
  return s;
}

const std::vector<std::int64_t> kSizes{40, 3, 17, 60, 8, 25, 1, 33, 12, 50, 9, 30};

}  // namespace

TEST_CASE("disjoint shards cover every document once, balanced by tokens", "[text][sampler]") {
  codistill::test::TempDir dir;
  const TokenFile f(write_docs(dir, kSizes));
  for (int workers = 1; workers <= 5; ++workers) {
    INFO("workers " << workers);
    std::vector<int> seen(kSizes.size(), 0);
    std::int64_t lo = INT64_MAX, hi = 0;
    for (int w = 0; w < workers; ++w) {
      const auto shard = shard_documents(f, ShardMode::disjoint, w, workers);
      CHECK(std::is_sorted(shard.begin(), shard.end()));
      CHECK_FALSE(shard.empty());
      std::int64_t tokens = 0;
      for (auto d : shard) {
        ++seen[static_cast<std::size_t>(d)];
        tokens += f.document_size(d);
      }
      lo = std::min(lo, tokens);
      hi = std::max(hi, tokens);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    CHECK(hi - lo <= 60);  // at most the longest document
  }
  // By hand, two workers, documents by decreasing size (worker totals after each):
  // 60 d3 -> w0 (60, 0); 50 d9 -> w1 (60, 50); 40 d0 -> w1 (60, 90); 33 d7 -> w0 (93, 90);
  // 30 d11 -> w1 (93, 120); 25 d5 -> w0 (118, 120); 17 d2 -> w0 (135, 120);
  // 12 d8 -> w1 (135, 132); 9 d10 -> w1 (135, 141); 8 d4 -> w0 (143, 141);
  // 3 d1 -> w1 (143, 144); 1 d6 -> w0 (144, 144).
  CHECK(shard_documents(f, ShardMode::disjoint, 0, 2) == std::vector<std::int64_t>{2, 3, 4, 5, 6, 7});
  CHECK(shard_documents(f, ShardMode::disjoint, 1, 2) == std::vector<std::int64_t>{0, 1, 8, 9, 10, 11});
  CHECK(shard_documents(f, ShardMode::full, 1, 3).size() == kSizes.size());
  CHECK_THROWS_WITH(shard_documents(f, ShardMode::disjoint, 0, 13), Catch::Contains("too few for 13 disjoint shards"));
  CHECK_THROWS_WITH(shard_documents(f, ShardMode::disjoint, 3, 3), Catch::Contains("worker 3 is outside [0, 3)"));
}

TEST_CASE("windows are a pure function of (seed, worker, step), cut from the worker's stream", "[text][sampler]") {
  codistill::test::TempDir dir;
  const TokenFile f(write_docs(dir, kSizes));
  const std::uint64_t seed = test::fresh_seed();
  WindowOptions o;
  o.batch_size = 6;
  o.context = 20;
  o.seed = seed;
  o.workers = 3;
  const std::int64_t row = o.context + 1;
  for (int w = 0; w < 3; ++w) {
    o.worker = w;
    const WindowSampler a(f, o), b(f, o);
    const auto shard = shard_documents(f, ShardMode::disjoint, w, 3);
    const std::set<std::int64_t> mine(shard.begin(), shard.end());
    const auto ref = reference_stream(f, shard);
    CHECK(a.stream().size() == static_cast<std::int64_t>(ref.size()));
    std::vector<std::int32_t> x(static_cast<std::size_t>(o.batch_size * row)), y(x.size());
    for (std::int64_t step : {0, 1, 7, 1000000}) {
      a.windows(step, x);
      b.windows(step, y);
      CHECK(x == y);  // a second sampler (a resumed run) gives the same batch
      const auto starts = a.starts(step);
      for (std::size_t r = 0; r < starts.size(); ++r) {
        REQUIRE(starts[r] >= 0);
        REQUIRE(starts[r] + row <= static_cast<std::int64_t>(ref.size()));
        const std::vector<std::int32_t> got(x.begin() + static_cast<std::ptrdiff_t>(r * row),
                                            x.begin() + static_cast<std::ptrdiff_t>((r + 1) * row));
        const std::vector<std::int32_t> want(ref.begin() + starts[r], ref.begin() + starts[r] + row);
        CHECK(got == want);
        for (auto t : got) {
          CHECK((t >= 0 && t < static_cast<std::int32_t>(kVocab)));
          if (t != kEndOfDocument) CHECK(mine.count(doc_of(t)) == 1);
        }
      }
    }
    std::vector<std::int32_t> z(x.size());
    a.windows(1, x);
    a.windows(2, z);
    CHECK(x != z);
  }
  // "same": every worker draws the same windows from the same (whole) stream; "full":
  // the whole stream, each worker its own windows.
  o.mode = ShardMode::same;
  o.worker = 0;
  const WindowSampler s0(f, o);
  o.worker = 2;
  const WindowSampler s2(f, o);
  CHECK(s0.starts(5) == s2.starts(5));
  o.mode = ShardMode::full;
  const WindowSampler f2(f, o);
  o.worker = 0;
  const WindowSampler f0(f, o);
  CHECK(f0.starts(5) != f2.starts(5));
  CHECK(f0.stream().size() == 288 + 12);
  // A different seed, other windows.
  o.seed = seed + 1;
  CHECK(WindowSampler(f, o).starts(5) != f0.starts(5));
}

TEST_CASE("the sampler refuses shards shorter than a window and wrong buffers", "[text][sampler]") {
  codistill::test::TempDir dir;
  const TokenFile f(write_docs(dir, {5, 4}));
  WindowOptions o;
  o.context = 10;  // the stream is 5 + 1 + 4 + 1 = 11 tokens: exactly one window
  o.batch_size = 3;
  const WindowSampler s(f, o);
  CHECK(s.starts(9) == std::vector<std::int64_t>{0, 0, 0});
  std::vector<std::int32_t> small(5);
  CHECK_THROWS_WITH(s.windows(0, small), Catch::Contains("a batch is 3 x 11"));
  CHECK_THROWS_WITH(s.starts(-1), Catch::Contains("step must be >= 0"));
  o.context = 11;
  CHECK_THROWS_WITH(WindowSampler(f, o), Catch::Contains("fewer than one window of context + 1 = 12"));
  // Two workers: worker 0 has document 0 (5 + 1 tokens), worker 1 document 1 (4 + 1).
  o.workers = 2;
  o.context = 5;
  CHECK_NOTHROW(WindowSampler(f, o));
  o.worker = 1;
  CHECK_THROWS_WITH(WindowSampler(f, o), Catch::Contains("worker 1's shard") && Catch::Contains("holds 5 tokens"));
}

TEST_CASE("held-out windows predict every token of the split once", "[text][sampler]") {
  codistill::test::TempDir dir;
  const TokenFile f(write_docs(dir, kSizes));
  const std::int64_t T = 16;
  const EvalWindows e(f, T);
  std::vector<std::int64_t> all(kSizes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  const auto ref = reference_stream(f, all);
  CHECK(e.count() == (static_cast<std::int64_t>(ref.size()) - 1) / T);
  std::vector<std::int32_t> out(static_cast<std::size_t>(e.count() * (T + 1)));
  e.windows(0, out);
  std::vector<std::int32_t> targets;
  for (std::int64_t i = 0; i < e.count(); ++i) {
    CHECK(out[static_cast<std::size_t>(i * (T + 1))] == ref[static_cast<std::size_t>(i * T)]);
    targets.insert(targets.end(), out.begin() + i * (T + 1) + 1, out.begin() + (i + 1) * (T + 1));
  }
  CHECK(targets == std::vector<std::int32_t>(ref.begin() + 1, ref.begin() + 1 + e.count() * T));
  std::vector<std::int32_t> one(static_cast<std::size_t>(T + 1));
  CHECK_THROWS_AS(e.windows(e.count(), one), std::out_of_range);
  CHECK_THROWS_WITH(EvalWindows(f, 400), Catch::Contains("fewer than one evaluation window"));
}
