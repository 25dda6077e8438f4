#pragma once
// Two checkpoints hold bit-identical parameters, buffers, optimizer slots and state.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "checkpoint/checkpoint.hpp"

namespace codistill::test {

inline void require_identical(const std::string& a, const std::string& b) {
  namespace ckpt = codistill::checkpoint;
  auto x = ckpt::read(a), y = ckpt::read(b);
  CHECK(x.meta.step == y.meta.step);
  CHECK(x.meta.model_fingerprint == y.meta.model_fingerprint);
  CHECK(x.meta.content_digest == y.meta.content_digest);
  for (auto section : ckpt::kSections) {
    const auto& xs = x.section(section);
    const auto& ys = y.section(section);
    REQUIRE(xs.size() == ys.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO(xs[i].name);
      REQUIRE(xs[i].name == ys[i].name);
      REQUIRE(xs[i].nbytes() == ys[i].nbytes());
      CHECK(std::memcmp(xs[i].ref().data, ys[i].ref().data, xs[i].nbytes()) == 0);
    }
  }
}

}  // namespace codistill::test
