#include "codistill/data/text/tokens/window_sampler.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "codistill/util/rng.hpp"

namespace codistill::data::text {

namespace {

// Rng(seed, stream, step) stream ids; the tag keeps them apart from the image sampler's
// and every other stream derived from the run seed.
constexpr std::uint64_t kWindowStream = (0x7E47ULL << 48) | (1ULL << 32);  // | (worker + 1), or | 0 shared

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("text sampler: " + what); }

void check_workers(int worker, int workers) {
  if (workers < 1) bad("workers must be >= 1, got " + std::to_string(workers));
  if (worker < 0 || worker >= workers)
    bad("worker " + std::to_string(worker) + " is outside [0, " + std::to_string(workers) + ")");
}

std::vector<std::int64_t> all_documents(const TokenFile& f) {
  std::vector<std::int64_t> d(static_cast<std::size_t>(f.documents()));
  std::iota(d.begin(), d.end(), std::int64_t{0});
  return d;
}

}  // namespace

std::vector<std::int64_t> shard_documents(const TokenFile& train, ShardMode mode, int worker, int workers) {
  check_workers(worker, workers);
  if (mode != ShardMode::disjoint) return all_documents(train);
  const std::int64_t n = train.documents();
  if (n < workers)
    bad(train.path() + " holds " + std::to_string(n) + " documents, too few for " + std::to_string(workers) +
        " disjoint shards");
  std::vector<std::int64_t> order = all_documents(train);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return train.document_size(a) > train.document_size(b); });
  std::vector<std::int64_t> load(static_cast<std::size_t>(workers), 0);
  std::vector<std::int64_t> mine;
  for (std::int64_t d : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();  // first minimum: lowest id
    load[static_cast<std::size_t>(lightest)] += train.document_size(d);
    if (lightest == worker) mine.push_back(d);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

WindowSampler::WindowSampler(const TokenFile& train, const WindowOptions& options)
    : WindowSampler(std::make_shared<DocumentStream>(
                        train, shard_documents(train, options.mode, options.worker, options.workers)),
                    options) {}

WindowSampler::WindowSampler(std::shared_ptr<const TokenStream> stream, const WindowOptions& options)
    : opt_(options), stream_(std::move(stream)) {
  check_workers(opt_.worker, opt_.workers);
  if (opt_.batch_size < 1) bad("batch_size must be >= 1, got " + std::to_string(opt_.batch_size));
  if (opt_.context < 1) bad("context must be >= 1, got " + std::to_string(opt_.context));
  if (stream_->size() < opt_.context + 1)
    bad("worker " + std::to_string(opt_.worker) + "'s shard of " + stream_->origin() + " holds " +
        std::to_string(stream_->size()) +
        " tokens (with end-of-document tokens), fewer than one window of context + 1 = " +
        std::to_string(opt_.context + 1));
}

std::vector<std::int64_t> WindowSampler::starts(std::int64_t step) const {
  if (step < 0) bad("step must be >= 0, got " + std::to_string(step));
  const std::uint64_t who = opt_.mode == ShardMode::same ? 0 : static_cast<std::uint64_t>(opt_.worker) + 1;
  Rng rng(opt_.seed, kWindowStream | who, static_cast<std::uint64_t>(step));
  const auto positions = static_cast<std::uint64_t>(stream_->size() - opt_.context);  // starts 0..L-T-1
  std::vector<std::int64_t> s(static_cast<std::size_t>(opt_.batch_size));
  for (auto& x : s) x = static_cast<std::int64_t>(rng.below(positions));
  return s;
}

void WindowSampler::windows(std::int64_t step, std::span<std::int32_t> out) const {
  const std::int64_t row = row_tokens();
  if (static_cast<std::int64_t>(out.size()) != opt_.batch_size * row)
    bad("the output holds " + std::to_string(out.size()) + " tokens, a batch is " + std::to_string(opt_.batch_size) +
        " x " + std::to_string(row));
  const std::vector<std::int64_t> s = starts(step);
  for (std::size_t b = 0; b < s.size(); ++b)
    stream_->copy(s[b], out.subspan(b * static_cast<std::size_t>(row), static_cast<std::size_t>(row)));
}

EvalWindows::EvalWindows(const TokenFile& valid, std::int64_t context)
    : EvalWindows(std::make_shared<DocumentStream>(valid, all_documents(valid)), context) {}

EvalWindows::EvalWindows(std::shared_ptr<const TokenStream> valid, std::int64_t context)
    : context_(context), stream_(std::move(valid)) {
  if (context < 1) bad("context must be >= 1, got " + std::to_string(context));
  count_ = stream_->size() > context ? (stream_->size() - 1) / context : 0;
  if (count_ == 0)
    bad(stream_->origin() + " holds " + std::to_string(stream_->size()) +
        " tokens (with end-of-document tokens), fewer than one evaluation window of " + std::to_string(context + 1));
}

void EvalWindows::windows(std::int64_t first, std::span<std::int32_t> out) const {
  const std::int64_t row = row_tokens();
  if (static_cast<std::int64_t>(out.size()) % row != 0)
    bad("the output holds " + std::to_string(out.size()) + " tokens, not a multiple of a window's " + std::to_string(row));
  const std::int64_t n = static_cast<std::int64_t>(out.size()) / row;
  if (first < 0 || first + n > count_)
    throw std::out_of_range("EvalWindows: windows [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") outside [0, " + std::to_string(count_) + ")");
  for (std::int64_t i = 0; i < n; ++i)
    stream_->copy((first + i) * context_, out.subspan(static_cast<std::size_t>(i * row), static_cast<std::size_t>(row)));
}

}  // namespace codistill::data::text
