#pragma once
// Inverted dropout: in training each element is zeroed with probability p and the rest are
// scaled by 1/(1-p), so inference is the identity. The mask comes from the layer's own Rng
// (seeded from the model's init stream by init_params, i.e. by build_model); its state is
// part of a checkpoint (see rng(), collect_rngs) so that a resumed run draws the same
// masks. The mask is drawn on the host, in a staging tensor of the backend (the mask
// itself on the CPU, page-locked memory elsewhere), and copied on the layer's queue: every
// backend draws the masks a CPU run draws.
#include <memory>
#include <string>

#include "codistill/nn/module.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

class Dropout : public Layer {
 public:
  explicit Dropout(double p);  // 0 <= p < 1

  std::string kind() const override { return "dropout"; }
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  // Seeds the mask stream with one draw from rng (no parameters to initialize).
  void init_params(Rng& rng, const std::string& init) override;
  Rng* rng() override { return &rng_; }

  double p() const { return p_; }
  // The scale mask of the last training forward: 0 or 1/(1-p) per element (on the
  // layer's device).
  const kernels::Tensor& mask() const { return mask_; }

 protected:
  // Identity (returns x itself) when training is false or p == 0.
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;
  void queue_changed() override;

 private:
  double p_;
  Rng rng_;
  bool active_ = false;  // the last forward applied a mask
  kernels::Tensor mask_, y_, dx_;
  // The host side of the mask and an event after its copy, so that the next forward does
  // not overwrite the staging memory before the copy has read it.
  kernels::Tensor staging_;
  std::unique_ptr<kernels::Event> mask_copied_;
};

}  // namespace codistill
