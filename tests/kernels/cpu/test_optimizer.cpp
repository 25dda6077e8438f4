// The optimizer updates' fast path (kernels/cpu/optimizer.hpp): its loops are compiled per
// ISA and split over threads, and every copy, split and the reference give the same bits
// (elementwise, no multiply-add contraction in that file).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::kernels::AdamWScalars;
using codistill::kernels::SgdScalars;
using codistill::test::IsaScope;
using codistill::test::fresh_seed;
using codistill::test::random_vector;


TEMPLATE_TEST_CASE("sgd and adamw: every ISA copy, thread count and the reference give the same bits", "[optimizer]",
                   float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  // Odd tails, under and over the parallel threshold (2^15).
  for (const std::int64_t n : {1, 17, 4097, 40001, 300001}) {
    const auto p0 = random_vector<T>(n, seed), g = random_vector<T>(n, seed + 1, -0.1, 0.1);
    const auto m0 = random_vector<T>(n, seed + 2, -0.01, 0.01), v0 = random_vector<T>(n, seed + 3, 0.0, 1e-4);
    const SgdScalars sgds[] = {{0.05, 1e-4, 0.9, true}, {0.05, 1e-4, 0.9, false}, {0.1, 0.0, 0.0, false}};
    AdamWScalars adam;
    adam.decay = 1 - 1e-3 * 0.01, adam.beta1 = 0.9, adam.beta2 = 0.999, adam.step_size = 1e-3 / 0.1;
    adam.inv_sqrt_bc2 = 1 / 0.0316, adam.eps = 1e-8;
    auto run = [&](Impl impl, std::vector<std::vector<T>>& out) {
      for (const SgdScalars& s : sgds) {
        auto p = p0, m = m0;
        for (int step = 0; step < 3; ++step) sgd_update<T>(p.data(), g.data(), m.data(), n, s, impl);
        out.push_back(p);
        out.push_back(m);
      }
      auto p = p0, m = m0, v = v0;
      for (int step = 0; step < 3; ++step) adamw_update<T>(p.data(), g.data(), m.data(), v.data(), n, adam, impl);
      out.insert(out.end(), {p, m, v});
    };
    std::vector<std::vector<T>> want;
    run(Impl::reference, want);
    for (const char* isa : {"baseline", "avx2", "avx512"})
      for (const int threads : {1, 2}) {
        INFO("n " << n << " isa " << isa << " threads " << threads);
        IsaScope scope(isa);
        set_num_threads(threads);
        std::vector<std::vector<T>> got;
        run(Impl::fast, got);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("output " << i);
          CHECK(got[i] == want[i]);
        }
      }
    set_num_threads(2);
  }
}

// Whole vectors compared to one bool: a failure message of two 8M-element vectors would take
// minutes to format.
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a == b;
}

TEMPLATE_TEST_CASE("sgd and adamw out of place: the bits of the update in place, and the source left as it was",
                   "[optimizer]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // The last size streams its stores (kStreamMinBytes), with a head and a tail written as usual.
  const auto streamed = static_cast<std::int64_t>(kStreamMinBytes / sizeof(T)) + 37;
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{40001}, streamed}) {
    const auto p0 = random_vector<T>(n, seed), g = random_vector<T>(n, seed + 1, -0.1, 0.1);
    const auto m0 = random_vector<T>(n, seed + 2, -0.01, 0.01), v0 = random_vector<T>(n, seed + 3, 0.0, 1e-4);
    AdamWScalars adam;
    adam.decay = 1 - 1e-3 * 0.01, adam.beta1 = 0.9, adam.beta2 = 0.999, adam.step_size = 1e-3 / 0.1;
    adam.inv_sqrt_bc2 = 1 / 0.0316, adam.eps = 1e-8;
    for (const char* isa : {"baseline", "avx2", "avx512"}) {
      INFO("n " << n << " isa " << isa);
      IsaScope scope(isa);
      for (const SgdScalars& s : {SgdScalars{0.05, 1e-4, 0.9, true}, SgdScalars{0.1, 1e-4, 0.0, false}}) {
        auto p = p0, m = m0;
        sgd_update<T>(p.data(), g.data(), m.data(), n, s, Impl::reference);
        const auto p_src = p, m_src = m, p_kept = p, m_kept = m;
        sgd_update<T>(p.data(), g.data(), m.data(), n, s, Impl::reference);  // in place: the expected bits
        std::vector<T> p_out(n, nan), m_out(n, nan);
        sgd_update<T>(p_out.data(), g.data(), m_out.data(), n, s, Impl::fast, p_src.data(), m_src.data());
        CHECK(same(p_out, p));
        if (s.momentum != 0) CHECK(same(m_out, m));
        CHECK(same(p_src, p_kept));  // the source is read only
        CHECK(same(m_src, m_kept));
        if (n == streamed) {  // written arrays aligned differently: no streaming, the same bits
          std::vector<T> p_shifted(n + 1, nan), m_again(n, nan);
          sgd_update<T>(p_shifted.data() + 1, g.data(), m_again.data(), n, s, Impl::fast, p_src.data(),
                        m_src.data());
          CHECK(std::equal(p.begin(), p.end(), p_shifted.begin() + 1));  // a bool: no 8M-element message
        }
      }
      auto p = p0, m = m0, v = v0;
      const auto p_src = p0, m_src = m0, v_src = v0;
      adamw_update<T>(p.data(), g.data(), m.data(), v.data(), n, adam, Impl::reference);
      std::vector<T> p_out(n, nan), m_out(n, nan), v_out(n, nan);
      adamw_update<T>(p_out.data(), g.data(), m_out.data(), v_out.data(), n, adam, Impl::fast, p_src.data(),
                      m_src.data(), v_src.data());
      CHECK(same(p_out, p));
      CHECK(same(m_out, m));
      CHECK(same(v_out, v));
      CHECK(same(p_src, p0));  // the source is read only
      CHECK(same(m_src, m0));
      CHECK(same(v_src, v0));
    }
  }
}
