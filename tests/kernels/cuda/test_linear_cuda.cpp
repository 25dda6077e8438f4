// cuBLAS linear layer against the CPU reference (kernels/cpu/linear.hpp), on fresh random
// inputs with odd sizes, outputs poisoned first: forward with and without bias, backward
// with and without dx, overwriting and accumulating; an empty batch; TF32 (looser bound);
// reproducibility. Without a CUDA device every case prints "skipped: no CUDA device".
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cuda/linear.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

struct Shape {
  std::int64_t M, N, K;
};

struct Inputs {
  std::vector<float> x, w, b, dy, dw0, db0;
  Inputs(const Shape& s, std::uint64_t seed)
      : x(random_vector<float>(s.M * s.K, seed)),
        w(random_vector<float>(s.N * s.K, seed + 1)),
        b(random_vector<float>(s.N, seed + 2)),
        dy(random_vector<float>(s.M * s.N, seed + 3)),
        dw0(random_vector<float>(s.N * s.K, seed + 4)),
        db0(random_vector<float>(s.N, seed + 5)) {}
};

void check_linear(const Shape& s, std::uint64_t seed, bool tf32, double bound) {
  const Inputs in(s, seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context(tf32);
  DeviceVec<float> x(in.x), w(in.w), b(in.b), dy(in.dy);

  for (bool bias : {false, true}) {
    INFO("bias " << bias);
    std::vector<float> want = poisoned<float>(s.M * s.N);
    cpu::linear_forward(in.x.data(), in.w.data(), bias ? in.b.data() : nullptr, want.data(), s.M,
                        s.N, s.K, cpu::Impl::reference);
    DeviceVec<float> y(poisoned<float>(s.M * s.N));
    cuda::linear_forward(x.ptr, w.ptr, bias ? b.ptr : nullptr, y.ptr, s.M, s.N, s.K, ctx);
    stream.synchronize();
    CHECK(rel_error(y.host(), want) < bound);
  }

  for (bool accumulate : {false, true})
    for (bool with_dx : {true, false}) {
      INFO("accumulate " << accumulate << " dx " << with_dx);
      std::vector<float> want_dx = poisoned<float>(s.M * s.K);
      std::vector<float> want_dw = accumulate ? in.dw0 : poisoned<float>(s.N * s.K);
      std::vector<float> want_db = accumulate ? in.db0 : poisoned<float>(s.N);
      cpu::linear_backward(in.x.data(), in.w.data(), in.dy.data(),
                           with_dx ? want_dx.data() : nullptr, want_dw.data(), want_db.data(),
                           s.M, s.N, s.K, accumulate, cpu::Impl::reference);
      DeviceVec<float> dx(poisoned<float>(s.M * s.K));
      DeviceVec<float> dw(accumulate ? in.dw0 : poisoned<float>(s.N * s.K));
      DeviceVec<float> db(accumulate ? in.db0 : poisoned<float>(s.N));
      cuda::linear_backward(x.ptr, w.ptr, dy.ptr, with_dx ? dx.ptr : nullptr, dw.ptr, db.ptr, s.M,
                            s.N, s.K, accumulate, ctx);
      stream.synchronize();
      if (with_dx) CHECK(rel_error(dx.host(), want_dx) < bound);
      else CHECK(all_nan(dx.host()));  // skipped: still the poison
      CHECK(rel_error(dw.host(), want_dw) < bound);
      CHECK(rel_error(db.host(), want_db) < 1e-5);  // double sums on both sides
    }
}

}  // namespace

TEST_CASE("cuda linear matches the CPU reference", "[cuda][linear]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (const Shape& s : {Shape{1, 1, 1}, Shape{7, 13, 33}, Shape{129, 65, 300},
                         Shape{300, 10, 784}, Shape{33, 1000, 17}, Shape{600, 45, 3}}) {
    INFO("M " << s.M << " N " << s.N << " K " << s.K);
    check_linear(s, seed + s.M * 31 + s.N, false, tolerance<float>());
  }
}

TEST_CASE("cuda linear with TF32 stays within TF32 precision", "[cuda][linear]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  check_linear(Shape{129, 65, 300}, seed, true, 1e-2);  // 10-bit mantissa products
}

TEST_CASE("cuda linear with an empty batch", "[cuda][linear]") {
  if (no_cuda_device()) return;
  const Shape s{0, 5, 7};
  const Inputs in(s, fresh_seed());
  cuda::Stream stream(0);
  DeviceVec<float> x(in.x), w(in.w), dy(in.dy), y(std::vector<float>{});
  cuda::linear_forward(x.ptr, w.ptr, nullptr, y.ptr, s.M, s.N, s.K, stream.context());
  DeviceVec<float> dw(poisoned<float>(s.N * s.K)), db(poisoned<float>(s.N));
  cuda::linear_backward(x.ptr, w.ptr, dy.ptr, nullptr, dw.ptr, db.ptr, s.M, s.N, s.K, false,
                        stream.context());
  stream.synchronize();
  CHECK(dw.host() == std::vector<float>(s.N * s.K, 0.0f));
  CHECK(db.host() == std::vector<float>(s.N, 0.0f));
  DeviceVec<float> dw_acc(in.dw0);
  cuda::linear_backward(x.ptr, w.ptr, dy.ptr, nullptr, dw_acc.ptr, nullptr, s.M, s.N, s.K, true,
                        stream.context());
  stream.synchronize();
  CHECK(dw_acc.host() == in.dw0);
  CHECK_THROWS_AS(cuda::linear_forward(x.ptr, w.ptr, nullptr, y.ptr, 1, 0, 7, stream.context()),
                  std::invalid_argument);
}

TEST_CASE("cuda linear backward is reproducible", "[cuda][linear]") {
  if (no_cuda_device()) return;
  const Shape s{1000, 300, 200};
  const Inputs in(s, fresh_seed());
  cuda::Stream stream(0);
  DeviceVec<float> x(in.x), w(in.w), dy(in.dy);
  DeviceVec<float> dx1(poisoned<float>(s.M * s.K)), dw1(poisoned<float>(s.N * s.K)),
      db1(poisoned<float>(s.N));
  DeviceVec<float> dx2(poisoned<float>(s.M * s.K)), dw2(poisoned<float>(s.N * s.K)),
      db2(poisoned<float>(s.N));
  cuda::linear_backward(x.ptr, w.ptr, dy.ptr, dx1.ptr, dw1.ptr, db1.ptr, s.M, s.N, s.K, false,
                        stream.context());
  cuda::linear_backward(x.ptr, w.ptr, dy.ptr, dx2.ptr, dw2.ptr, db2.ptr, s.M, s.N, s.K, false,
                        stream.context());
  stream.synchronize();
  CHECK(dx1.host() == dx2.host());
  CHECK(dw1.host() == dw2.host());
  CHECK(db1.host() == db2.host());
}
