#pragma once
// Evaluation of a model over a dataset (inference mode), shared by the trainer's `eval`
// events and codistill-inspect's eval/churn: one definition of loss (mean cross-entropy),
// accuracy and the predicted class (the first maximum), so that a checkpoint scores
// offline exactly what its run measured.
#include <cstdint>
#include <functional>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  std::int64_t examples = 0;
};

// Called with each batch's logits on the host ([b, V] float32) and the index of the
// batch's first example.
using LogitsFn = std::function<void(const kernels::Tensor& logits, std::int64_t first)>;

// The logits of an inference forward, brought to the host through the backend's staging
// memory (on the CPU the logits buffer itself, no copy), reused from batch to batch; shared
// by the image and the text evaluation. fetch() waits for the model's queue.
class HostLogits {
 public:
  const kernels::Tensor& fetch(const kernels::Tensor& logits, kernels::Queue& q);

 private:
  kernels::Tensor host_;
  bool alias_ = false;  // the staging tensor is the logits buffer itself (the CPU)
};

// Runs model over d in order, `batch` rows at a time, on the model's device (inputs staged
// and copied on its queue, logits copied back). predictions, when given, receives the
// argmax class of every example.
EvalResult evaluate(Model& model, const data::Dataset& d, std::int64_t batch,
                    std::vector<std::int32_t>* predictions = nullptr, const LogitsFn& on_logits = {});

}  // namespace codistill
