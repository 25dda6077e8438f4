// Synchronized batchnorm (Op::batchnorm_sync) against plain batchnorm: a batch cut among
// 1, 2 or 3 simulated ranks, each rank's sums added (the all-reduce), every rank
// normalized from the total, gives what batchnorm_forward/backward give on the whole
// batch: y, dx, the running and saved statistics, and dgamma/dbeta summed over the ranks.
// And the errors: a total that misses the counts, sums of the wrong size or dtype.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/image/batchnorm.hpp"
#include "kernels/cpu/image/batchnorm_sync.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::kernels::BatchNormShape;
using codistill::test::fresh_seed;
using codistill::test::random_vector;
using codistill::test::rel_error;

namespace {

template <class T>
double tolerance() {
  return sizeof(T) == 4 ? 2e-5 : 1e-11;
}

template <class T>
std::vector<T> slab(const std::vector<T>& v, std::int64_t row0, std::int64_t rows, std::int64_t per_row) {
  return {v.begin() + row0 * per_row, v.begin() + (row0 + rows) * per_row};
}

// Rank r's share of the batch: the first N % R ranks take one row more; first[r] is its
// first row.
void split_rows(const BatchNormShape& s, int R, std::vector<BatchNormShape>& shapes, std::vector<std::int64_t>& first) {
  shapes.assign(R, s);
  first.assign(R, 0);
  const auto N = s.batch;
  for (int r = 0, row = 0; r < R; ++r) {
    shapes[r].batch = N / R + (r < N % R ? 1 : 0);
    first[r] = row;
    row += static_cast<int>(shapes[r].batch);
  }
}

// The ranks' variance comes from sums of x - the running mean: in double precision its
// rounding error grows with ((batch mean - running mean) / std)^2, up to about 64 for
// these draws (means up to 12, std near 1.7). A draw of 3 close values (N 3, S 1) can make
// it far larger: the double tolerance grows with it (in the test), capped at 1e-7. (The float results
// round far above that error: the sums are accumulated in double for both types.)
template <class T>
double conditioning(const std::vector<T>& sm, const std::vector<T>& si, const std::vector<T>& rm0) {
  const auto C = static_cast<int>(sm.size());
  double cond = 64;
  for (int c = 0; c < C; ++c) {
    const double z = (static_cast<double>(sm[c]) - static_cast<double>(rm0[c])) * static_cast<double>(si[c]);
    cond = std::max(cond, 1 + z * z);
  }
  return cond;
}

}  // namespace

TEMPLATE_TEST_CASE("synchronized batchnorm over ranks equals batchnorm over the whole batch", "[batchnorm_sync]",
                   float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const auto [N, C, S, R] = GENERATE(table<int, int, int, int>(
      {{4, 3, 5, 1}, {4, 3, 5, 2}, {6, 5, 49, 3}, {3, 2, 1, 3}, {32, 8, 64, 2}, {7, 4, 9, 2}}));
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  INFO("N " << N << " C " << C << " S " << S << " ranks " << R);
  BatchNormShape s;
  s.batch = N, s.channels = C, s.spatial = S;
  const std::int64_t per_row = C * S;
  // Channels far from zero mean and from unit scale, a running mean away from the batch's:
  // the shifted sums must still give the variance to the tolerance.
  auto x = random_vector<T>(N * per_row, seed, -1, 1);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(x[i] * 3 + 5 + static_cast<double>((i / S) % C));
  const auto dy = random_vector<T>(N * per_row, seed + 1), gamma = random_vector<T>(C, seed + 2, 0.5, 1.5),
             beta = random_vector<T>(C, seed + 3), rm0 = random_vector<T>(C, seed + 4),
             rv0 = random_vector<T>(C, seed + 5, 0.5, 2), dg0 = random_vector<T>(C, seed + 6),
             db0 = random_vector<T>(C, seed + 7);

  // The whole batch, plain.
  std::vector<T> rm = rm0, rv = rv0, y(x.size()), sm(C), si(C), dx(x.size()), dg = dg0, db = db0;
  batchnorm_forward<T>(x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), y.data(), sm.data(), si.data(), true,
                       s, Impl::reference);
  batchnorm_backward<T>(x.data(), gamma.data(), sm.data(), si.data(), dy.data(), dx.data(), dg.data(), db.data(), true,
                        s, Impl::reference);

  // The ranks.
  std::vector<double> total(2 * C + 1, 0.0);
  std::vector<std::vector<double>> local(R, std::vector<double>(2 * C + 1));
  std::vector<BatchNormShape> shapes;
  std::vector<std::int64_t> first;
  split_rows(s, R, shapes, first);
  std::vector<std::vector<T>> rrm(R, rm0), rrv(R, rv0), rsm(R, std::vector<T>(C)), rsi(R, std::vector<T>(C));
  std::vector<T> ry(x.size(), T(NAN)), rdx(x.size(), T(NAN)), rdg = dg0, rdb = db0;
  for (int r = 0; r < R; ++r) {
    const auto xr = slab(x, first[r], shapes[r].batch, per_row);
    batchnorm_sums<T>(xr.data(), nullptr, rrm[r].data(), nullptr, local[r].data(), shapes[r], impl);
    for (int i = 0; i <= 2 * C; ++i) total[i] += local[r][i];
  }
  CHECK(total[2 * C] == N * S);
  for (int r = 0; r < R; ++r) {
    const auto xr = slab(x, first[r], shapes[r].batch, per_row);
    batchnorm_forward_synced<T>(xr.data(), gamma.data(), beta.data(), rrm[r].data(), rrv[r].data(), total.data(),
                                ry.data() + first[r] * per_row, rsm[r].data(), rsi[r].data(), shapes[r], impl);
  }
  std::fill(total.begin(), total.end(), 0.0);
  for (int r = 0; r < R; ++r) {
    const auto xr = slab(x, first[r], shapes[r].batch, per_row), dyr = slab(dy, first[r], shapes[r].batch, per_row);
    batchnorm_sums<T>(xr.data(), dyr.data(), rsm[r].data(), rsi[r].data(), local[r].data(), shapes[r], impl);
    for (int i = 0; i <= 2 * C; ++i) total[i] += local[r][i];
  }
  for (int r = 0; r < R; ++r) {
    const auto xr = slab(x, first[r], shapes[r].batch, per_row), dyr = slab(dy, first[r], shapes[r].batch, per_row);
    batchnorm_backward_synced<T>(xr.data(), gamma.data(), rsm[r].data(), rsi[r].data(), dyr.data(), local[r].data(),
                                 total.data(), rdx.data() + first[r] * per_row, rdg.data(), rdb.data(), shapes[r], impl);
  }
  const double cond = conditioning(sm, si, rm0);
  INFO("conditioning " << cond);
  const double tol = sizeof(T) == 4 ? tolerance<T>() : std::min(1e-7, tolerance<T>() * cond / 64);
  CHECK(rel_error(ry, y) < tol);
  CHECK(rel_error(rdx, dx) < tol);
  CHECK(rel_error(rdg, dg) < tol);
  CHECK(rel_error(rdb, db) < tol);
  for (int r = 0; r < R; ++r) {
    INFO("rank " << r);
    CHECK(rel_error(rrm[r], rm) < tol);
    CHECK(rel_error(rrv[r], rv) < tol);
    CHECK(rel_error(rsm[r], sm) < tol);
    CHECK(rel_error(rsi[r], si) < tol);
    CHECK(rrm[r] == rrm[0]);  // every rank ends with the same running statistics, bit for bit
    CHECK(rrv[r] == rrv[0]);
  }
}

TEST_CASE("synchronized batchnorm refuses a total without the ranks' counts, and sums of the wrong shape",
          "[batchnorm_sync]") {
  BatchNormShape s;
  s.batch = 2, s.channels = 2, s.spatial = 1;
  std::vector<float> x{1, 2, 3, 4}, g{1, 1}, b{0, 0}, rm{0, 0}, rv{1, 1}, y(4), sm(2), si(2);
  std::vector<double> sums(5, 0.0);  // count 0: nobody added theirs
  CHECK_THROWS_WITH(batchnorm_forward_synced<float>(x.data(), g.data(), b.data(), rm.data(), rv.data(), sums.data(),
                                                    y.data(), sm.data(), si.data(), s),
                    Catch::Contains("summed value count is 0"));
  sums[4] = 1;  // one value per channel in all: no variance to take
  CHECK_THROWS_WITH(batchnorm_forward_synced<float>(x.data(), g.data(), b.data(), rm.data(), rv.data(), sums.data(),
                                                    y.data(), sm.data(), si.data(), s),
                    Catch::Contains("a whole number >= 2"));

  namespace k = codistill::kernels;
  k::Queue& q = k::default_cpu_queue();
  k::Tensor tx = k::Tensor::from_vector({2, 2, 1}, x), center = k::Tensor::zeros({2});
  k::Tensor wrong_size = k::Tensor::zeros({4}, k::DType::f64), wrong_dtype = k::Tensor::zeros({5}, k::DType::f32);
  CHECK_THROWS_WITH(q.backend().batchnorm_sums(tx, nullptr, center, nullptr, wrong_size, s, q),
                    Catch::Contains("sums must be float64 [5]"));
  CHECK_THROWS_WITH(q.backend().batchnorm_sums(tx, nullptr, center, nullptr, wrong_dtype, s, q),
                    Catch::Contains("sums must be float64 [5]"));
}
