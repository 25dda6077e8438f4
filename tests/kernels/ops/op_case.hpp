#pragma once
// The op cases of tests/kernels/test_backend_ops.cpp (ggml's test-backend-ops is the model):
// an OpCase is one call pattern of one Backend entry point at one dtype and size. Its run()
// builds its inputs from its seed on a Ctx (a queue plus the dtype to run in), calls the
// op and returns its outputs as host values. The driver runs every case once on the CPU
// reference queue and once on each backend's queue and compares the outputs.
//
// On a Ctx, inputs are uploaded through Backend::staging_for and Queue::copy, outputs are
// poisoned with NaN before the call (an element the op forgets to write fails), gradients
// that accumulate are pre-filled with random values, and results come back with Queue::copy.
// A bfloat16 case runs on the reference in float32 on the same (bf16-rounded) values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "support/test_util.hpp"

namespace codistill::test::ops {

namespace k = codistill::kernels;
using k::DType;
using k::Op;
using k::Shape;
using k::Tensor;

// ---- bfloat16 as raw bits: the upper half of a float, rounded to nearest even ----
inline std::uint16_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// v as the nearest value of dtype t holds (so that reference and backend read the same).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::bf16: return bf16_value(bf16_bits(static_cast<float>(v)));
    default: return v;
  }
}

inline const char* short_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

// The relative-error bound of a backend against the reference (DESIGN.md section 9), for
// an output each element of which sums `terms` products: float32 1e-5 .. 1e-4, float64
// 1e-12 .. 1e-11 (the fast path's reductions in another order), bfloat16 1e-2.
inline double bound_for(DType t, double terms = 1) {
  const double grow = std::sqrt(std::max(terms, 1.0));
  switch (t) {
    case DType::f32: return std::clamp(2e-6 * grow, 1e-5, 1e-4);
    case DType::f64: return std::clamp(2e-14 * grow, 1e-12, 1e-11);
    default: return 1e-2;
  }
}

// n values uniform in [lo, hi), element i a hash of (seed, i) (splitmix64): inputs of a
// million elements cost milliseconds, not the tenths of a second of a Mersenne twister.
inline std::vector<double> uniform(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(n);
  const std::uint64_t base = seed * 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = base + (i + 1) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v[i] = lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1p-53;
  }
  return v;
}

// The base seed of this run: CODISTILL_TEST_SEED when set, else fresh (printed on failure).
inline std::uint64_t base_seed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("CODISTILL_TEST_SEED");
    return env && *env ? std::strtoull(env, nullptr, 0) : fresh_seed();
  }();
  return seed;
}

// max_i |got_i - want_i| / max(|want_i|, rms(want), floor), NaN counted as infinitely
// wrong: elements near zero among larger ones are judged on the output's scale, and an
// output that cancels to near zero on the scale of its terms (floor). test_util's
// max_rel_error has the floor only, at 1e-3: too coarse for an output of tiny entries such
// as a loss gradient over 131072 classes, which passes floor 0 (an all-zero reference
// must then be matched exactly).
inline double op_error_floor(const std::vector<double>& want, double floor) {
  return std::max({finite_rms(want, 0.0), floor, std::numeric_limits<double>::min()});
}
inline double op_error(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  return max_rel_error(got, want, op_error_floor(want, floor));
}

// ||got - want||_2 / max(||want||_2, floor * sqrt(n)), NaN counted as infinitely wrong: the
// measure of bf16-compute outputs built from a gradient that the reference and the backend
// each compute in their own way and round to a bf16 GEMM operand (the loss's, gelu's:
// Output::normwise). Computed a float32 ulp apart, about one such operand in 10^4 lands on
// the other bf16 neighbour and moves what it enters (a row of dW, of dx) by a bf16 ulp of
// its terms; for a sum of few terms (dW over 13 rows) that is as much as an unrounded
// operand moves every element (1.9e-3 by the largest element, seen once). In the norm the
// flip weighs about 1/sqrt(operands) while an operand left unrounded still counts in full.
inline double op_norm_error(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  REQUIRE(got.size() == want.size());
  double dd = 0, ww = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    dd += (got[i] - want[i]) * (got[i] - want[i]), ww += want[i] * want[i];
  }
  if (dd == 0) return 0;  // also an all-zero output matched exactly at floor 0
  const double scale = std::max(std::sqrt(ww), floor * std::sqrt(static_cast<double>(got.size())));
  return std::sqrt(dd) / std::max(scale, std::numeric_limits<double>::min());
}

// The floor of outputs built from O(1) inputs (test_util's max_rel_error default).
inline constexpr double kFloor = 1e-3;
// The floor of an output that sums O(1) terms, judged against a tenth of a term: each term is
// rounded at its own size (float32 ~6e-8) however small the sum comes out where the terms
// cancel, which a few terms (a 1 x 1 x 1 linear, a relu after negative biases) often do.
inline constexpr double kTermFloor = 0.1;

// One output of a run, as host values, with its bound (0: must match exactly) and the
// floor of op_error.
struct Output {
  std::string name;
  std::vector<double> values;
  double bound = 0;
  double floor = kFloor;  // of op_error, or of op_norm_error
  bool normwise = false;  // judged by op_norm_error, not op_error
};

// One queue and the dtype to run a case in; keeps the staging tensors alive until the
// queue has caught up (values(), or the destructor when a run throws).
class Ctx {
 public:
  // dtype: the case's dtype; on the reference queue bfloat16 runs as float32.
  Ctx(k::Queue& queue, DType dtype, std::int64_t offset = 0)
      : q(queue),
        dtype_(dtype),
        run_dtype_(dtype == DType::bf16 && queue.options().reference ? DType::f32 : dtype),
        offset_(offset) {}
  ~Ctx() {
    try {
      q.synchronize();  // no copy from a staging tensor may outlive it
    } catch (...) {
    }
  }
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;

  k::Queue& q;
  k::Backend& backend() const { return q.backend(); }
  bool reference() const { return q.options().reference; }
  DType dtype() const { return dtype_; }      // the case's dtype (bounds, rounding)
  // TF32 products carry a 10-bit mantissa: 1e-2, as bfloat16. bf16 compute is compared
  // with the reference run on the same bf16-rounded operands (the driver's bf16 reference
  // queue): what separates them is the float32 summation order (~1e-7), plus, where the
  // two compute a gradient and round it (Output::normwise, judged in the norm), a rare
  // operand that rounds the other way (measured up to 2e-5 in the norm on the large cases);
  // a GEMM operand left unrounded in float32 is 1.3e-3 to 2.2e-3 off in the norm and more
  // by the largest element (measured on the head's and the linear layer's cases with the
  // reference's rounding of one operand removed).
  double bound(double terms = 1) const {
    if (dtype_ == DType::f32 && q.options().compute == k::Compute::bf16) return kBf16ComputeBound;
    return q.options().allow_tf32 && dtype_ == DType::f32 ? 1e-2 : bound_for(dtype_, terms);
  }
  static constexpr double kBf16ComputeBound = 5e-4;

  // An input on the queue's device holding v (rounded to the case's dtype).
  Tensor in(const std::vector<double>& v, const Shape& shape) {
    Tensor dev = device_tensor(shape, run_dtype_);
    REQUIRE(static_cast<std::int64_t>(v.size()) == dev.numel());
    Tensor host = backend().staging_for(dev);
    const std::size_t n = v.size();
    if (run_dtype_ == DType::f64) std::copy(v.begin(), v.end(), host.data<double>());
    if (run_dtype_ == DType::bf16)
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(host.raw())[i] = bf16_bits(static_cast<float>(v[i]));
    if (run_dtype_ == DType::f32) {
      float* h = host.data<float>();
      if (dtype_ == DType::bf16)  // the reference of a bfloat16 case: the values bf16 holds
        for (std::size_t i = 0; i < n; ++i) h[i] = bf16_value(bf16_bits(static_cast<float>(v[i])));
      else
        for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(v[i]);
    }
    q.copy(dev, host);
    keep_.push_back(host);
    return dev;
  }
  // A bfloat16 input whatever the case's dtype and queue, the reference's too (a forward-only
  // model's weights held as bf16: Op::linear_bf16_weights and the like).
  Tensor in_bf16(const std::vector<double>& v, const Shape& shape) {
    Tensor dev = device_tensor(shape, DType::bf16);
    REQUIRE(static_cast<std::int64_t>(v.size()) == dev.numel());
    Tensor host = backend().staging_for(dev);
    auto* h = static_cast<std::uint16_t*>(host.raw());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = bf16_bits(static_cast<float>(v[i]));
    q.copy(dev, host);
    keep_.push_back(host);
    return dev;
  }
  Tensor random_bf16(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
    return in_bf16(uniform(static_cast<std::size_t>(k::shape_numel(shape)), seed, lo, hi), shape);
  }
  // A float64 input whatever the case's dtype (synchronized batchnorm's sums).
  Tensor in_f64(const std::vector<double>& v, const Shape& shape) {
    Tensor dev = device_tensor(shape, DType::f64);
    REQUIRE(static_cast<std::int64_t>(v.size()) == dev.numel());
    Tensor host = backend().staging_for(dev);
    std::copy(v.begin(), v.end(), host.data<double>());
    q.copy(dev, host);
    keep_.push_back(host);
    return dev;
  }
  Tensor random(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
    return in(uniform(static_cast<std::size_t>(k::shape_numel(shape)), seed, lo, hi), shape);
  }
  // An output, every element NaN.
  Tensor poison(const Shape& shape) {
    return in(std::vector<double>(static_cast<std::size_t>(k::shape_numel(shape)),
                                  std::numeric_limits<double>::quiet_NaN()),
              shape);
  }
  Tensor labels(const std::vector<std::int32_t>& v) {
    Tensor dev = device_tensor({static_cast<std::int64_t>(v.size())}, DType::i32);
    Tensor host = backend().staging_for(dev);
    if (!v.empty()) std::memcpy(host.raw(), v.data(), v.size() * sizeof(std::int32_t));
    q.copy(dev, host);
    keep_.push_back(host);
    return dev;
  }

  void zero(Tensor& t) { q.zero(t); }

  // The values of t (on this queue's device) once the queue has run everything so far.
  std::vector<double> values(const Tensor& t) {
    Tensor host = Tensor::empty(t.shape(), t.dtype());
    q.copy(host, t);
    q.synchronize();
    keep_.clear();
    std::vector<double> out(static_cast<std::size_t>(t.numel()));
    const std::size_t n = out.size();
    switch (t.dtype()) {
      case DType::f32: std::copy_n(host.data<float>(), n, out.begin()); break;
      case DType::f64: std::copy_n(host.data<double>(), n, out.begin()); break;
      case DType::i32: std::copy_n(host.data<std::int32_t>(), n, out.begin()); break;
      case DType::bf16:
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_value(static_cast<const std::uint16_t*>(host.raw())[i]);
        break;
    }
    return out;
  }
  Output out(std::string name, const Tensor& t, double bound, double floor = kFloor, bool normwise = false) {
    return {std::move(name), values(t), bound, floor, normwise};
  }

 private:
  Tensor device_tensor(const Shape& shape, DType t) {
    const k::Device d = q.device();
    if (offset_ == 0) return Tensor::empty(shape, t, d);
    // offset_ elements past an aligned allocation: the unaligned paths.
    return Tensor::empty({k::shape_numel(shape) + offset_}, t, d).view(offset_, shape);
  }

  DType dtype_, run_dtype_;  // the case's; what the tensors hold here
  std::int64_t offset_;
  std::vector<Tensor> keep_;
};

// One call pattern of one op. The table fills dtype and the sizes; the driver the seed.
class OpCase {
 public:
  virtual ~OpCase() = default;
  virtual std::string name() const = 0;          // "linear_backward M=7 N=13 K=33 act=relu"
  virtual std::vector<Op> ops() const = 0;       // what a backend must support to run it
  virtual std::vector<Output> run(Ctx& c) const = 0;
  virtual bool reproducible() const { return false; }  // two runs agree bit for bit
  // Channels-last (NHWC) image maps: run only where Backend::supports_channels_last().
  virtual bool channels_last() const { return false; }

  std::string label() const { return name() + " [" + short_name(dtype) + (offset ? ", unaligned" : "") +
                                     (options.allow_tf32 ? ", tf32" : "") +
                                     (options.compute == k::Compute::bf16 ? ", bf16 compute" : "") + "]"; }

  DType dtype = DType::f32;
  std::uint64_t seed = 0;
  std::int64_t offset = 0;     // > 0: the backend's tensors start that many elements off
  k::QueueOptions options{};   // the backend's queue (allow_tf32, compute); the reference's compute too
};

using Cases = std::vector<std::unique_ptr<OpCase>>;

// Adds a case of type C for each dtype in dtypes: add<LinearForward>(out, {f32, f64}, args...).
template <class C, class... A>
void add(Cases& out, std::initializer_list<DType> dtypes, const A&... args) {
  for (DType t : dtypes) {
    auto c = std::make_unique<C>(args...);
    c->dtype = t;
    out.push_back(std::move(c));
  }
}

inline std::vector<double> relu_of(std::vector<double> v) {
  for (double& x : v) x = std::max(x, 0.0);
  return v;
}

inline std::string sizes(std::initializer_list<std::pair<const char*, std::int64_t>> kv) {
  std::string s;
  for (const auto& [key, v] : kv) {
    if (!s.empty()) s += ' ';
    s.append(key).append("=").append(std::to_string(v));
  }
  return s;
}

}  // namespace codistill::test::ops
