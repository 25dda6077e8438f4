#pragma once
// Op cases of the normalization entry points: batchnorm (train and eval, forward and
// backward, with and without dx), batchnorm with a fused relu, synchronized batchnorm (its three steps, the batch split
// among simulated ranks), layernorm, and global average pooling. See op_case.hpp.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "op_case.hpp"

namespace codistill::test::ops {

inline k::BatchNormShape bn(std::int64_t b, std::int64_t c, std::int64_t s) {
  k::BatchNormShape x;
  x.batch = b, x.channels = c, x.spatial = s, x.eps = 1e-5, x.momentum = 0.1;
  return x;
}

// A batchnorm case's x: uniform values given an offset and a scale per channel, so that
// normalizing does something.
inline std::vector<double> batchnorm_input(const k::BatchNormShape& s, std::uint64_t seed) {
  auto xv = uniform(static_cast<std::size_t>(s.batch * s.channels * s.spatial), seed, -1, 1);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const auto ch = static_cast<double>((i / static_cast<std::size_t>(s.spatial)) % static_cast<std::size_t>(s.channels));
    xv[i] = xv[i] * (1 + 0.5 * ch) + 0.25 * ch;
  }
  return xv;
}

// The size of the terms a channel's normalized values are differences of: max over the
// channels of |gamma_c| * invstd_c * xmax_c (xmax: max |x| per channel; gamma empty: 1).
// With few values per channel whose spread is below sqrt(eps), invstd
// nears 1 / sqrt(eps) = 316 while x - mean cancels to what eps leaves, and the fast path's
// folded shift (beta - mean * invstd * gamma, of the terms' size) rounds in float32 to many
// ulps of y (seen at N=2 C=3: 3.4e-5 against a 1e-5 bound of y's own size). In eval invstd
// comes from the running variance (0.5 to 2 here): the size is about max |y|. One
// near-degenerate channel loosens the bound of every channel of that run (the channels
// are not judged one by one).
inline double batchnorm_term_size(const std::vector<double>& xmax, const std::vector<double>& invstd,
                                  const std::vector<double>& gamma) {
  double size = kFloor;
  for (std::size_t ch = 0; ch < xmax.size() && ch < invstd.size(); ++ch) {
    if (!std::isfinite(invstd[ch])) continue;
    const double g = gamma.empty() ? 1.0 : std::abs(gamma[ch]);
    size = std::max(size, g * invstd[ch] * xmax[ch]);
  }
  return size;
}

// max |x| per channel of x laid out [batch, C, spatial] (any number of such blocks one after
// another: a group's parts).
inline std::vector<double> batchnorm_channel_max(const std::vector<double>& x, const k::BatchNormShape& s) {
  std::vector<double> xmax(static_cast<std::size_t>(s.channels), 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto& m = xmax[(i / static_cast<std::size_t>(s.spatial)) % xmax.size()];
    m = std::max(m, std::abs(x[i]));
  }
  return xmax;
}

// What a batchnorm case compares (dx where asked), each bounded by the per-channel count.
// y and dgamma are measured against the size of their terms (batchnorm_term_size), dx
// against gamma * invstd * dy (|dy| <= 1 in these cases), not against their own: where a
// channel has few values they nearly cancel (at two, dx is what eps leaves), and two
// correct groupings of the same formula then differ by a rounding of the terms (dx: ~1e-15
// of them in double, more than the bound of dx's own size allowed, seen at N=2 C=3 once in
// many seeds).
inline std::vector<Output> batchnorm_outputs(Ctx& c, const k::BatchNormShape& s, const Tensor& x, Tensor& y, Tensor& rm,
                                             Tensor& rv, Tensor& sm, Tensor& si, Tensor& dg, Tensor& db, Tensor* dx,
                                             const Tensor& gamma) {
  const double m = static_cast<double>(s.per_channel());
  const std::vector<double> g = c.values(gamma), is = c.values(si), xmax = batchnorm_channel_max(c.values(x), s);
  std::vector<Output> out{c.out("y", y, c.bound(m), batchnorm_term_size(xmax, is, g)),
                          c.out("running_mean", rm, c.bound(m)),
                          c.out("running_var", rv, c.bound(m)),
                          c.out("save_mean", sm, c.bound(m)),
                          c.out("save_invstd", si, c.bound(m)),
                          c.out("dgamma", dg, c.bound(m), batchnorm_term_size(xmax, is, {})),
                          c.out("dbeta", db, c.bound(m))};
  if (dx) {  // |dy| <= 1 stands in for |x|
    const std::vector<double> ones(xmax.size(), 1.0);
    out.push_back(c.out("dx", *dx, c.bound(m), batchnorm_term_size(ones, is, g)));
  }
  return out;
}

class BatchNormCase final : public OpCase {
 public:
  BatchNormCase(k::BatchNormShape s, bool training, bool need_dx) : s_(s), training_(training), need_dx_(need_dx) {}
  std::string name() const override {
    return "batchnorm_forward+backward " + sizes({{"N", s_.batch}, {"C", s_.channels}, {"S", s_.spatial}}) +
           (training_ ? " train" : " eval") + (need_dx_ ? "" : " no-dx");
  }
  std::vector<Op> ops() const override { return {Op::batchnorm}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    const Shape xs{s_.batch, s_.channels, s_.spatial}, cs{s_.channels};
    Tensor x = c.in(batchnorm_input(s_, seed), xs), gamma = c.random(cs, seed + 1, 0.5, 1.5), beta = c.random(cs, seed + 2);
    Tensor rm = c.random(cs, seed + 3), rv = c.random(cs, seed + 4, 0.5, 2);
    Tensor y = c.poison(xs), sm = c.poison(cs), si = c.poison(cs);
    c.backend().batchnorm_forward(x, gamma, beta, rm, rv, y, sm, si, training_, s_, c.q);
    Tensor dy = c.random(xs, seed + 5), dx = c.poison(xs);
    Tensor dg = c.random(cs, seed + 6), db = c.random(cs, seed + 7);  // accumulate onto these
    c.backend().batchnorm_backward(x, gamma, sm, si, dy, need_dx_ ? &dx : nullptr, dg, db, training_, s_, c.q);
    return batchnorm_outputs(c, s_, x, y, rm, rv, sm, si, dg, db, need_dx_ ? &dx : nullptr, gamma);
  }

 private:
  k::BatchNormShape s_;
  bool training_, need_dx_;
};

// Batchnorm with a fused relu (Op::batchnorm_activation): the forward's y = relu(bn(x)) and
// statistics; the backward from a given y (a relu output with zeros, the same on every
// backend: so that an element whose y rounds to either side of 0 on two backends cannot
// flip the mask) and dy. Beta spread over [-1, 1] so that about a third of y is cut.
class BatchNormReluCase final : public OpCase {
 public:
  BatchNormReluCase(k::BatchNormShape s, bool training, bool need_dx) : s_(s), training_(training), need_dx_(need_dx) {}
  std::string name() const override {
    return "batchnorm+relu forward+backward " + sizes({{"N", s_.batch}, {"C", s_.channels}, {"S", s_.spatial}}) +
           (training_ ? " train" : " eval") + (need_dx_ ? "" : " no-dx");
  }
  std::vector<Op> ops() const override { return {Op::batchnorm_activation}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    const Shape xs{s_.batch, s_.channels, s_.spatial}, cs{s_.channels};
    const std::size_t n = static_cast<std::size_t>(k::shape_numel(xs));
    Tensor x = c.in(batchnorm_input(s_, seed), xs), gamma = c.random(cs, seed + 1, 0.5, 1.5), beta = c.random(cs, seed + 2);
    Tensor rm = c.random(cs, seed + 3), rv = c.random(cs, seed + 4, 0.5, 2);
    Tensor y = c.poison(xs), sm = c.poison(cs), si = c.poison(cs);
    c.backend().batchnorm_activation_forward(x, gamma, beta, rm, rv, y, sm, si, training_, k::Activation::relu, s_,
                                             c.q);
    auto yv = uniform(n, seed + 8, -0.5, 1);
    for (double& v : yv) v = v > 0 ? v : 0;
    Tensor y_in = c.in(yv, xs), dy = c.random(xs, seed + 5), dx = c.poison(xs);
    Tensor dg = c.random(cs, seed + 6), db = c.random(cs, seed + 7);  // accumulate onto these
    c.backend().batchnorm_activation_backward(x, y_in, gamma, sm, si, dy, need_dx_ ? &dx : nullptr, dg, db, training_,
                                              k::Activation::relu, s_, c.q);
    return batchnorm_outputs(c, s_, x, y, rm, rv, sm, si, dg, db, need_dx_ ? &dx : nullptr, gamma);
  }

 private:
  k::BatchNormShape s_;
  bool training_, need_dx_;
};

// Synchronized batchnorm as a group of `parts` ranks runs it: the batch cut into `parts`
// slabs of rows, each slab's sums, their sum (the all-reduce, here on the host), each
// slab normalized from the summed sums; then backward alike. Outputs: every slab's y and dx
// (in batch order), rank 0's running statistics and saved statistics, dgamma and dbeta
// accumulated over the slabs (what the group's gradient all-reduce would give).
class BatchNormSyncCase final : public OpCase {
 public:
  BatchNormSyncCase(k::BatchNormShape s, int parts, bool need_dx) : s_(s), parts_(parts), need_dx_(need_dx) {}
  std::string name() const override {
    return "batchnorm_sync " + sizes({{"N", s_.batch}, {"C", s_.channels}, {"S", s_.spatial}, {"ranks", parts_}}) +
           (need_dx_ ? "" : " no-dx");
  }
  std::vector<Op> ops() const override { return {Op::batchnorm_sync}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    const std::int64_t C = s_.channels, S = s_.spatial;
    const Shape cs{C}, sums_shape{2 * C + 1};
    auto xv = uniform(static_cast<std::size_t>(s_.batch * C * S), seed, -1, 1);
    for (std::size_t i = 0; i < xv.size(); ++i)  // per channel offsets and scales, as BatchNormCase
      xv[i] = xv[i] * (1 + 0.5 * static_cast<double>((i / static_cast<std::size_t>(S)) % static_cast<std::size_t>(C))) +
              0.25 * static_cast<double>((i / static_cast<std::size_t>(S)) % static_cast<std::size_t>(C));
    const auto dyv = uniform(xv.size(), seed + 5, -1, 1);
    Tensor gamma = c.random(cs, seed + 1, 0.5, 1.5), beta = c.random(cs, seed + 2);
    const auto rm0 = uniform(static_cast<std::size_t>(C), seed + 3, -1, 1);
    const auto rv0 = uniform(static_cast<std::size_t>(C), seed + 4, 0.5, 2);
    Tensor dg = c.random(cs, seed + 6), db = c.random(cs, seed + 7);  // accumulate onto these
    struct Part {
      k::BatchNormShape s;
      Tensor x, dy, rm, rv, y, sm, si, dx, local;
    };
    std::vector<Part> parts;
    const std::int64_t base = s_.batch / parts_, extra = s_.batch % parts_;
    for (std::int64_t p = 0, row = 0; p < parts_; ++p) {
      Part part;
      part.s = s_;
      part.s.batch = base + (p < extra ? 1 : 0);
      const auto at = static_cast<std::ptrdiff_t>(row * C * S), n = static_cast<std::ptrdiff_t>(part.s.batch * C * S);
      const Shape xs{part.s.batch, C, S};
      part.x = c.in({xv.begin() + at, xv.begin() + at + n}, xs);
      part.dy = c.in({dyv.begin() + at, dyv.begin() + at + n}, xs);
      part.rm = c.in(rm0, cs), part.rv = c.in(rv0, cs);
      part.y = c.poison(xs), part.sm = c.poison(cs), part.si = c.poison(cs), part.dx = c.poison(xs);
      parts.push_back(std::move(part));
      row += parts.back().s.batch;
    }
    // The all-reduce: every rank's sums added on the host, the total uploaded to each rank.
    auto all_reduce = [&](std::vector<Tensor>& sums) {
      std::vector<double> total(static_cast<std::size_t>(2 * C + 1), 0.0);
      for (const Tensor& t : sums) {
        const auto v = c.values(t);
        for (std::size_t i = 0; i < v.size(); ++i) total[i] += v[i];
      }
      return c.in_f64(total, sums_shape);
    };
    std::vector<Tensor> sums;
    for (Part& p : parts) {
      sums.push_back(c.in_f64(std::vector<double>(static_cast<std::size_t>(2 * C + 1), std::nan("")), sums_shape));
      c.backend().batchnorm_sums(p.x, nullptr, p.rm, nullptr, sums.back(), p.s, c.q);
    }
    const Tensor forward_total = all_reduce(sums);
    for (Part& p : parts)
      c.backend().batchnorm_forward_synced(p.x, gamma, beta, p.rm, p.rv, forward_total, p.y, p.sm, p.si, p.s, c.q);
    sums.clear();
    for (Part& p : parts) {
      p.local = c.in_f64(std::vector<double>(static_cast<std::size_t>(2 * C + 1), std::nan("")), sums_shape);
      c.backend().batchnorm_sums(p.x, &p.dy, p.sm, &p.si, p.local, p.s, c.q);
      sums.push_back(p.local);
    }
    const Tensor backward_total = all_reduce(sums);
    for (Part& p : parts)
      c.backend().batchnorm_backward_synced(p.x, gamma, p.sm, p.si, p.dy, p.local, backward_total,
                                            need_dx_ ? &p.dx : nullptr, dg, db, p.s, c.q);
    const double m = static_cast<double>(s_.per_channel());
    // y and dgamma against the size of their terms, as batchnorm_outputs says (3 values per
    // channel at bn(3, 2, 1)).
    std::vector<double> xs;  // the parts' x as the backend holds them, part after part
    for (const Part& p : parts) {
      const auto v = c.values(p.x);
      xs.insert(xs.end(), v.begin(), v.end());
    }
    const std::vector<double> is = c.values(parts[0].si), xmax = batchnorm_channel_max(xs, s_);
    const double y_floor = batchnorm_term_size(xmax, is, c.values(gamma));
    std::vector<Output> out{c.out("running_mean", parts[0].rm, c.bound(m)), c.out("running_var", parts[0].rv, c.bound(m)),
                            c.out("save_mean", parts[0].sm, c.bound(m)), c.out("save_invstd", parts[0].si, c.bound(m)),
                            c.out("dgamma", dg, c.bound(m), batchnorm_term_size(xmax, is, {})),
                            c.out("dbeta", db, c.bound(m))};
    for (std::size_t p = 0; p < parts.size(); ++p) {
      out.push_back(c.out("y rank " + std::to_string(p), parts[p].y, c.bound(m), y_floor));
      if (need_dx_) out.push_back(c.out("dx rank " + std::to_string(p), parts[p].dx, c.bound(m)));
    }
    return out;
  }

 private:
  k::BatchNormShape s_;
  int parts_;
  bool need_dx_;
};

// x [rows, spatial, channels]: channels 1 are NCHW planes (rows = B*C), more are
// channels-last maps (rows = B).
class GlobalAvgPoolCase final : public OpCase {
 public:
  GlobalAvgPoolCase(std::int64_t rows, std::int64_t spatial, std::int64_t channels = 1)
      : rows_(rows), spatial_(spatial), channels_(channels) {}
  std::string name() const override {
    return "global_avgpool_forward+backward " + sizes({{"rows", rows_}, {"S", spatial_}, {"C", channels_}});
  }
  std::vector<Op> ops() const override { return {Op::global_avgpool}; }
  bool reproducible() const override { return true; }
  bool channels_last() const override { return channels_ > 1; }
  std::vector<Output> run(Ctx& c) const override {
    const Shape xs{rows_, spatial_, channels_}, ys{rows_, channels_};
    Tensor x = c.random(xs, seed), y = c.poison(ys);
    c.backend().global_avgpool_forward(x, y, rows_, spatial_, channels_, c.q);
    Tensor dy = c.random(ys, seed + 1), dx = c.poison(xs);
    c.backend().global_avgpool_backward(dy, dx, rows_, spatial_, channels_, c.q);
    return {c.out("y", y, c.bound(static_cast<double>(spatial_))), c.out("dx", dx, c.bound())};
  }

 private:
  std::int64_t rows_, spatial_, channels_;
};

class LayerNormCase final : public OpCase {
 public:
  LayerNormCase(std::int64_t rows, std::int64_t features, bool need_dx)
      : rows_(rows), features_(features), need_dx_(need_dx) {}
  std::string name() const override {
    return "layernorm_forward+backward " + sizes({{"rows", rows_}, {"F", features_}}) + (need_dx_ ? "" : " no-dx");
  }
  std::vector<Op> ops() const override { return {Op::layernorm}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    const k::LayerNormShape s{rows_, features_, 1e-5};
    const Shape xs{rows_, features_}, fs{features_}, rs{rows_};
    Tensor x = c.random(xs, seed, -2, 3), gamma = c.random(fs, seed + 1, 0.5, 1.5), beta = c.random(fs, seed + 2);
    Tensor y = c.poison(xs), sm = c.poison(rs), si = c.poison(rs);
    c.backend().layernorm_forward(x, gamma, beta, y, sm, si, s, c.q);
    Tensor dy = c.random(xs, seed + 3), dx = c.poison(xs);
    Tensor dg = c.random(fs, seed + 4), db = c.random(fs, seed + 5);
    c.backend().layernorm_backward(x, gamma, sm, si, dy, need_dx_ ? &dx : nullptr, dg, db, s, c.q);
    const double f = static_cast<double>(features_), r = static_cast<double>(rows_);
    std::vector<Output> out{c.out("y", y, c.bound(f)), c.out("save_mean", sm, c.bound(f)),
                            c.out("save_invstd", si, c.bound(f)), c.out("dgamma", dg, c.bound(r)),
                            c.out("dbeta", db, c.bound(r))};
    if (need_dx_) out.push_back(c.out("dx", dx, c.bound(f)));
    return out;
  }

 private:
  std::int64_t rows_, features_;
  bool need_dx_;
};

inline Cases norm_cases() {
  Cases out;
  // 1d ([N, C]: spatial 1), 2d (spatial H*W) and odd sizes; 2 values per channel at least
  // for training.
  // Spatial 1 is also a channels-last image map ([B*H*W, C]): the CPU streams it by rows in
  // chunks of 256 (2000 x 16: ResNet-8's stem at batch 2.5; 777 x 5: a partial last chunk).
  const k::BatchNormShape shapes[] = {bn(2, 1, 1),    bn(7, 3, 1),  bn(64, 33, 1), bn(3, 5, 49),
                                      bn(2, 16, 196), bn(5, 7, 13), bn(1, 4, 3),   bn(16, 8, 784),
                                      bn(2000, 16, 1), bn(777, 5, 1)};
  for (const auto& s : shapes)
    for (bool training : {true, false})
      for (bool need_dx : {true, false}) add<BatchNormCase>(out, {DType::f32, DType::f64}, s, training, need_dx);
  add<BatchNormCase>(out, {DType::f32, DType::f64}, bn(1, 2, 1), false, true);  // eval: one value is fine
  // The fused relu on both CPU layouts (spatial > 1: per channel; spatial 1: rows, with 16,
  // 32 and 64 channels on the CPU's vector loops, 5 and 33 on its general ones).
  const k::BatchNormShape relu_shapes[] = {bn(3, 5, 49),     bn(5, 7, 13),   bn(2000, 16, 1), bn(777, 5, 1),
                                           bn(300, 32, 1),   bn(129, 64, 1), bn(64, 33, 1),   bn(2, 3, 1)};
  for (const auto& s : relu_shapes)
    for (bool training : {true, false})
      for (bool need_dx : {true, false}) add<BatchNormReluCase>(out, {DType::f32, DType::f64}, s, training, need_dx);
  for (const auto& [s, parts] : std::vector<std::pair<k::BatchNormShape, int>>{
           {bn(4, 3, 5), 1}, {bn(4, 3, 5), 2}, {bn(5, 7, 33), 3}, {bn(3, 2, 1), 3}, {bn(16, 4, 64), 2}})
    for (bool need_dx : {true, false}) add<BatchNormSyncCase>(out, {DType::f32, DType::f64}, s, parts, need_dx);
  for (auto [rows, spatial] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {6, 49}, {64, 64}, {7, 13}, {33, 784}})
    add<GlobalAvgPoolCase>(out, {DType::f32, DType::f64}, rows, spatial);
  for (auto [rows, spatial, channels] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 2},
                                         {6, 49, 64}, {3, 13, 7}, {33, 784, 16}})
    add<GlobalAvgPoolCase>(out, {DType::f32, DType::f64}, rows, spatial, channels);
  for (auto [rows, features] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 33}, {64, 128}, {3, 1000}, {300, 17}})
    for (bool need_dx : {true, false}) add<LayerNormCase>(out, {DType::f32, DType::f64}, rows, features, need_dx);
  return out;
}

}  // namespace codistill::test::ops
