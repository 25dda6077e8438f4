// The owner of the CUDA backend's library handles (kernels/cuda/unique_handle.hpp) with a
// fabricated handle type and destroy function: each handle is destroyed exactly once, and
// never after release().
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "kernels/cuda/unique_handle.hpp"

namespace {

struct Fake {};
std::vector<Fake*> destroyed;
int destroy_fake(Fake* h) {
  destroyed.push_back(h);
  return 0;
}
using FakeHandle = codistill::kernels::cuda::UniqueHandle<Fake*, destroy_fake>;

// A library's create call: writes the new handle through its out parameter.
int create_fake(Fake** out, Fake* made) {
  *out = made;
  return 0;
}

}  // namespace

TEST_CASE("a handle is destroyed once, by its last owner", "[handles]") {
  destroyed.clear();
  Fake a, b;
  {
    FakeHandle h;
    CHECK_FALSE(h);
    create_fake(h.put(), &a);
    CHECK(h.get() == &a);
    FakeHandle moved = std::move(h);
    CHECK_FALSE(h);
    CHECK(moved.get() == &a);
    CHECK(destroyed.empty());
    FakeHandle other(&b);
    other = std::move(moved);  // b goes, a is kept
    CHECK(destroyed == std::vector<Fake*>{&b});
    CHECK(other.get() == &a);
  }
  CHECK(destroyed == std::vector<Fake*>{&b, &a});
}

TEST_CASE("put and reset destroy the handle held, release gives it up", "[handles]") {
  destroyed.clear();
  Fake a, b, c;
  FakeHandle h(&a);
  create_fake(h.put(), &b);  // a handle created again: the old one is destroyed first
  CHECK(destroyed == std::vector<Fake*>{&a});
  h.reset(&c);
  CHECK(destroyed == std::vector<Fake*>{&a, &b});
  CHECK(h.release() == &c);
  CHECK_FALSE(h);
  h.reset();
  CHECK(destroyed == std::vector<Fake*>{&a, &b});  // c was released: never destroyed here
}
