// Text (data.kind text or tokens): windows of T + 1 tokens from a prepared folder or token
// shards (data/feed/lm_data.hpp); every token after
// a window's first is a prediction, so loss, accuracy and churn are per token, and the loss
// is read against the unigram baseline (nats per token).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "codistill/data/feed/lm_data.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/eval/evaluate_text.hpp"
#include "codistill/train/modality.hpp"
#include "codistill/util/config_error.hpp"

namespace codistill {

void check_text_model(const ModelConfig& mc, std::int64_t vocab, std::int64_t context, const std::string& section) {
  if (mc.vocab_size > 0 && mc.vocab_size != vocab)
    throw ConfigError(section + ".vocab_size", "", 0,
                      fmt::format("is {} but the token files of data.path have a vocabulary of {} (set {} or 0, "
                                  "which takes the data's)",
                                  mc.vocab_size, vocab, vocab));
  if (mc.kind == "gpt" && context != mc.seq_len)
    throw ConfigError("data.context", "", 0,
                      fmt::format("is {} but {}.seq_len is {}: a gpt model takes windows of exactly seq_len tokens",
                                  context, section, mc.seq_len));
}

namespace {

class TextModality final : public Modality {
 public:
  explicit TextModality(Config cfg) : c_(std::move(cfg)) {}

  // A language model reads [B, T] token ids and predicts the vocabulary at every position.
  void load(ModelConfig& mc, const std::string& section) override {
    text_ = load_lm_data(c_.data, mc.vocab_size);
    check_text_model(mc, text_->vocab(), c_.data.context, section);
    mc.input_shape = {c_.data.context};
    mc.classes = text_->vocab();
    if (mc.vocab_size == 0) mc.vocab_size = text_->vocab();  // recorded in checkpoints' model attribute
    eval_windows_ = std::make_unique<data::text::EvalWindows>(text_->valid(), c_.data.context);
  }

  void log_data(spdlog::logger& log, double load_s) override {
    unigram_ = text_->unigram_cross_entropy();
    log.info("data: {}, {} held-out windows of {} tokens, vocabulary {}, opened in {:.1f} s", text_->describe(),
             eval_windows_->count(), c_.data.context, text_->vocab(), load_s);
    log.info("unigram baseline: {:.4f} nats per token (perplexity {:.1f}): the loss of predicting token "
             "frequencies without context; a model that learns goes below it",
             unigram_, std::exp(unigram_));
  }

  std::unique_ptr<BatchSource> make_source(RankSlice slice, const kernels::Device&, spdlog::logger&,
                                           bool& prefetch) override {
    data::text::WindowOptions wo;
    wo.batch_size = c_.data.batch_size;
    wo.context = c_.data.context;
    wo.mode = data::parse_shard_mode(c_.data.shard);
    wo.seed = c_.run.seed;
    wo.worker = c_.run.worker;
    wo.workers = c_.run.workers;
    prefetch = false;
    return std::make_unique<TextBatchSource>(text_->train(wo.mode, wo.worker, wo.workers), text_->vocab(), wo,
                                             slice);
  }

  EvalResult evaluate(Model& model, std::vector<std::int32_t>* predictions) override {
    const std::int64_t batch = eval_windows_per_batch(c_.train.eval_batch_size, c_.data.context);
    return evaluate_text(model, *eval_windows_, batch, c_.data.test_limit, predictions);
  }
  EvalResult probe(Model& model, std::int64_t rows) override {
    const std::int64_t T = c_.data.context;
    const std::int64_t windows = std::max<std::int64_t>(1, (rows + T - 1) / T);
    return evaluate_text(model, *eval_windows_, eval_windows_per_batch(c_.train.eval_batch_size, T), windows);
  }
  // Tokens of one window are of one document: several windows, for a loss of several.
  std::int64_t probe_rows() const override { return 1024; }
  data::Normalization normalization() const override { return {}; }
  const DataConfig& data() const override { return c_.data; }

  void emit_first(MetricsWriter& metrics, std::int64_t step) const override {
    metrics.emit("data", step,
                 {{"kind", text_->kind()}, {"vocab_size", text_->vocab()}, {"context", c_.data.context},
                  {"train_tokens", text_->train_tokens()}, {"eval_windows", eval_windows_->count()},
                  {"unigram_ce", unigram_}});
  }
  void add_train_fields(nlohmann::json& fields, double examples_per_s) const override {
    fields["tokens_per_s"] = examples_per_s * static_cast<double>(c_.data.context);  // examples are windows
  }
  // The loss is nats per token; accuracy and churn are per predicted token.
  void add_eval_fields(nlohmann::json& fields, const EvalResult& r) const override {
    fields["perplexity"] = std::exp(r.loss);
    fields["tokens"] = r.examples;
  }
  void add_done_fields(nlohmann::json& fields, double loss) const override { fields["perplexity"] = std::exp(loss); }
  std::string eval_line(std::int64_t step, const EvalResult& r, double seconds) const override {
    return fmt::format("eval  step {:>7}  held-out loss {:.4f} nats/token  perplexity {:.2f}  next-token accuracy "
                       "{:.2f}%  ({:.1f} s)", step, r.loss, std::exp(r.loss), 100 * r.accuracy, seconds);
  }
  // The training and held-out streams, mapped at the files' width (uint16 for a vocabulary
  // of at most 65536 ids), resident as windows are read.
  std::int64_t data_bytes() const override {
    if (!text_) return 0;
    const auto valid = text_->valid();
    const auto width = static_cast<std::int64_t>(data::text::token_width(static_cast<std::uint32_t>(text_->vocab())));
    return width * (text_->train_tokens() + (valid ? valid->size() : 0));
  }
  std::string done_line(std::int64_t steps, const std::string& wall, double examples_per_s,
                        const EvalResult& r) const override {
    return fmt::format("done: {} steps in {} ({:.0f} training windows/s), held-out loss {:.4f} nats/token, "
                       "perplexity {:.2f}, next-token accuracy {:.2f}%",
                       steps, wall, examples_per_s, r.loss, std::exp(r.loss), 100 * r.accuracy);
  }

 private:
  const Config c_;  // the run's, with this worker's data section (data::for_worker)
  std::unique_ptr<LmData> text_;
  std::unique_ptr<data::text::EvalWindows> eval_windows_;
  double unigram_ = 0;  // nats per token, measured for the start of the log
};

}  // namespace

std::unique_ptr<Modality> make_text_modality(Config cfg) { return std::make_unique<TextModality>(std::move(cfg)); }

}  // namespace codistill
