#pragma once
// The fast path of batch normalization when each channel's values are strided rows, not
// planes: BatchNormShape with spatial == 1, x viewed as [rows, channels] (BatchNorm1d, and a
// channels-last image map, rows = B*H*W). The per-channel path of batchnorm.cpp walks such a
// channel with stride C (every cache line read C times); this one streams the rows once per
// pass, vectorized across channels. The rows are cut into fixed chunks whose per-channel
// partial sums (double) are added in chunk order: the result does not depend on the thread
// count. Same arithmetic as batchnorm.cpp's fast path (statistics in double, shifted by the
// channel's first value; dx in double), sums in another order: equal within rounding. The
// float32 loops for channel counts that are multiples of 16 are written with vector types
// (batchnorm_rows_vec.hpp) and compiled per ISA (kernels/cpu/isa.hpp: AVX-512 on Zen 4), so
// results are reproducible on one machine, not bit-identical across CPU generations.
// relu: the fused activation (Op::batchnorm_activation): y = relu(bn(x)); backward's relu_y
// (null without it) is that y, whose mask y > 0 applies to dy inside the passes.
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

template <class T>
void batchnorm_rows_forward(const T* x, const T* gamma, const T* beta, T* running_mean, T* running_var, T* y,
                            T* save_mean, T* save_invstd, bool training, bool relu, const BatchNormShape& s);

template <class T>
void batchnorm_rows_backward(const T* x, const T* relu_y, const T* gamma, const T* save_mean, const T* save_invstd,
                             const T* dy, T* dx, T* dgamma, T* dbeta, bool training, const BatchNormShape& s);

}  // namespace codistill::kernels::cpu
