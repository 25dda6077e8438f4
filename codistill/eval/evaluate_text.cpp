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

EvalResult evaluate_text(Model& model, const data::text::EvalWindows& windows, std::int64_t batch, std::int64_t limit,
                         std::vector<std::int32_t>* predictions) {
  if (batch < 1) throw std::invalid_argument("evaluate_text: batch must be >= 1");
  const std::int64_t count = limit > 0 ? std::min(limit, windows.count()) : windows.count();
  const std::int64_t row = windows.row_tokens(), T = row - 1;
  kernels::Queue& q = model.queue();
  kernels::Queue& host_q = kernels::default_cpu_queue();
  Tensor x_device, x_stage, labels_host;
  HostLogits fetched;
  std::vector<std::int32_t> tokens;
  if (predictions) predictions->clear();
  EvalResult r;
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < count; first += batch) {
    const std::int64_t n = std::min(batch, count - first);
    tokens.resize(static_cast<std::size_t>(n * row));
    windows.windows(first, tokens);
    if (!x_device.defined() || x_device.dim(0) != n) {
      nn::ensure_buffer(x_device, {n, T}, kernels::DType::i32, q);
      x_stage = q.backend().staging_for(x_device);
    }
    nn::ensure_buffer(labels_host, {n * T}, kernels::DType::i32, host_q);
    auto* x = x_stage.data<std::int32_t>();
    auto* y = labels_host.data<std::int32_t>();
    for (std::int64_t b = 0; b < n; ++b) {
      std::memcpy(x + b * T, tokens.data() + b * row, static_cast<std::size_t>(T) * sizeof(std::int32_t));
      std::memcpy(y + b * T, tokens.data() + b * row + 1, static_cast<std::size_t>(T) * sizeof(std::int32_t));
    }
    q.copy(x_device, x_stage);
    const Tensor& logits_host = fetched.fetch(model.forward(x_device, /*training=*/false), q);
    const std::int64_t rows = n * T;
    if (logits_host.dim(0) != rows)
      throw std::runtime_error("evaluate_text: the model gave " + std::to_string(logits_host.dim(0)) +
                               " rows of logits for " + std::to_string(n) + " windows of " + std::to_string(T) +
                               " tokens (expected [B*T, V])");
    const std::int64_t V = logits_host.dim(1);
    const auto res = host_q.backend().distill_loss(logits_host, {}, labels_host, nullptr, {}, host_q);
    loss_sum += res.ce * static_cast<double>(rows);
    const float* z = logits_host.data<float>();
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* zr = z + i * V;
      const auto tok = static_cast<std::int32_t>(std::max_element(zr, zr + V) - zr);
      correct += tok == y[i];
      if (predictions) predictions->push_back(tok);
    }
    r.examples += rows;
  }
  r.loss = loss_sum / static_cast<double>(r.examples);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.examples);
  return r;
}

}  // namespace codistill
