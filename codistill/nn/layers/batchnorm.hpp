#pragma once
// Batch normalization (BatchNorm1d over [B, C] or [B, C, L], BatchNorm2d over [B, C, H, W]):
// per channel, y = (x - mean) / sqrt(var + eps) * weight + bias, with the batch's
// statistics in training and the running statistics in evaluation (kernels/ops.hpp,
// BatchNormShape, states the arithmetic). Momentum follows PyTorch: running = (1 -
// momentum) * running + momentum * batch statistic, the running variance unbiased.
// The running statistics are buffers ("running_mean", "running_var"): they reach
// checkpoints and teachers, and the optimizer never touches them.
// Synchronized (set_group_sum; group.sync_batchnorm): in training the statistics are those
// of every rank's rows, through two float64 all-reduces per forward and backward
// (Op::batchnorm_sync in kernels/ops.hpp); dgamma/dbeta stay this rank's share, summed by
// the group's gradient all-reduce.
// Channels-last (set_channels_last): a 4-D input's map is NHWC, normalized as [B*H*W, C]
// rows (BatchNormShape with spatial 1): the same statistics, another memory order.
// Fused activation (set_fused_activation, relu only; set by the container where the backend
// supports Op::batchnorm_activation, with the ReLU layer after it passing through): the
// output is relu(bn(x)) from the normalize pass, and backward folds the mask y > 0 into its
// own passes. Synchronized, the relu runs as its own op after the synchronized steps.
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "codistill/nn/channels_last.hpp"
#include "codistill/nn/group_sum.hpp"
#include "codistill/nn/module.hpp"

namespace codistill {

class BatchNorm : public Layer, public ChannelsLastLayer {
 public:
  // weight = 1, bias = 0, running_mean = 0, running_var = 1 (float32).
  explicit BatchNorm(std::int64_t channels, double eps = 1e-5, double momentum = 0.1);

  std::string kind() const override { return "batchnorm"; }
  std::vector<Param> params() override { return {{"weight", &gamma_, &dgamma_}, {"bias", &beta_, &dbeta_}}; }
  std::vector<Buffer> buffers() override { return {{"running_mean", &mean_}, {"running_var", &var_}}; }
  // [C], [C, L] or [C, H, W]: the shape itself.
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void init_params(Rng& rng, const std::string& init) override;

  std::int64_t channels() const { return channels_; }
  // Training statistics over the ranks of a group from now on (null: this rank's own).
  void set_group_sum(std::shared_ptr<GroupSum> sum) { group_sum_ = std::move(sum); }
  bool synchronized() const { return group_sum_ != nullptr; }
  // The output is act(bn(x)) (relu; `none` unfuses). Set by the container (Sequential)
  // together with the activation layer's pass-through.
  void set_fused_activation(kernels::Activation act);
  kernels::Activation fused_activation() const { return fused_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::BatchNormShape shape_of(const kernels::Tensor& x) const;

  std::int64_t channels_;
  double eps_, momentum_;
  kernels::Activation fused_ = kernels::Activation::none;
  kernels::Tensor gamma_, beta_, dgamma_, dbeta_, mean_, var_;
  kernels::Tensor x_, y_, dx_, save_mean_, save_invstd_;
  kernels::Tensor dpre_;  // synchronized with a fused activation: dy before the activation
  // The sums of Op::batchnorm_sync: this rank's (backward keeps them for dgamma/dbeta) and
  // the group's.
  void all_reduce(kernels::Tensor& sums);
  std::shared_ptr<GroupSum> group_sum_;
  kernels::Tensor local_sums_, sums_, host_sums_;
  const void* staged_for_ = nullptr;  // the sums host_sums_ stages
  bool trained_ = false;  // the last forward used batch statistics
  bool synced_ = false;   // ... and they were the group's
};

}  // namespace codistill
