#pragma once
// Fully connected layer ops. Weight layout [out, in] (PyTorch's and the checkpoint's).
//   forward:  y[M,N] = x[M,K] * w[N,K]^T + b[N]          (b may be null)
//   backward: dx[M,K]  = dy[M,N] * w[N,K]                  (skipped when dx is null)
//             dw[N,K] (+)= dy^T * x,  db[N] (+)= sum over rows of dy   (db may be null)
// accumulate = true adds into dw/db; false overwrites them.
// bf16 (float only; null for float32): the GEMMs' operands are rounded to bfloat16 and
// accumulated in float32 (kernels/ops.hpp, Compute::bf16): through the engine on the fast
// path; on the reference path the operands are rounded, then the double loops run.
#include <cstdint>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t M, std::int64_t N,
                    std::int64_t K, Impl impl = Impl::fast, Bf16Gemm* bf16 = nullptr);

template <class T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t M,
                     std::int64_t N, std::int64_t K, bool accumulate, Impl impl = Impl::fast,
                     Bf16Gemm* bf16 = nullptr);

// The fast path's backward of a linear layer and the relu after it (relu_y: the layer's
// output; null for no activation) in one parallel region: dpre = relu_y > 0 ? dy : 0 (a
// select, as relu_backward; each thread its block), a barrier, then each thread's parts of
// the dx and dw GEMMs (gemm's splits, so the same bits as gemm) and its columns of db. A
// separate pass per op would cost a fork and join each and leave the other thread idle in
// the small ones: fmnist_mlp's backward would take 10 regions instead of 3. float32 without
// bf16 and float64; dx and db may be null.
template <class T>
void linear_backward_relu(const T* x, const T* w, const T* dy, const T* relu_y, T* dpre, T* dx, T* dw, T* db,
                          std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate);

}  // namespace codistill::kernels::cpu
