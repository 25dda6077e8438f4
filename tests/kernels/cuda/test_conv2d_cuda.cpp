// cuDNN convolution and max pooling against the CPU references (kernels/cpu/conv2d.hpp,
// pool.hpp), on fresh random inputs with odd shapes, strides and paddings, outputs
// poisoned first: forward with and without bias, backward with and without dx and db,
// overwriting and accumulating; TF32 (looser bound); reproducibility of the backward pass.
// Without a CUDA device every case prints "skipped: no CUDA device".
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cuda/conv2d.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

namespace {

cpu::Conv2dShape conv(std::int64_t b, std::int64_t c, std::int64_t h, std::int64_t w,
                      std::int64_t o, std::int64_t kh, std::int64_t kw, std::int64_t sh,
                      std::int64_t sw, std::int64_t ph, std::int64_t pw) {
  cpu::Conv2dShape s;
  s.batch = b, s.in_channels = c, s.height = h, s.width = w, s.out_channels = o;
  s.kernel_h = kh, s.kernel_w = kw, s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

struct ConvData {
  std::int64_t nx, nw, ny, no;
  std::vector<float> x, w, b, dy, dw0, db0;
  ConvData(const cpu::Conv2dShape& s, std::uint64_t seed)
      : nx(s.batch * s.in_channels * s.height * s.width),
        nw(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w),
        ny(s.batch * s.out_channels * s.out_height() * s.out_width()),
        no(s.out_channels),
        x(random_vector<float>(nx, seed)),
        w(random_vector<float>(nw, seed + 1)),
        b(random_vector<float>(no, seed + 2)),
        dy(random_vector<float>(ny, seed + 3)),
        dw0(random_vector<float>(nw, seed + 4)),
        db0(random_vector<float>(no, seed + 5)) {}
};

void check_conv(const cpu::Conv2dShape& s, std::uint64_t seed, bool tf32, double bound) {
  const ConvData d(s, seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context(tf32);
  DeviceVec<float> x(d.x), w(d.w), b(d.b), dy(d.dy);
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    std::vector<float> want = poisoned<float>(d.ny);
    cpu::conv2d_forward(d.x.data(), d.w.data(), bias ? d.b.data() : nullptr, want.data(), s,
                        cpu::Impl::reference);
    DeviceVec<float> y(poisoned<float>(d.ny));
    cuda::conv2d_forward(x.ptr, w.ptr, bias ? b.ptr : nullptr, y.ptr, s, ctx);
    stream.synchronize();
    CHECK(rel_error(y.host(), want) < bound);
  }
  for (bool accumulate : {false, true})
    for (bool grads : {true, false}) {  // false: no dx and no db
      INFO("accumulate " << accumulate << " dx/db " << grads);
      std::vector<float> want_dx = poisoned<float>(d.nx);
      std::vector<float> want_dw = accumulate ? d.dw0 : poisoned<float>(d.nw);
      std::vector<float> want_db = accumulate ? d.db0 : poisoned<float>(d.no);
      cpu::conv2d_backward(d.x.data(), d.w.data(), d.dy.data(), grads ? want_dx.data() : nullptr,
                           want_dw.data(), grads ? want_db.data() : nullptr, s, accumulate,
                           cpu::Impl::reference);
      DeviceVec<float> dx(poisoned<float>(d.nx));
      DeviceVec<float> dw(accumulate ? d.dw0 : poisoned<float>(d.nw));
      DeviceVec<float> db(accumulate ? d.db0 : poisoned<float>(d.no));
      cuda::conv2d_backward(x.ptr, w.ptr, dy.ptr, grads ? dx.ptr : nullptr, dw.ptr,
                            grads ? db.ptr : nullptr, s, accumulate, ctx);
      stream.synchronize();
      CHECK(rel_error(dw.host(), want_dw) < bound);
      if (grads) {
        CHECK(rel_error(dx.host(), want_dx) < bound);
        CHECK(rel_error(db.host(), want_db) < 1e-5);
      } else {
        CHECK(all_nan(dx.host()));
        if (accumulate) CHECK(db.host() == d.db0);
        else CHECK(all_nan(db.host()));
      }
    }
}

cpu::Pool2dShape pool(std::int64_t b, std::int64_t c, std::int64_t h, std::int64_t w,
                      std::int64_t k, std::int64_t stride) {
  cpu::Pool2dShape s;
  s.batch = b, s.channels = c, s.height = h, s.width = w, s.kernel = k, s.stride = stride;
  return s;
}

}  // namespace

TEST_CASE("cuda conv2d matches the CPU reference", "[cuda][conv2d]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // batch, in channels, height, width, out channels, kernel h/w, stride h/w, padding h/w
  for (const auto& s :
       {conv(2, 3, 11, 13, 5, 3, 3, 1, 1, 1, 1), conv(3, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2),
        conv(1, 4, 9, 7, 6, 3, 2, 2, 1, 0, 1), conv(5, 16, 14, 14, 32, 3, 3, 2, 2, 1, 1),
        conv(7, 2, 6, 6, 3, 1, 1, 1, 1, 0, 0)}) {
    INFO("batch " << s.batch << " C " << s.in_channels << " " << s.height << "x" << s.width
                  << " O " << s.out_channels << " k " << s.kernel_h << "x" << s.kernel_w
                  << " stride " << s.stride_h << "," << s.stride_w << " pad " << s.pad_h << ","
                  << s.pad_w);
    check_conv(s, seed + s.batch * 100 + s.height, false, tolerance<float>());
  }
}

TEST_CASE("cuda conv2d with TF32 stays within TF32 precision", "[cuda][conv2d]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  check_conv(conv(5, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1), seed, true, 1e-2);
}

TEST_CASE("cuda conv2d backward is reproducible", "[cuda][conv2d]") {
  if (no_cuda_device()) return;
  const auto s = conv(16, 32, 28, 28, 64, 3, 3, 1, 1, 1, 1);
  const ConvData d(s, fresh_seed());
  cuda::Stream stream(0);
  DeviceVec<float> x(d.x), w(d.w), dy(d.dy);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    DeviceVec<float> dx(poisoned<float>(d.nx)), dw(poisoned<float>(d.nw)),
        db(poisoned<float>(d.no));
    cuda::conv2d_backward(x.ptr, w.ptr, dy.ptr, dx.ptr, dw.ptr, db.ptr, s, false,
                          stream.context());
    stream.synchronize();
    runs.push_back(dx.host());
    runs.push_back(dw.host());
    runs.push_back(db.host());
  }
  CHECK(runs[0] == runs[3]);
  CHECK(runs[1] == runs[4]);
  CHECK(runs[2] == runs[5]);
}

TEST_CASE("cuda maxpool2d matches the CPU reference", "[cuda][conv2d]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  for (const auto& s : {pool(2, 3, 8, 8, 2, 2), pool(3, 5, 11, 9, 3, 2), pool(1, 1, 5, 5, 5, 1),
                        pool(4, 7, 28, 28, 2, 2), pool(2, 2, 13, 17, 3, 3)}) {
    INFO("batch " << s.batch << " C " << s.channels << " " << s.height << "x" << s.width << " k "
                  << s.kernel << " stride " << s.stride);
    const std::int64_t nx = s.batch * s.channels * s.height * s.width;
    const std::int64_t ny = s.batch * s.channels * s.out_height() * s.out_width();
    const auto xs = random_vector<float>(nx, seed + nx);
    const auto dys = random_vector<float>(ny, seed + nx + 1);
    std::vector<float> y_want = poisoned<float>(ny), dx_want = poisoned<float>(nx);
    std::vector<std::int32_t> arg(ny);
    cpu::maxpool2d_forward(xs.data(), y_want.data(), arg.data(), s, cpu::Impl::reference);
    cpu::maxpool2d_backward(dys.data(), arg.data(), dx_want.data(), s, cpu::Impl::reference);

    DeviceVec<float> x(xs), y(poisoned<float>(ny)), dy(dys), dx(poisoned<float>(nx));
    cuda::maxpool2d_forward(x.ptr, y.ptr, s, ctx);
    cuda::maxpool2d_backward(x.ptr, y.ptr, dy.ptr, dx.ptr, s, ctx);
    stream.synchronize();
    CHECK(y.host() == y_want);  // a maximum is exact
    // Overlapping windows add several gradients per input, maybe in another order.
    CHECK(rel_error(dx.host(), dx_want) < 1e-5);
  }
}
