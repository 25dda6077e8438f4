// The executor's mutant switch (tests/support/simt/mutant.hpp), set here through
// set_mutant as SIMT_MUTANT would set it: the named call site behaves as if its source line
// were edited, every other site as written, and the hits are counted.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "simt/cuda_shim.hpp"
#include "simt/executor.hpp"
#include "simt/mutant.hpp"

namespace {

// The kernels' lines, counted from here: a spec names the line of a call below.
constexpr unsigned kBase = __LINE__;
__global__ void broadcast(const float* in, float* out) {
  __shared__ float slot;
  if (threadIdx.x == 0) slot = in[blockIdx.x];
  __syncthreads();  // kBase + 4
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot;
  __syncthreads();  // kBase + 6
}
__global__ void exchange(float* out) {
  const float v = static_cast<float>(threadIdx.x);
  out[2 * threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1) * 100.0f + __shfl_xor_sync(0xffffffffu, v, 2);
  out[2 * threadIdx.x + 1] = static_cast<float>(__ballot_sync(0xffffffffu, threadIdx.x == 5));  // kBase + 11
  __syncwarp();  // kBase + 12
}
// On line kBase + 10 the first call's name starts in column 26 and its '(' is in column 41
// (GCC reports the one, clang the other); the second call's in 72 and 87.

// A spec on a line of this file.
std::string at(unsigned offset, const std::string& rest) {
  return "test_mutants.cpp:" + std::to_string(kBase + offset) + ":" + rest;
}

struct Mutant {  // set for one test, cleared after it
  explicit Mutant(const std::string& spec) { simt::detail::set_mutant(spec); }
  ~Mutant() { simt::detail::set_mutant(""); }
};

// out of exchange() under `spec`, one warp.
std::vector<float> exchanged(const std::string& spec) {
  const Mutant m(spec);
  simt::DeviceBuffer<float> out(64);
  simt::launch(exchange, {1, 32, 0, false, 1}, out.data());
  return out.download();
}

}  // namespace

TEST_CASE("a removed barrier is skipped: hits counted, the race shows", "[simt]") {
  const std::vector<float> in = {1, 2, 3, 4};
  simt::DeviceBuffer<float> din(in);
  int wrong = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    const Mutant m(at(4, "removed"));
    simt::DeviceBuffer<float> out(4 * 64);
    simt::launch(broadcast, {4, 64, 0, false, seed}, din.data(), out.data());
    CHECK(simt::detail::mutant_hits() == 4 * 64);
    const auto v = out.download();
    bool bad = false;
    for (unsigned i = 0; i < v.size(); ++i) bad = bad || v[i] != in[i / 64];
    wrong += bad;
  }
  CHECK(wrong >= 6);
}

TEST_CASE("a mutant of another site, file or line changes nothing", "[simt]") {
  const std::vector<float> in = {1, 2, 3, 4};
  simt::DeviceBuffer<float> din(in);
  // Another line; a file whose name only ends like this one's; the kernel's own line in
  // another file.
  for (const std::string& spec : {at(5, "removed"), "mutants.cpp:" + std::to_string(kBase + 4) + ":removed",
                                 "reduce.cuh:" + std::to_string(kBase + 4) + ":removed"}) {
    INFO(spec);
    const Mutant m(spec);
    simt::DeviceBuffer<float> out(4 * 64);
    simt::launch(broadcast, {4, 64, 0, false, 3}, din.data(), out.data());
    CHECK(simt::detail::mutant_hits() == 0);
    const auto v = out.download();
    for (unsigned i = 0; i < v.size(); ++i) REQUIRE(v[i] == in[i / 64]);
  }
}

TEST_CASE("no-exchange leaves each lane its own value, one call of a line by its columns", "[simt]") {
  const auto plain = exchanged("");
  for (unsigned l = 0; l < 32; ++l) {
    REQUIRE(plain[2 * l] == static_cast<float>((l ^ 1u) * 100 + (l ^ 2u)));
    REQUIRE(plain[2 * l + 1] == static_cast<float>(1u << 5));
  }
  const auto both = exchanged(at(10, "no-exchange"));
  const auto first = exchanged(at(10, "26-41:no-exchange"));
  const auto second = exchanged(at(10, "72-87:no-exchange"));
  const auto vote = exchanged(at(11, "no-exchange"));
  for (unsigned l = 0; l < 32; ++l) {
    INFO("lane " << l);
    CHECK(both[2 * l] == static_cast<float>(l * 100 + l));
    CHECK(first[2 * l] == static_cast<float>(l * 100 + (l ^ 2u)));
    CHECK(second[2 * l] == static_cast<float>((l ^ 1u) * 100 + l));
    CHECK(vote[2 * l + 1] == static_cast<float>(l == 5 ? 1u << 5 : 0u));  // its own bit
  }
}

TEST_CASE("a halved mask leaves the upper lanes outside it: a fault, as on a GPU", "[simt]") {
  REQUIRE_THROWS_WITH(exchanged(at(12, "mask-halved")), Catch::Contains("is not in its mask 0xffff"));
  REQUIRE_THROWS_WITH(exchanged(at(10, "72-87:mask-halved")), Catch::Contains("is not in its mask 0xffff"));
  CHECK(exchanged(at(12, "removed")) == exchanged(""));  // a removed __syncwarp: nothing to see
}

TEST_CASE("a malformed spec, or a kind that does not fit the call, is an error", "[simt]") {
  for (const std::string& spec : {std::string("reduce.cuh:removed"), at(10, "deleted"), at(10, "9-3:no-exchange")})
    REQUIRE_THROWS_WITH(exchanged(spec), Catch::Contains("SIMT_MUTANT='" + spec + "'"));
  REQUIRE_THROWS_WITH(exchanged(at(10, "removed")), Catch::Contains("does not apply to a shuffle or vote"));
  REQUIRE_THROWS_WITH(exchanged(at(12, "no-exchange")), Catch::Contains("does not apply to __syncwarp"));
  const std::vector<float> in = {1};
  simt::DeviceBuffer<float> din(in), out(32);
  const Mutant m(at(4, "mask-halved"));
  REQUIRE_THROWS_WITH(simt::launch(broadcast, {1, 32, 0, false, 1}, din.data(), out.data()),
                      Catch::Contains("does not apply to __syncthreads"));
}
