#include "codistill/data/feed/text_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <boost/filesystem/operations.hpp>
#include <fmt/format.h>

#include "codistill/util/config_error.hpp"
#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokenizer/tokenizer_json.hpp"

namespace codistill {

namespace text = data::text;

TextData load_text_data(const DataConfig& cfg) {
  TextData d;
  d.path = cfg.path;
  // The project's tokenizer.bpe, or the tokenizer.json of a folder prepared with --tokenizer.
  const bool bpe = boost::filesystem::is_regular_file(cfg.path + "/tokenizer.bpe");
  const char* tokenizer_name = bpe || !boost::filesystem::is_regular_file(cfg.path + "/tokenizer.json")
                                   ? "tokenizer.bpe" : "tokenizer.json";
  for (const char* name : {tokenizer_name, "train.tokens", "valid.tokens"})
    if (!boost::filesystem::is_regular_file(cfg.path + "/" + name))
      throw ConfigError("data.path", "", 0,
                        fmt::format("'{}' has no {}: data.kind text needs a folder made by codistill-prepare-text "
                                    "(e.g. codistill-prepare-text --corpus /usr/share/doc/python3.11/html/_sources "
                                    "--suffix .rst.txt --out {})",
                                    cfg.path, name, cfg.path));
  const std::string tok_path = cfg.path + "/" + tokenizer_name;
  const std::uint64_t digest =
      bpe ? text::Tokenizer::load(tok_path).digest() : text::load_tokenizer_json(tok_path).digest();
  d.train = std::make_unique<text::TokenFile>(cfg.path + "/train.tokens");
  d.valid = std::make_unique<text::TokenFile>(cfg.path + "/valid.tokens");
  d.train->require_tokenizer(digest, tok_path);
  d.valid->require_tokenizer(digest, tok_path);
  d.vocab = d.train->info().vocab_size;
  if (d.valid->info().vocab_size != d.train->info().vocab_size)
    throw std::runtime_error(fmt::format("{}: vocabulary of {} tokens, {} has {}", d.valid->path(),
                                         d.valid->info().vocab_size, d.train->path(), d.vocab));
  return d;
}

double unigram_cross_entropy(const text::TokenFile& train) {
  std::vector<std::int64_t> counts(train.info().vocab_size, 0);
  std::vector<std::int32_t> doc;
  for (std::int64_t d = 0; d < train.documents(); ++d) {
    doc.resize(static_cast<std::size_t>(train.document_size(d)));
    train.copy_tokens(train.document_begin(d), train.document_size(d), doc.data());
    for (std::int32_t t : doc) ++counts[static_cast<std::size_t>(t)];
  }
  counts[train.info().end_of_document] += train.documents();  // one per document in the stream
  const double n = static_cast<double>(train.tokens() + train.documents());
  double h = 0;
  for (std::int64_t c : counts)
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  return h;
}

namespace {

text::WindowOptions group_options(text::WindowOptions o, RankSlice slice) {
  if (slice.ranks < 1 || slice.rank < 0 || slice.rank >= slice.ranks)
    throw std::invalid_argument(fmt::format("TextBatchSource: rank {} of {}", slice.rank, slice.ranks));
  o.batch_size *= slice.ranks;
  return o;
}

}  // namespace

TextBatchSource::TextBatchSource(const text::TokenFile& train, text::WindowOptions options, RankSlice slice)
    : vocab_(train.info().vocab_size),
      sampler_(train, group_options(options, slice)),
      slice_(slice),
      rows_(options.batch_size) {}

TextBatchSource::TextBatchSource(std::shared_ptr<const text::TokenStream> stream, std::int64_t vocab,
                                 text::WindowOptions options, RankSlice slice)
    : vocab_(vocab), sampler_(std::move(stream), group_options(options, slice)), slice_(slice),
      rows_(options.batch_size) {}

BatchLayout TextBatchSource::layout(std::int64_t rows) const {
  BatchLayout l;
  l.input = {rows, sampler_.options().context};
  l.input_dtype = kernels::DType::i32;
  l.labels = rows * sampler_.options().context;
  l.classes = vocab_;
  return l;
}

std::vector<std::int32_t> TextBatchSource::group_windows(std::int64_t step) const {
  std::vector<std::int32_t> w(static_cast<std::size_t>(sampler_.options().batch_size * sampler_.row_tokens()));
  sampler_.windows(step, w);
  return w;
}

void TextBatchSource::load(std::int64_t step, HostBatch& into, HostBatch* /*next*/) {
  // No prefetch: a batch is B x (T + 1) tokens copied out of the mapped file, microseconds
  // against any model's step.
  const std::int64_t T = sampler_.options().context, row = sampler_.row_tokens();
  const std::size_t parts = into.x.size();
  if (parts == 0 || into.labels.size() != parts || rows_ % static_cast<std::int64_t>(parts) != 0)
    throw std::logic_error(fmt::format("TextBatchSource: {} rows in {} micro-batches", rows_, parts));
  windows_.resize(static_cast<std::size_t>(sampler_.options().batch_size * row));
  sampler_.windows(step, windows_);
  const std::int64_t per = rows_ / static_cast<std::int64_t>(parts);
  const std::int64_t first = slice_.rank * rows_;  // this rank's first row in the group's batch
  into.rows.assign(parts, per * T);
  for (std::size_t i = 0; i < parts; ++i) {
    auto* x = into.x[i].data<std::int32_t>();
    auto* y = into.labels[i].data<std::int32_t>();
    for (std::int64_t r = 0; r < per; ++r) {
      const std::int32_t* w = windows_.data() + (first + static_cast<std::int64_t>(i) * per + r) * row;
      std::memcpy(x + r * T, w, static_cast<std::size_t>(T) * sizeof(std::int32_t));      // inputs: tokens 0..T-1
      std::memcpy(y + r * T, w + 1, static_cast<std::size_t>(T) * sizeof(std::int32_t));  // targets: tokens 1..T
    }
  }
  // Every token is a loss row (none ignored): the group's rows are R x B x T.
  into.group_rows = sampler_.options().batch_size * T;
}

SourceState TextBatchSource::checkpoint_state() const {
  // The windows are a pure function of the step: only what would make the same step draw
  // other windows is kept, to refuse a resume on other data.
  return {{"shard_size", {sampler_.stream().size()}}, {"context", {sampler_.options().context}}};
}

void TextBatchSource::restore(const SourceStateReader& read) {
  const std::int64_t shard = read("shard_size", 1)[0];
  if (shard != sampler_.stream().size())
    throw std::runtime_error(fmt::format("checkpoint was taken with a text shard of {} tokens, this run's has {} "
                                         "(data, shard mode or worker count changed)",
                                         shard, sampler_.stream().size()));
  const std::int64_t context = read("context", 1)[0];
  if (context != sampler_.options().context)
    throw std::runtime_error(fmt::format("checkpoint was taken with data.context {}, this run has {}", context,
                                         sampler_.options().context));
}

std::string TextBatchSource::describe() const {
  return fmt::format("{} ({} mode), windows of {} tokens", sampler_.stream().describe(),
                     data::shard_mode_name(sampler_.options().mode), sampler_.options().context);
}

}  // namespace codistill
