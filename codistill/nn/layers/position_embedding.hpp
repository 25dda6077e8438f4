#pragma once
// Learned position embedding (GPT-2's wpe): y[b*T + t, :] = x[b*T + t, :] + weight[t, :] over
// token rows [B*T, dim] (the layout Embedding produces), T = seq_len. The lookup is the
// embedding op with ids t (built once per batch size), then an add; backward passes dy
// through and scatters it into dweight by t.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

class PositionEmbedding : public Layer {
 public:
  PositionEmbedding(std::int64_t seq_len, std::int64_t dim);

  std::string kind() const override { return "position_embedding"; }
  std::vector<Param> params() override { return {{"weight", &w_, &dw_}}; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;  // [dim] -> [dim]
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void init_params(Rng& rng, const std::string& init) override;             // N(0, 0.02^2)

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  std::int64_t seq_len_, dim_;
  kernels::Tensor w_, dw_, ids_, ids_host_, y_;
  bool forwarded_ = false;
};

}  // namespace codistill
