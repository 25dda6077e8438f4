#pragma once
// Two checkpoints hold bit-identical parameters, buffers, optimizer slots and state; or how
// far apart their parameters are.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
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

// The largest ||a - b|| / ||a|| over a's parameters and buffers (BatchNorm's running
// statistics), each of which b must hold too (by name; float32).
inline double max_relative_difference(const codistill::checkpoint::CheckpointData& a,
                                      const codistill::checkpoint::CheckpointData& b) {
  using codistill::checkpoint::Section;
  double worst = 0;
  for (const Section section : {Section::params, Section::buffers})
    for (const auto& x : a.section(section)) {
      INFO(x.name);
      const auto* y = b.find(section, x.name);
      REQUIRE(y != nullptr);
      REQUIRE(x.real.numel() == y->real.numel());
      const float* p = x.real.data<float>();
      const float* q = y->real.data<float>();
      double diff = 0, norm = 0;
      for (std::int64_t i = 0; i < x.real.numel(); ++i) {
        diff += (double(p[i]) - q[i]) * (double(p[i]) - q[i]);
        norm += double(p[i]) * p[i];
      }
      worst = std::max(worst, std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30));
    }
  return worst;
}

}  // namespace codistill::test
