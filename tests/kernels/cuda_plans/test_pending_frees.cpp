// The stream-safe reuse bookkeeping of the CUDA caching allocator (kernels/cuda/
// pending_frees.hpp) with fabricated markers: a freed block comes back only when every
// marker recorded at its free is done, in free order, and each marker is recycled once.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "kernels/cuda/pending_frees.hpp"

using codistill::kernels::cuda::PendingFrees;

TEST_CASE("a freed block waits for every stream's marker", "[allocator]") {
  PendingFrees<int> pending;
  int a = 0, b = 0, c = 0;
  pending.add(&a, {1, 2});  // freed while two streams had work queued
  pending.add(&b, {3});
  pending.add(&c, {});      // no live stream: reusable at once
  std::set<int> done = {2, 3}, recycled;
  auto is_done = [&](int m) { return done.count(m) > 0; };
  auto recycle = [&](int m) { REQUIRE(recycled.insert(m).second); };

  auto ready = pending.collect(is_done, recycle);
  REQUIRE(ready == std::vector<void*>{&b, &c});  // a still waits for marker 1
  REQUIRE(recycled == std::set<int>{3});
  REQUIRE(pending.size() == 1);

  REQUIRE(pending.collect(is_done, recycle).empty());
  done.insert(1);
  ready = pending.collect(is_done, recycle);
  REQUIRE(ready == std::vector<void*>{&a});
  REQUIRE(recycled == std::set<int>{1, 2, 3});
  REQUIRE(pending.empty());
}
