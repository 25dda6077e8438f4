// The pool of recomputed blocks' buffers (codistill/nn/buffer_pool.hpp): a dropped buffer is
// taken again only when no tensor outside the dropped ones holds it, whatever the shape it
// is asked for at its size, and the pool lets go of one batch size's buffers for another.
#include <catch2/catch.hpp>

#include "codistill/nn/buffer_pool.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Device;
using kernels::Tensor;

TEST_CASE("buffer pool: only buffers nobody else holds come back, at any shape of their size", "[nn][recompute]") {
  nn::BufferPool pool;
  pool.use_for(8);
  Tensor a = Tensor::empty({8, 4}), b = Tensor::empty({8, 4}), c = Tensor::empty({8, 4});
  const void* a_mem = a.raw();
  const Tensor held = b;  // a block's output, kept by the next block as its input
  Tensor saved = c;       // a layer's saved input: the same buffer as c, dropped too
  pool.drop(a);
  pool.drop(b);
  pool.drop(c);
  pool.drop(saved);
  CHECK_FALSE(a.defined());
  pool.settle();
  CHECK(pool.free_bytes() == 2 * 8 * 4 * 4);  // a and c (once), not b
  const Tensor t1 = pool.take({4, 8}, DType::f32, Device::cpu());
  const Tensor t2 = pool.take({32}, DType::f32, Device::cpu());
  REQUIRE(t1.defined());
  REQUIRE(t2.defined());
  CHECK(t1.shape() == kernels::Shape{4, 8});
  CHECK((t1.raw() == a_mem || t2.raw() == a_mem));
  CHECK(t1.raw() != held.raw());
  CHECK(t2.raw() != held.raw());
  CHECK_FALSE(pool.take({8, 4}, DType::f32, Device::cpu()).defined());  // none left
  CHECK_FALSE(pool.take({8, 4}, DType::f64, Device::cpu()).defined());
}

TEST_CASE("buffer pool: another number of rows lets the kept buffers go", "[nn][recompute]") {
  nn::BufferPool pool;
  pool.use_for(8);
  Tensor a = Tensor::empty({8, 4});
  pool.drop(a);
  pool.settle();
  pool.use_for(8);
  CHECK(pool.free_bytes() == 128);
  pool.use_for(3);
  CHECK(pool.free_bytes() == 0);
  CHECK_FALSE(pool.take({8, 4}, DType::f32, Device::cpu()).defined());
}
