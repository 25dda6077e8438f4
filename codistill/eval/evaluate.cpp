#include "codistill/eval/evaluate.hpp"

#include <algorithm>
#include <cstring>

#include "codistill/data/sampler.hpp"
#include "codistill/nn/buffer.hpp"

namespace codistill {

using kernels::Tensor;

const Tensor& HostLogits::fetch(const Tensor& logits, kernels::Queue& q) {
  if (!host_.defined() || host_.shape() != logits.shape() || (alias_ && !host_.same_memory(logits))) {
    host_ = q.backend().staging_for(logits);
    alias_ = host_.same_memory(logits);
  }
  q.copy(host_, logits);
  q.synchronize();
  return host_;
}

EvalResult evaluate(Model& model, const data::Dataset& d, std::int64_t batch, std::vector<std::int32_t>* predictions,
                    const LogitsFn& on_logits) {
  EvalResult r;
  data::EvalBatches batches(d, batch);
  kernels::Queue& q = model.queue();
  kernels::Queue& host_q = kernels::default_cpu_queue();
  Tensor x, x_device, x_stage, labels_host;
  HostLogits fetched;
  std::vector<std::int32_t> labels;
  if (predictions) predictions->clear();
  double loss_sum = 0;
  std::int64_t correct = 0;
  while (batches.next(x, labels)) {
    const std::int64_t b = x.dim(0);
    // In through the backend's staging memory (the batch tensor itself on the CPU), out
    // likewise; the metrics then run on the host whatever the device.
    if (!x_device.defined() || x_device.shape() != x.shape()) {
      nn::ensure_buffer(x_device, x.shape(), x.dtype(), q);
      x_stage = q.backend().staging_for(x_device);
    }
    if (!x_stage.same_memory(x)) x_stage.copy_from(x);
    q.copy(x_device, x_stage);
    const Tensor& logits_host = fetched.fetch(model.forward(x_device, /*training=*/false), q);
    const std::int64_t V = logits_host.dim(1);
    nn::ensure_buffer(labels_host, {b}, kernels::DType::i32, host_q);
    std::memcpy(labels_host.raw(), labels.data(), labels.size() * sizeof(std::int32_t));
    const auto res = host_q.backend().distill_loss(logits_host, {}, labels_host, nullptr, {}, host_q);
    loss_sum += res.ce * static_cast<double>(b);
    const float* z = logits_host.data<float>();
    for (std::int64_t i = 0; i < b; ++i) {
      const float* row = z + i * V;
      auto cls = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
      correct += cls == labels[static_cast<std::size_t>(i)];
      if (predictions) predictions->push_back(cls);
    }
    if (on_logits) on_logits(logits_host, r.examples);
    r.examples += b;
  }
  r.loss = loss_sum / static_cast<double>(r.examples);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.examples);
  return r;
}

}  // namespace codistill
