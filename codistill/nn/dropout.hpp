#pragma once
// Inverted dropout: in training each element is zeroed with probability p and the rest are
// scaled by 1/(1-p), so inference is the identity. The mask comes from the layer's own Rng
// (seeded from the model's init stream by init_params, i.e. by build_model); its state is
// part of a checkpoint (see rng()/Model::rngs()) so that a resumed run draws the same masks.
// On CUDA the mask is drawn on the host exactly as on the CPU (same stream, same values),
// staged in pinned memory and copied to the device on the layer's stream: a CUDA run
// draws the masks a CPU run draws.
#include <memory>
#include <string>

#include "codistill/nn/layer.hpp"
#include "codistill/util/device_memory.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cuda/context.hpp"

namespace codistill {

class Dropout : public Layer {
 public:
  explicit Dropout(double p);  // 0 <= p < 1

  std::string kind() const override { return "dropout"; }
  // Identity (returns x itself) when training is false or p == 0.
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }
  // Seeds the mask stream with one draw from rng (no parameters to initialize).
  void init_params(Rng& rng, const std::string& init) override;
  Rng* rng() override { return &rng_; }
  void to_device(kernels::Device device, const kernels::cuda::Context& ctx = {}) override;

  double p() const { return p_; }
  // The scale mask of the last training forward: 0 or 1/(1-p) per element (on the
  // layer's device).
  const kernels::Tensor& mask() const { return mask_; }

 private:
  kernels::Tensor forward_cuda(const kernels::Tensor& x);

  double p_;
  Rng rng_;
  bool active_ = false;  // the last forward applied a mask
  kernels::Tensor mask_, y_, dx_;
  // CUDA: the host side of the mask, and an event after its copy so that the next forward
  // does not overwrite the pinned buffer before the copy has read it.
  PinnedBuffer host_mask_;
  std::unique_ptr<kernels::cuda::Event> mask_copied_;
};

}  // namespace codistill
