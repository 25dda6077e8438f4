#include "codistill/eval/evaluate_text.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "codistill/nn/buffer.hpp"

namespace codistill {

using kernels::Tensor;

std::int64_t eval_windows_per_batch(std::int64_t eval_batch_size, std::int64_t context) {
  return std::max<std::int64_t>(1, eval_batch_size / context);
}

std::int64_t eval_logit_rows(std::int64_t rows, std::int64_t classes, std::int64_t chunk_bytes) {
  return std::clamp<std::int64_t>(chunk_bytes / (4 * std::max<std::int64_t>(1, classes)), 1, std::max<std::int64_t>(1, rows));
}

namespace {

// What the batches add up to.
struct Tally {
  double loss_sum = 0;
  std::int64_t correct = 0;
};

// Loss, accuracy and predictions of the label rows [first, first + logits rows) from their
// logits on the host.
void tally(const Tensor& logits_host, const Tensor& labels_host, std::int64_t first, Tally& t,
           std::vector<std::int32_t>* predictions) {
  kernels::Queue& host_q = kernels::default_cpu_queue();
  const std::int64_t rows = logits_host.dim(0), V = logits_host.dim(1);
  const Tensor labels = labels_host.view(first, {rows});
  const auto res = host_q.backend().distill_loss(logits_host, {}, labels, nullptr, {}, host_q);
  t.loss_sum += res.ce * static_cast<double>(rows);
  const float* z = logits_host.data<float>();
  const std::int32_t* y = labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* zr = z + i * V;
    const auto tok = static_cast<std::int32_t>(std::max_element(zr, zr + V) - zr);
    t.correct += tok == y[i];
    if (predictions) predictions->push_back(tok);
  }
}

// The batch's logits, `chunk` rows at a time: the features once, then the head (the last
// module, a linear map) on each chunk of their rows, so that no [B*T, V] tensor exists. A
// model without a linear head gives all its logits at once.
void tally_batch(Model& model, const Tensor& x, const Tensor& labels_host, std::int64_t chunk_bytes,
                 HostLogits& fetched, Tally& t, std::vector<std::int32_t>* predictions) {
  kernels::Queue& q = model.queue();
  const std::int64_t rows = labels_host.dim(0);
  const auto check_rows = [&](std::int64_t got) {
    if (got != rows)
      throw std::runtime_error("evaluate_text: the model gave " + std::to_string(got) + " rows of logits for " +
                               std::to_string(x.dim(0)) + " windows of " + std::to_string(x.dim(1)) +
                               " tokens (expected [B*T, V])");
  };
  const auto head = model.linear_head();
  if (!head) {
    const Tensor& logits = fetched.fetch(model.forward(x, /*training=*/false), q);
    check_rows(logits.dim(0));
    tally(logits, labels_host, 0, t, predictions);
    return;
  }
  const Tensor h = model.forward_features(x, /*training=*/false);
  check_rows(h.dim(0));
  Module& last = *model.root().children().back().second;
  const std::int64_t D = h.dim(1), chunk = eval_logit_rows(rows, head->weight->dim(0), chunk_bytes);
  for (std::int64_t first = 0; first < rows; first += chunk) {
    const std::int64_t n = std::min(chunk, rows - first);
    tally(fetched.fetch(last.forward(h.view(first * D, {n, D}), /*training=*/false), q), labels_host, first, t,
          predictions);
  }
}

}  // namespace

EvalResult evaluate_text(Model& model, const data::text::EvalWindows& windows, std::int64_t batch, std::int64_t limit,
                         std::vector<std::int32_t>* predictions, std::int64_t logit_chunk_bytes) {
  if (batch < 1) throw std::invalid_argument("evaluate_text: batch must be >= 1");
  const std::int64_t count = limit > 0 ? std::min(limit, windows.count()) : windows.count();
  const std::int64_t row = windows.row_tokens(), T = row - 1;
  kernels::Queue& q = model.queue();
  Tensor x_device, x_stage, labels_host;
  HostLogits fetched;
  std::vector<std::int32_t> tokens;
  if (predictions) predictions->clear();
  EvalResult r;
  Tally t;
  for (std::int64_t first = 0; first < count; first += batch) {
    const std::int64_t n = std::min(batch, count - first);
    tokens.resize(static_cast<std::size_t>(n * row));
    windows.windows(first, tokens);
    if (!x_device.defined() || x_device.dim(0) != n) {
      nn::ensure_buffer(x_device, {n, T}, kernels::DType::i32, q);
      x_stage = q.backend().staging_for(x_device);
    }
    nn::ensure_buffer(labels_host, {n * T}, kernels::DType::i32, kernels::default_cpu_queue());
    auto* x = x_stage.data<std::int32_t>();
    auto* y = labels_host.data<std::int32_t>();
    for (std::int64_t b = 0; b < n; ++b) {
      std::memcpy(x + b * T, tokens.data() + b * row, static_cast<std::size_t>(T) * sizeof(std::int32_t));
      std::memcpy(y + b * T, tokens.data() + b * row + 1, static_cast<std::size_t>(T) * sizeof(std::int32_t));
    }
    q.copy(x_device, x_stage);
    tally_batch(model, x_device, labels_host, logit_chunk_bytes, fetched, t, predictions);
    r.examples += n * T;
  }
  r.loss = t.loss_sum / static_cast<double>(r.examples);
  r.accuracy = static_cast<double>(t.correct) / static_cast<double>(r.examples);
  return r;
}

}  // namespace codistill
