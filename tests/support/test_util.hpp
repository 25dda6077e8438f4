#pragma once
// Shared test helpers: seeded random inputs, poisoned outputs, relative-error compares
// and a central-difference gradient checker in double precision.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace codistill::test {

// A test case that cannot do its work here ends with skip(reason): "skipped: <reason>" on
// stdout, which CTest reads as a skip (SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt), never
// a pass. CI fails on any skip but a missing GPU (scripts/lib/test_report.py). Use as
// `if (...) return skip("...");`
inline void skip(const std::string& reason) {
  std::cout << "skipped: " << reason << std::endl;
  SUCCEED("skipped: " << reason);
}

// A fresh seed per call so every run sees new inputs; printed through Catch's INFO by callers.
// CODISTILL_TEST_SEED=<the printed seed> replays a failure (every call then returns it).
inline std::uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("CODISTILL_TEST_SEED"); fixed && *fixed)
    return std::stoull(fixed);
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Sets CODISTILL_CPU_ISA for the scope ("" unsets it: the best the CPU runs); the fast
// paths read it on every call, so a test can run each ISA copy of a loop.
struct IsaScope {
  explicit IsaScope(const std::string& isa) {
    if (isa.empty()) unsetenv("CODISTILL_CPU_ISA");
    else setenv("CODISTILL_CPU_ISA", isa.c_str(), 1);
  }
  ~IsaScope() { unsetenv("CODISTILL_CPU_ISA"); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

template <class T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// Outputs are filled with NaN before a call, so an element the op forgets to write fails.
template <class T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

// max_i |a_i - b_i| / max(|b_i|, floor), with NaN counted as infinitely wrong, and an
// infinity as right only against the same infinity (inf / inf would be a NaN, which
// std::max drops).
template <class T>
double max_rel_error(const std::vector<T>& a, const std::vector<T>& b, double floor = 1e-3) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), floor));
  }
  return worst;
}

// Finite differences (h = 1e-6) carry an absolute noise of about 1e-10 * |f|: gradients
// are compared relative to max(|g|, 1e-2), so a near-zero entry is judged on that scale.
constexpr double kGradFloor = 1e-2;
constexpr double kGradTolerance = 1e-5;

// Fast path vs reference bound: float32 1e-4, float64 1e-11 (DESIGN.md section 9).
template <class T>
double tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-11;
}

// The RMS of the finite elements (empty_value when there are none): the scale a comparison
// judges near-zero elements on. Over the finite ones because one infinity would make every
// other error 0 (max_rel_error judges the infinities themselves).
template <class T>
double finite_rms(const std::vector<T>& x, double empty_value) {
  double ss = 0;
  std::size_t finite = 0;
  for (T v : x)
    if (std::isfinite(v)) ss += static_cast<double>(v) * v, ++finite;
  return finite == 0 ? empty_value : std::sqrt(ss / static_cast<double>(finite));
}

// max_rel_error with the floor at the reference's RMS: elements near zero in a vector of
// large values are judged on the vector's scale, not on their own.
template <class T>
double rel_error(const std::vector<T>& got, const std::vector<T>& want) {
  return max_rel_error(got, want, std::max(1e-3, finite_rms(want, 1.0)));
}

// Central differences of a scalar function f(params) with respect to params[i].
inline std::vector<double> numeric_gradient(const std::function<double()>& f, std::vector<double*> params,
                                            double h = 1e-6) {
  std::vector<double> g(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    double saved = *params[i];
    *params[i] = saved + h;
    double up = f();
    *params[i] = saved - h;
    double down = f();
    *params[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace codistill::test
