#pragma once
// What a run's kind of data brings to training (data.kind): its data, the batch source of
// phase 1, the evaluation of the eval events, and what its metrics and log lines say. Images
// (arrays, fashion-mnist, idx, synthetic: per-example loss and accuracy) and text (token windows:
// per-token loss, perplexity) are the two today; a third kind of data is one more
// implementation of this interface, not a branch in the set-up and the run loop.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/feed/batch_source.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/models/model.hpp"
#include "codistill/persist/metrics.hpp"
#include "kernels/device.hpp"

namespace codistill {

class Modality {
 public:
  virtual ~Modality() = default;

  // Opens the data of the config the modality was made for and gives the model section
  // `mc` its input shape and classes (`section`: "model" or "worker_models.N", for errors).
  virtual void load(ModelConfig& mc, const std::string& section) = 0;
  // The data's lines at the start of the log (`load_s`: the seconds load took).
  virtual void log_data(spdlog::logger& log, double load_s) = 0;
  // Phase 1's source for rank `slice` of the group (every rank draws the group's whole
  // batch and trains on its own slice), logging the feed's choices; `prefetch` says whether
  // batches are prepared a step ahead. Made once, after load.
  virtual std::unique_ptr<BatchSource> make_source(RankSlice slice, const kernels::Device& device,
                                                   spdlog::logger& log, bool& prefetch) = 0;
  // The eval events' measure of a model (the student or a teacher); predictions, for churn,
  // per example or per token.
  virtual EvalResult evaluate(Model& model, std::vector<std::int32_t>* predictions) = 0;
  // The teacher gate's measure (teachers/teacher_gate.hpp): `model` on a fixed probe of the
  // held-out data, its first `rows` label rows (images: test examples; text: tokens, in
  // whole held-out windows, at least one).
  virtual EvalResult probe(Model& model, std::int64_t rows) = 0;
  // The probe's size when codistill.gate.probe leaves it to the data (0): enough rows for a
  // broken model to stand out, few enough to cost a small part of a reload period.
  virtual std::int64_t probe_rows() const = 0;
  // What checkpoints record of the inputs, and what fixed teachers must share.
  virtual data::Normalization normalization() const = 0;
  // The data section this worker reads: the config's, with {worker} and {rank} resolved
  // and data.shard auto decided (data/worker_paths.hpp).
  virtual const DataConfig& data() const = 0;
  // Bytes of host memory the loaded data holds (examples and labels, decoded or mapped;
  // token streams), for the memory plan.
  virtual std::int64_t data_bytes() const = 0;

  // The run's first metrics event, where the data has one to say (what "learning" means).
  virtual void emit_first(MetricsWriter& metrics, std::int64_t step) const = 0;
  // The fields that `train`, `eval` and `done` events add for this data (DESIGN.md
  // section 7 names the common ones), and the eval and done lines of the log.
  virtual void add_train_fields(nlohmann::json& fields, double examples_per_s) const = 0;
  virtual void add_eval_fields(nlohmann::json& fields, const EvalResult& r) const = 0;
  virtual void add_done_fields(nlohmann::json& fields, double loss) const = 0;
  virtual std::string eval_line(std::int64_t step, const EvalResult& r, double seconds) const = 0;
  virtual std::string done_line(std::int64_t steps, const std::string& wall, double examples_per_s,
                                const EvalResult& r) const = 0;
};

// The modality of data.kind (text or tokens: text; every other kind: images) for rank
// `rank` of worker run.worker, whose data paths it resolves (data::for_worker).
std::unique_ptr<Modality> make_modality(const Config& cfg, int rank);
// The two implementations (train/modality_images.cpp, train/modality_text.cpp), given the
// config with the worker's data section.
std::unique_ptr<Modality> make_image_modality(Config cfg);
std::unique_ptr<Modality> make_text_modality(Config cfg);


// Model section `mc` against the data: model.vocab_size (when set) must equal `vocab`, and
// a gpt's model.seq_len must be data.context (it takes exactly that). Throws ConfigError naming the key
// (`section` is "model" or "worker_models.N") and both values.
void check_text_model(const ModelConfig& mc, std::int64_t vocab, std::int64_t context, const std::string& section);

}  // namespace codistill
