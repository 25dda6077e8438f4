#pragma once
// The CPU fast path of float32 2-D convolution: oneDNN's convolution primitives (forward,
// backward-data, backward-weights with the bias gradient), the library PyTorch's CPU
// convolutions run on. Its JIT kernels work on blocked layouts (channels in blocks of 16
// for AVX-512), which beat our im2col + OpenBLAS GEMM several times on the small maps and
// channel counts of the image models. NCHW maps are reordered in and out per call where the
// primitive wants another layout (a third of the convolutions' time in ResNet-8's step);
// channels-last (NHWC) maps (Conv2dShape::channels_last) go to oneDNN's direct NHWC kernels
// as they are. Weights stay OIHW outside this class.
//
// One DnnlConv per CPU queue (the queue owns its library state, as a CUDA queue its cuDNN
// handle): the engine and stream, the primitives per shape and thread count (creating one
// costs far more than running it), the reorders around them, and the scratch memory they
// all share (oneDNN's scratchpad in user mode, the blocked copies): grown to the largest
// call, reused by every call, freed with the queue. Calls from several threads take turns
// (a mutex: the shared default CPU queue can be reached from any thread). The blocked
// copies cost memory: up to three operands of the largest call (an evaluation batch of 1000
// through ResNet-8's first stage: 3 x 50 MB), kept for the queue's life.
//
// Deterministic: a given shape and thread count always gets the same primitive, and
// oneDNN's CPU convolutions reduce in a fixed order, so the outputs are bit-identical run to
// run. Gradients accumulate (dw += ..., db += ...) as the Backend contract says: oneDNN writes
// them into scratch, then they are added in (the weight gradient by a reorder with a sum).
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

class DnnlConv {
 public:
  DnnlConv();
  ~DnnlConv();
  DnnlConv(const DnnlConv&) = delete;
  DnnlConv& operator=(const DnnlConv&) = delete;

  // False when oneDNN has no primitive for this shape (the caller then takes the im2col
  // path); the answer is cached with the shape.
  bool supports(const Conv2dShape& s, bool bias);
  // y = conv(x, w) + b (b may be null); float32, NCHW / OIHW, shapes as
  // kernels/cpu/image/conv2d.hpp.
  void forward(const float* x, const float* w, const float* b, float* y, const Conv2dShape& s);
  // dx = conv^T(dy, w) (skipped when null), dw += ..., db += ... (db may be null).
  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                const Conv2dShape& s);
  // The scratch that forward (and backward) of this shape take in each of the shared slots:
  // the scratchpad, then the blocked copies (empty when oneDNN has no primitive: the
  // caller's im2col path).
  std::vector<std::int64_t> scratch_bytes(const Conv2dShape& s, bool bias, bool backward);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace codistill::kernels::cpu
