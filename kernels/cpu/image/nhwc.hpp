#pragma once
// Layout permutations of image maps between NCHW ([B, C, H, W], each channel's plane
// contiguous) and NHWC ([B, H, W, C], each pixel's channels contiguous), for the CPU paths
// that compute in NCHW on channels-last data (the im2col convolution, float64 and the
// reference): they permute in, compute, permute out. Plain copies: exact.
#include <cstdint>
#include <vector>

namespace codistill::kernels::cpu {

// nchw[b, c, i] = nhwc[b, i, c] for i over the S = H*W pixels.
template <class T>
void nhwc_to_nchw(const T* nhwc, T* nchw, std::int64_t B, std::int64_t C, std::int64_t S) {
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t c = 0; c < C; ++c) nchw[(b * C + c) * S + i] = nhwc[(b * S + i) * C + c];
}

// nhwc[b, i, c] = nchw[b, c, i].
template <class T>
void nchw_to_nhwc(const T* nchw, T* nhwc, std::int64_t B, std::int64_t C, std::int64_t S) {
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t c = 0; c < C; ++c) nhwc[(b * S + i) * C + c] = nchw[(b * C + c) * S + i];
}

// An NCHW copy of an NHWC map (empty for a null pointer).
template <class T>
std::vector<T> nchw_copy(const T* nhwc, std::int64_t B, std::int64_t C, std::int64_t S) {
  std::vector<T> out;
  if (!nhwc) return out;
  out.resize(static_cast<std::size_t>(B * C * S));
  nhwc_to_nchw(nhwc, out.data(), B, C, S);
  return out;
}

}  // namespace codistill::kernels::cpu
