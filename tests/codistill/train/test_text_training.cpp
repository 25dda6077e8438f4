// Training a language model from prepared token files (data.kind text), at the level of
// the step: the text batch source (deterministic windows, labels = inputs shifted by one,
// micro-batch and rank slices of one batch), micro-batched steps, a group of two ranks,
// bit-exact resume through a checkpoint file, held-out evaluation against a hand
// computation and the unigram baseline. The model is the bigram stand-in of
// text_fixture.hpp (the gpt kind is built elsewhere).
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "codistill/eval/evaluate_text.hpp"
#include "codistill/train/step.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "text_fixture.hpp"

using namespace codistill;
using namespace codistill::test_text;

namespace {

text::WindowOptions windows(std::int64_t batch, std::int64_t context = 16) {
  text::WindowOptions o;
  o.batch_size = batch;
  o.context = context;
  o.seed = 5;
  o.mode = data::ShardMode::disjoint;
  o.worker = 1;
  o.workers = 2;
  return o;
}

// The staging tensors of one step's batch in K micro-batches (what TrainStep allocates).
HostBatch host_batch(const BatchSource& s, std::int64_t rows, std::int64_t K) {
  HostBatch b;
  const BatchLayout l = s.layout(rows / K);
  for (std::int64_t i = 0; i < K; ++i) {
    b.x.push_back(Tensor::empty(l.input, l.input_dtype));
    b.labels.push_back(Tensor::empty({l.labels}, kernels::DType::i32));
  }
  return b;
}

std::vector<std::int32_t> ints(const Tensor& t) { return {t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel()}; }

// Concatenation of a batch's inputs and of its labels, micro-batch after micro-batch.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> flat(const HostBatch& b) {
  std::vector<std::int32_t> x, y;
  for (std::size_t i = 0; i < b.x.size(); ++i) {
    auto xi = ints(b.x[i]), yi = ints(b.labels[i]);
    x.insert(x.end(), xi.begin(), xi.end());
    y.insert(y.end(), yi.begin(), yi.end());
  }
  return {x, y};
}

// One worker training the bigram model on the folder.
struct TextWorker {
  Model model;
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<TrainStep> step;
  WorkerState w;
  std::int64_t rows;
  TextWorker(const text::TokenFile& train, std::int64_t micro_batches, std::int64_t rows_ = 8, RankSlice slice = {})
      : model(bigram(3)), rows(rows_) {
    OptimizerConfig oc;
    oc.kind = "adamw";
    oc.lr = 0.01;
    oc.weight_decay = 0.01;
    opt = make_optimizer(oc, model);
    kernels::DistillLossParams loss;
    step = std::make_unique<TrainStep>(model, std::make_unique<TextBatchSource>(train, windows(rows), slice), rows,
                                       loss, micro_batches);
    w.model = &model;
    w.optimizer = opt.get();
    w.source = &step->source();
    w.model_yaml = "kind: test-bigram\n";
    w.config_yaml = "{}\n";
  }
  void train(int steps, const StepHooks& hooks = {}) {
    for (int i = 0; i < steps; ++i) {
      step->run(w.step + 1, {}, *opt, 0.01, hooks);
      ++w.step;
      w.examples_seen += rows;
    }
  }
  std::vector<float> params() {
    const Tensor& v = model.arena().values();
    return {v.data<float>(), v.data<float>() + v.numel()};
  }
};

}  // namespace

TEST_CASE("text batches: deterministic, in range, labels the next tokens", "[train][text]") {
  Folder f;
  const text::TokenFile train(f.path + "/train.tokens");
  TextBatchSource a(train, windows(6)), b(train, windows(6));
  HostBatch ba = host_batch(a, 6, 1), bb = host_batch(b, 6, 1);
  const BatchLayout l = a.layout(6);
  CHECK(l.input == kernels::Shape{6, 16});
  CHECK(l.input_dtype == kernels::DType::i32);
  CHECK(l.labels == 6 * 16);
  CHECK(l.classes == kVocab);
  for (std::int64_t step : {1, 2, 7}) {
    a.load(step, ba, nullptr);
    b.load(step, bb, nullptr);
    CHECK(flat(ba) == flat(bb));
    const auto [x, y] = flat(ba);
    const std::vector<std::int32_t> w = a.group_windows(step);  // [6, 17]
    for (std::int64_t r = 0; r < 6; ++r)
      for (std::int64_t t = 0; t < 16; ++t) {
        CHECK(x[static_cast<std::size_t>(r * 16 + t)] == w[static_cast<std::size_t>(r * 17 + t)]);
        CHECK(y[static_cast<std::size_t>(r * 16 + t)] == w[static_cast<std::size_t>(r * 17 + t + 1)]);
      }
    for (std::int32_t t : x) CHECK((t >= 0 && t < kVocab));
    CHECK(ba.rows == std::vector<std::int64_t>{6 * 16});
    CHECK(ba.group_rows == 6 * 16);
  }
  a.load(3, ba, nullptr);
  b.load(4, bb, nullptr);
  CHECK(flat(ba) != flat(bb));  // another step, other windows
}

TEST_CASE("text micro-batches and group ranks are slices of one batch", "[train][text]") {
  Folder f;
  const text::TokenFile train(f.path + "/train.tokens");
  TextBatchSource whole(train, windows(8));
  HostBatch one = host_batch(whole, 8, 1);
  whole.load(5, one, nullptr);
  // Four micro-batches of 2 windows.
  TextBatchSource split(train, windows(8));
  HostBatch four = host_batch(split, 8, 4);
  split.load(5, four, nullptr);
  CHECK(flat(four) == flat(one));
  CHECK(four.rows == std::vector<std::int64_t>(4, 2 * 16));
  CHECK(four.group_rows == 8 * 16);
  // Two ranks of 4 windows each (micro-batches of 2 inside each rank): together the batch of 8.
  std::vector<std::int32_t> x, y;
  for (int r = 0; r < 2; ++r) {
    TextBatchSource rank(train, windows(4), RankSlice{r, 2});
    HostBatch b = host_batch(rank, 4, 2);
    rank.load(5, b, nullptr);
    CHECK(b.group_rows == 8 * 16);
    const auto [xr, yr] = flat(b);
    x.insert(x.end(), xr.begin(), xr.end());
    y.insert(y.end(), yr.begin(), yr.end());
  }
  CHECK(std::make_pair(x, y) == flat(one));
}

TEST_CASE("a text step in micro-batches is the step of the whole batch", "[train][text][step]") {
  Folder f;
  const text::TokenFile train(f.path + "/train.tokens");
  TextWorker one(train, 1), four(train, 4);
  const std::vector<float> start = one.params();
  one.train(3);
  four.train(3);
  const std::vector<float> a = one.params(), b = four.params();
  REQUIRE(a.size() == b.size());
  double diff = 0, moved = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    moved = std::max(moved, static_cast<double>(std::abs(a[i] - start[i])));
  }
  CHECK(moved > 1e-3);  // the steps did train
  CHECK(diff < 1e-6);
}

// A worker group of two ranks in one process: each rank a thread with its own model and
// step, the gradient sum of phase 6 through shared memory (in rank order on both, so the
// ranks stay identical). Two ranks of 4 windows train as one process of 8.
TEST_CASE("a text group of 2 ranks with batch 4 trains as one process with batch 8", "[train][text][group]") {
  Folder f;
  const text::TokenFile train(f.path + "/train.tokens");
  TextWorker whole(train, 1);
  whole.train(3);
  std::vector<std::unique_ptr<TextWorker>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_unique<TextWorker>(train, 2, 4, RankSlice{r, 2}));
  std::barrier sync(2);
  std::vector<std::vector<float>> grads(2);
  auto run_rank = [&](int r) {
    StepHooks hooks;
    hooks.reduce_gradients = [&, r](Tensor& g, kernels::Queue&) {
      float* p = g.data<float>();
      grads[static_cast<std::size_t>(r)].assign(p, p + g.numel());
      sync.arrive_and_wait();
      for (std::int64_t i = 0; i < g.numel(); ++i) p[i] = grads[0][static_cast<std::size_t>(i)] + grads[1][static_cast<std::size_t>(i)];
      sync.arrive_and_wait();  // both have read before the next step writes
    };
    ranks[static_cast<std::size_t>(r)]->train(3, hooks);
  };
  std::thread other(run_rank, 1);
  run_rank(0);
  other.join();
  const std::vector<float> a = whole.params(), b = ranks[0]->params();
  CHECK(ranks[1]->params() == b);
  REQUIRE(a.size() == b.size());
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  CHECK(diff < 1e-6);
}

TEST_CASE("a text run resumed from a checkpoint ends bit-identical", "[train][text][checkpoint]") {
  Folder f;
  const text::TokenFile train(f.path + "/train.tokens");
  codistill::test::TempDir dir;
  TextWorker straight(train, 1);
  straight.train(6);
  const std::string end_a = dir.str("a.h5");
  const auto digest_a = checkpoint::write(end_a, make_state_view(straight.w).view).content_digest;

  TextWorker first(train, 1);
  first.train(3);
  const std::string mid = dir.str("mid.h5");
  checkpoint::write(mid, make_state_view(first.w).view);
  const checkpoint::CheckpointData data = checkpoint::read(mid);
  // The text source's state: the shard's size and the context, no sampler position.
  CHECK(data.find(checkpoint::Section::state, "sampler/shard_size"));
  CHECK(data.find(checkpoint::Section::state, "sampler/context"));
  CHECK_FALSE(data.find(checkpoint::Section::state, "sampler/position"));

  TextWorker resumed(train, 1);  // fresh, then restored
  restore_state(resumed.w, data);
  CHECK(resumed.w.step == 3);
  resumed.train(3);
  CHECK(resumed.params() == straight.params());
  const auto digest_b = checkpoint::write(dir.str("b.h5"), make_state_view(resumed.w).view).content_digest;
  CHECK(digest_b == digest_a);

  // Another context is another run: refused, naming it.
  TextBatchSource other(train, windows(8, 12));
  WorkerState w = resumed.w;
  w.source = &other;
  CHECK_THROWS_WITH(restore_state(w, data), Catch::Matchers::Contains("data.context"));
}

TEST_CASE("held-out evaluation: cross-entropy, accuracy and predictions per token", "[train][text][eval]") {
  Folder f;
  const text::TokenFile valid(f.path + "/valid.tokens");
  const text::EvalWindows ew(valid, 16);
  Model m = bigram(9);
  // By hand: the logits of position t are column x_t of the table's weight plus its bias.
  const auto params = m.params();
  const float* W = params[0].value->data<float>();  // [V out, V in]
  const float* bias = params[1].value->data<float>();
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(ew.count() * 17));
  ew.windows(0, tokens);
  double ce = 0;
  std::int64_t correct = 0, n = 0;
  std::vector<std::int32_t> expected;
  for (std::int64_t r = 0; r < ew.count(); ++r)
    for (std::int64_t t = 0; t < 16; ++t) {
      const std::int32_t in = tokens[static_cast<std::size_t>(r * 17 + t)];
      const std::int32_t next = tokens[static_cast<std::size_t>(r * 17 + t + 1)];
      std::vector<double> z(kVocab);
      double mx = -1e300;
      std::int32_t arg = 0;
      for (std::int64_t v = 0; v < kVocab; ++v) {
        z[static_cast<std::size_t>(v)] = static_cast<double>(W[v * kVocab + in]) + bias[v];
        if (z[static_cast<std::size_t>(v)] > mx) {
          mx = z[static_cast<std::size_t>(v)];
          arg = static_cast<std::int32_t>(v);
        }
      }
      double s = 0;
      for (double zv : z) s += std::exp(zv - mx);
      ce += std::log(s) + mx - z[static_cast<std::size_t>(next)];
      correct += arg == next;
      expected.push_back(arg);
      ++n;
    }
  std::vector<std::int32_t> predictions;
  const EvalResult r = evaluate_text(m, ew, 2, 0, &predictions);  // batches of 2 windows, the last short when odd
  CHECK(r.examples == n);
  CHECK(r.loss == Approx(ce / static_cast<double>(n)).epsilon(1e-5));
  CHECK(r.accuracy == Approx(static_cast<double>(correct) / static_cast<double>(n)));
  CHECK(predictions == expected);
  const EvalResult limited = evaluate_text(m, ew, 5, 2, nullptr);
  CHECK(limited.examples == 2 * 16);
  CHECK(eval_windows_per_batch(1000, 128) == 7);
  CHECK(eval_windows_per_batch(10, 128) == 1);
}

TEST_CASE("the unigram baseline is the entropy of the stream's token frequencies", "[train][text]") {
  codistill::test::TempDir dir;
  text::TokenDocuments d;
  d.add(std::vector<std::int32_t>{1, 1, 2});
  d.add(std::vector<std::int32_t>{3});
  text::write_token_file(dir.str("t.tokens"), d, kVocab, 1);
  const text::TokenFile f(dir.str("t.tokens"));
  // Stream 1 1 2 <eod> 3 <eod>: p = 2/6, 1/6, 1/6, 2/6.
  const double h = -(2 * (2.0 / 6) * std::log(2.0 / 6) + 2 * (1.0 / 6) * std::log(1.0 / 6));
  CHECK(unigram_cross_entropy(f) == Approx(h).epsilon(1e-12));
}
