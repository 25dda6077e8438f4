#pragma once
// Op cases of the image entry points: conv2d and maxpool2d. See op_case.hpp.
#include <cmath>

#include "op_case.hpp"

namespace codistill::test::ops {

// batch, in channels, height, width, out channels, kernel h/w, stride h/w, padding h/w
inline k::Conv2dShape conv(std::int64_t b, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t o,
                           std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t ph,
                           std::int64_t pw) {
  k::Conv2dShape s;
  s.batch = b, s.in_channels = c, s.height = h, s.width = w, s.out_channels = o;
  s.kernel_h = kh, s.kernel_w = kw, s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

inline std::string conv_str(const k::Conv2dShape& s) {
  return sizes({{"B", s.batch}, {"C", s.in_channels}, {"H", s.height}, {"W", s.width}, {"O", s.out_channels}}) +
         " k=" + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) + " stride=" +
         std::to_string(s.stride_h) + "x" + std::to_string(s.stride_w) + " pad=" + std::to_string(s.pad_h) + "x" +
         std::to_string(s.pad_w) + (s.channels_last ? " nhwc" : "");
}

// The same convolution on channels-last (NHWC) maps.
inline k::Conv2dShape nhwc(k::Conv2dShape s) {
  s.channels_last = true;
  return s;
}

struct ConvSizes {
  Shape x, w, y;
  std::int64_t window;  // products per output element: C * KH * KW
  explicit ConvSizes(const k::Conv2dShape& s)
      : x{s.batch, s.in_channels, s.height, s.width},
        w{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w},
        y{s.batch, s.out_channels, s.out_height(), s.out_width()},
        window(s.in_channels * s.kernel_h * s.kernel_w) {}
};

class Conv2dForward final : public OpCase {
 public:
  Conv2dForward(k::Conv2dShape s, bool bias) : s_(s), bias_(bias) {}
  std::string name() const override { return "conv2d_forward " + conv_str(s_) + " bias=" + std::to_string(bias_); }
  std::vector<Op> ops() const override { return {Op::conv2d}; }
  bool reproducible() const override { return true; }
  bool channels_last() const override { return s_.channels_last; }
  std::vector<Output> run(Ctx& c) const override {
    const ConvSizes z(s_);
    Tensor x = c.random(z.x, seed), w = c.random(z.w, seed + 1), b = c.random({s_.out_channels}, seed + 2);
    Tensor y = c.poison(z.y);
    c.backend().conv2d_forward(x, w, bias_ ? &b : nullptr, y, s_, c.q);
    // O(1) products and a bias: a 1 x 1 x 1 x 1 case is one product plus a bias (kTermFloor).
    return {c.out("y", y, c.bound(static_cast<double>(z.window)), kTermFloor)};
  }

 private:
  k::Conv2dShape s_;
  bool bias_;
};

// dx poisoned (overwritten) or null; dw and db start random (accumulated) or poisoned
// then Queue::zero'd (zeroed: the caller's overwrite).
class Conv2dBackward final : public OpCase {
 public:
  Conv2dBackward(k::Conv2dShape s, bool dx, bool db, bool zeroed = false) : s_(s), dx_(dx), db_(db), zeroed_(zeroed) {}
  std::string name() const override {
    return "conv2d_backward " + conv_str(s_) + " dx=" + std::to_string(dx_) + " db=" + std::to_string(db_) +
           (zeroed_ ? " dw,db zeroed" : "");
  }
  std::vector<Op> ops() const override { return {Op::conv2d}; }
  bool reproducible() const override { return true; }
  bool channels_last() const override { return s_.channels_last; }
  std::vector<Output> run(Ctx& c) const override {
    const ConvSizes z(s_);
    Tensor x = c.random(z.x, seed), w = c.random(z.w, seed + 1), dy = c.random(z.y, seed + 2);
    Tensor dx = c.poison(z.x), dw = c.random(z.w, seed + 3), db = c.random({s_.out_channels}, seed + 4);
    if (zeroed_) c.zero(dw), c.zero(db);
    c.backend().conv2d_backward(x, w, dy, dx_ ? &dx : nullptr, dw, db_ ? &db : nullptr, s_, c.q);
    // dw sums over the batch and the output plane, dx over O * KH * KW, db over B * OH * OW.
    const double plane = static_cast<double>(z.y[0] * z.y[2] * z.y[3]);
    // Each starts at O(1) (dw, db) or sums O(1) products, which can cancel (kTermFloor).
    const double taps = static_cast<double>(s_.out_channels * s_.kernel_h * s_.kernel_w);
    std::vector<Output> out{c.out("dw", dw, c.bound(plane), kTermFloor)};
    if (dx_) out.push_back(c.out("dx", dx, c.bound(taps), kTermFloor));
    if (db_) out.push_back(c.out("db", db, c.bound(plane), kTermFloor));
    return out;
  }

 private:
  k::Conv2dShape s_;
  bool dx_, db_, zeroed_;
};

inline k::Pool2dShape pool(std::int64_t b, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t kernel,
                           std::int64_t stride) {
  k::Pool2dShape s;
  s.batch = b, s.channels = c, s.height = h, s.width = w, s.kernel = kernel, s.stride = stride;
  return s;
}

inline std::string pool_str(const k::Pool2dShape& s) {
  return sizes({{"B", s.batch}, {"C", s.channels}, {"H", s.height}, {"W", s.width}, {"k", s.kernel},
                {"stride", s.stride}});
}

// Forward then backward on the same backend (its argmax, or x and y). ties: inputs from
// {-1, 0, 1, 2}, so windows hold equal maxima and the first in row-major order must win.
class MaxPoolCase final : public OpCase {
 public:
  MaxPoolCase(k::Pool2dShape s, bool ties) : s_(s), ties_(ties) {}
  std::string name() const override {
    return "maxpool2d_forward+backward " + pool_str(s_) + (ties_ ? " ties" : "");
  }
  std::vector<Op> ops() const override { return {Op::maxpool2d}; }
  std::vector<Output> run(Ctx& c) const override {
    const Shape xs{s_.batch, s_.channels, s_.height, s_.width};
    const Shape ys{s_.batch, s_.channels, s_.out_height(), s_.out_width()};
    auto xv = uniform(static_cast<std::size_t>(k::shape_numel(xs)), seed, -1, 1);
    if (ties_)
      for (double& v : xv) v = std::floor(v * 2);  // -2 .. 1
    Tensor x = c.in(xv, xs), y = c.poison(ys);
    Tensor argmax = Tensor::empty(ys, DType::i32, c.q.device());
    c.backend().maxpool2d_forward(x, y, argmax, s_, c.q);
    Tensor dy = c.random(ys, seed + 1), dx = c.poison(xs);
    c.backend().maxpool2d_backward(x, y, argmax, dy, dx, s_, c.q);
    // A maximum is exact; overlapping windows add gradients, maybe in another order.
    const double overlap = std::pow(static_cast<double>((s_.kernel + s_.stride - 1) / s_.stride), 2);
    return {c.out("y", y, 0.0), c.out("dx", dx, c.bound(overlap))};
  }

 private:
  k::Pool2dShape s_;
  bool ties_;
};

// ---- the table ----

inline Cases conv_cases() {
  Cases out;
  const k::Conv2dShape shapes[] = {
      conv(2, 3, 11, 13, 5, 3, 3, 1, 1, 1, 1), conv(3, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2),
      conv(1, 4, 9, 7, 6, 3, 2, 2, 1, 0, 1),   conv(5, 16, 14, 14, 32, 3, 3, 2, 2, 1, 1),
      conv(7, 2, 6, 6, 3, 1, 1, 1, 1, 0, 0),   conv(2, 3, 5, 9, 4, 5, 1, 3, 2, 2, 0),
      conv(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0)};
  const std::initializer_list<DType> dtypes = {DType::f32, DType::f64, DType::bf16};
  for (const auto& s : shapes) {
    for (bool bias : {true, false}) add<Conv2dForward>(out, dtypes, s, bias);
    add<Conv2dBackward>(out, dtypes, s, true, true);
    add<Conv2dBackward>(out, dtypes, s, false, false);
    add<Conv2dBackward>(out, dtypes, s, false, true);
    add<Conv2dBackward>(out, dtypes, s, true, true, /*zeroed=*/true);
  }
  // The CPU's oneDNN path picks its kernel by shape (AVX-512 blocks of 16 channels, AVX2
  // blocks of 8, 1x1 kernels, plain-layout input for few channels, GEMM-based otherwise):
  // the ResNet shapes (1x1 stride-2 projections, 3x3 stride 2 onto odd maps, 64 channels),
  // channel counts off the blocks, a large kernel and an asymmetric window.
  const k::Conv2dShape kernel_choice[] = {
      conv(3, 16, 15, 15, 32, 1, 1, 2, 2, 0, 0), conv(2, 32, 9, 9, 64, 3, 3, 2, 2, 1, 1),
      conv(2, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1),   conv(2, 3, 17, 17, 20, 7, 7, 3, 3, 3, 3),
      conv(1, 24, 5, 6, 40, 2, 3, 1, 2, 0, 1)};
  for (const auto& s : kernel_choice) {
    add<Conv2dForward>(out, {DType::f32, DType::f64}, s, true);
    add<Conv2dBackward>(out, {DType::f32, DType::f64}, s, true, true);
    add<Conv2dBackward>(out, {DType::f32, DType::f64}, s, false, false);
  }
  // Channels-last maps (oneDNN's direct NHWC kernels on the CPU fast path, the permuted
  // NCHW computation in the reference and for float64): ResNet-8's shapes, odd ones, one
  // channel in (the stem: NCHW and NHWC the same bytes), 16 -> 16 (described to oneDNN as
  // its blocked nChw16c, the same bytes, for the forward and backward data), strided too.
  const k::Conv2dShape channels_last[] = {
      conv(3, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1), conv(2, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1),
      conv(3, 16, 9, 11, 16, 3, 3, 2, 2, 1, 1),  conv(2, 16, 7, 5, 16, 1, 1, 1, 1, 0, 0),
      conv(3, 16, 15, 15, 32, 1, 1, 2, 2, 0, 0), conv(2, 32, 9, 9, 64, 3, 3, 2, 2, 1, 1),
      conv(2, 3, 11, 13, 5, 3, 3, 1, 1, 1, 1),  conv(1, 4, 9, 7, 6, 3, 2, 2, 1, 0, 1)};
  for (const auto& s : channels_last) {
    for (bool bias : {true, false}) add<Conv2dForward>(out, {DType::f32, DType::f64}, nhwc(s), bias);
    add<Conv2dBackward>(out, {DType::f32, DType::f64}, nhwc(s), true, true);
    add<Conv2dBackward>(out, {DType::f32, DType::f64}, nhwc(s), false, false);
    add<Conv2dBackward>(out, {DType::f32}, nhwc(s), true, false, /*zeroed=*/true);
  }
  // Large enough for split reductions (atomics would show as run-to-run differences).
  add<Conv2dBackward>(out, {DType::f32}, conv(4, 32, 28, 28, 64, 3, 3, 1, 1, 1, 1), true, true);
  const std::size_t from = out.size();  // TF32 where a backend has it
  add<Conv2dForward>(out, {DType::f32}, conv(5, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1), true);
  add<Conv2dBackward>(out, {DType::f32}, conv(5, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1), true, true);
  for (std::size_t i = from; i < out.size(); ++i) out[i]->options.allow_tf32 = true;
  return out;
}

inline Cases pool_cases() {
  Cases out;
  const k::Pool2dShape shapes[] = {pool(2, 3, 8, 8, 2, 2),   pool(3, 5, 11, 9, 3, 2), pool(1, 1, 5, 5, 5, 1),
                                   pool(4, 7, 28, 28, 2, 2), pool(2, 2, 13, 17, 3, 3), pool(2, 3, 9, 7, 2, 1),
                                   pool(1, 2, 7, 9, 2, 2)};
  const std::initializer_list<DType> dtypes = {DType::f32, DType::f64, DType::bf16};
  for (const auto& s : shapes)
    for (bool ties : {false, true}) add<MaxPoolCase>(out, dtypes, s, ties);
  return out;
}

}  // namespace codistill::test::ops
