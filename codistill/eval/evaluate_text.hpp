#pragma once
// Evaluation of a language model on the held-out windows (data.kind text): every token of
// a window after the first is a prediction, so the metrics are per token — mean
// cross-entropy (nats), next-token accuracy (the first maximum, as for images), and the
// predicted token of each position for churn. Perplexity is exp(loss). The same
// definitions as evaluate() (eval/evaluate.hpp), over label rows instead of examples.
#include <cstdint>
#include <vector>

#include "codistill/data/text/tokens/window_sampler.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

// Windows per evaluation batch for train.eval_batch_size, which counts label rows (the
// rows of the logits, which bound its memory): whole windows of T tokens, at least one.
std::int64_t eval_windows_per_batch(std::int64_t eval_batch_size, std::int64_t context);

// The logits of a batch, [B*T, V], are formed a chunk of rows at a time where the model
// ends in a linear head (Model::linear_head): the features once, then the head on each
// chunk of their rows, at most this many bytes of float32 logits (at least one row).
// [B*T, V] for configs/gpt2_124m.yaml's evaluation would be 2.6 GiB.
inline constexpr std::int64_t kEvalLogitChunkBytes = std::int64_t{64} << 20;
// The rows of such a chunk for `rows` label rows and `classes` (V) logits each.
std::int64_t eval_logit_rows(std::int64_t rows, std::int64_t classes, std::int64_t chunk_bytes = kEvalLogitChunkBytes);

// The first `limit` windows (0 or more than there are: all), `batch` windows at a time, in
// order. EvalResult::examples counts tokens. predictions, when given, receives the argmax
// token of every position, window after window. The metrics are those of the whole logits
// at once within float rounding (the loss sums chunks' means; the same kernels per row).
EvalResult evaluate_text(Model& model, const data::text::EvalWindows& windows, std::int64_t batch, std::int64_t limit,
                         std::vector<std::int32_t>* predictions = nullptr,
                         std::int64_t logit_chunk_bytes = kEvalLogitChunkBytes);

}  // namespace codistill
