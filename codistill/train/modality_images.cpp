// Images (data.kind fashion-mnist | idx | synthetic): examples drawn by the sampler,
// gathered and augmented on the host; loss and accuracy per example.
#include <algorithm>

#include <fmt/format.h>

#include "codistill/config/feed_options.hpp"
#include "codistill/data/augment.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/worker_paths.hpp"
#include "codistill/data/feed/batch_loader.hpp"
#include "codistill/train/modality.hpp"
#include "kernels/backend.hpp"

namespace codistill {
namespace {

class ImageModality final : public Modality {
 public:
  explicit ImageModality(Config cfg) : c_(std::move(cfg)) {}

  void load(ModelConfig& mc, const std::string&) override {
    data_ = data::load_dataset(c_.data);
    mc.input_shape = data_.train.example_shape();
    mc.classes = data_.train.classes;
  }

  std::int64_t data_bytes() const override {
    auto bytes = [](const data::Dataset& d) {
      return static_cast<std::int64_t>(d.images.nbytes() + d.labels.size() * sizeof(std::int32_t) + d.codes.size() +
                                       d.mapped.size());
    };
    return bytes(data_.train) + bytes(data_.test);
  }

  void log_data(spdlog::logger& log, double load_s) override {
    const data::Dataset& t = data_.train;
    log.info("data: {} train / {} test examples of shape {}, {} classes, normalization {} "
             "(shift {:.4f}, scale {:.4f}), loaded in {:.1f} s",
             t.size(), data_.test.size(), kernels::shape_str(t.example_shape()), t.classes, t.normalization.kind,
             t.normalization.shift, t.normalization.scale, load_s);
  }

  std::unique_ptr<BatchSource> make_source(RankSlice slice, const kernels::Device& device, spdlog::logger& log,
                                           bool& prefetch) override {
    data::SamplerOptions sampler_opts = data::sampler_options(c_);
    sampler_opts.batch_size *= slice.ranks;
    sampler_ = std::make_unique<data::BatchSampler>(data_.train, sampler_opts);
    const data::AugmentOptions augment = data::augment_options(c_, data_.train.normalization);
    prefetch = prefetch_batches(c_.data.prefetch, device, kernels::backend_for(kernels::DeviceKind::cpu).threads());
    log.info("batch prefetch: {}{}", prefetch ? "on" : "off",
             c_.data.prefetch == "auto" ? " (data.prefetch: auto)" : "");
    if (augment.enabled())
      log.info("augmentation of training batches: random crop with padding {} (fill {:.4f}, raw 0), flip {}",
               augment.crop_padding, augment.fill, augment.flip ? "on" : "off");
    return std::make_unique<ImageBatchSource>(data_.train, *sampler_, augment, prefetch, slice);
  }

  EvalResult evaluate(Model& model, std::vector<std::int32_t>* predictions) override {
    return codistill::evaluate(model, data_.test, c_.train.eval_batch_size, predictions);
  }
  EvalResult probe(Model& model, std::int64_t rows) override {
    if (!probe_ || probe_->size() != std::min(rows, data_.test.size())) {
      probe_ = std::make_unique<data::Dataset>(data_.test);
      data::truncate(*probe_, rows);
    }
    return codistill::evaluate(model, *probe_, c_.train.eval_batch_size);
  }
  std::int64_t probe_rows() const override { return 128; }
  data::Normalization normalization() const override { return data_.train.normalization; }
  const DataConfig& data() const override { return c_.data; }

  void emit_first(MetricsWriter&, std::int64_t) const override {}
  void add_train_fields(nlohmann::json&, double) const override {}
  void add_eval_fields(nlohmann::json&, const EvalResult&) const override {}
  void add_done_fields(nlohmann::json&, double) const override {}
  std::string eval_line(std::int64_t step, const EvalResult& r, double seconds) const override {
    return fmt::format("eval  step {:>7}  test loss {:.4f}  accuracy {:.2f}%  ({:.1f} s)", step, r.loss,
                       100 * r.accuracy, seconds);
  }
  std::string done_line(std::int64_t steps, const std::string& wall, double examples_per_s,
                        const EvalResult& r) const override {
    return fmt::format("done: {} steps in {} ({:.0f} training ex/s), test accuracy {:.2f}%, test loss {:.4f}", steps,
                       wall, examples_per_s, 100 * r.accuracy, r.loss);
  }

 private:
  const Config c_;  // the run's, with this worker's data section (data::for_worker)
  data::Splits data_;
  // The sampler the batch source draws from: the source keeps a reference, and the
  // modality outlives the step that owns the source.
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::Dataset> probe_;  // the teacher gate's: the test split's first rows
};

}  // namespace

std::unique_ptr<Modality> make_image_modality(Config cfg) { return std::make_unique<ImageModality>(std::move(cfg)); }

std::unique_ptr<Modality> make_modality(const Config& cfg, int rank) {
  Config mine = cfg;
  mine.data = data::for_worker(cfg.data, cfg.run.worker, rank);
  return is_token_data(mine.data) ? make_text_modality(std::move(mine)) : make_image_modality(std::move(mine));
}

}  // namespace codistill
