#include "checkpoint/hash.hpp"

// The state structs, to hold them by value (allocation-free resets); libxxhash 0.8.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstring>
#include <stdexcept>
#include <utility>

namespace codistill::checkpoint {

// The two xxHash states live side by side; only the algorithm's one is used.
struct ContentDigest::State {
  XXH64_state_t x64;
  XXH3_state_t x3;
};

namespace {

constexpr std::pair<DigestAlgorithm, const char*> kDigestNames[] = {{DigestAlgorithm::xxh64, "xxh64"},
                                                                      {DigestAlgorithm::xxh3_64, "xxh3-64"}};

void check(XXH_errorcode rc, const char* what) {
  if (rc != XXH_OK) throw std::runtime_error(std::string("libxxhash: ") + what + " failed");
}

}  // namespace

const char* digest_algorithm_name(DigestAlgorithm a) {
  for (const auto& [alg, name] : kDigestNames)
    if (alg == a) return name;
  throw std::invalid_argument("unknown digest algorithm value " + std::to_string(static_cast<int>(a)));
}

std::vector<std::string> digest_algorithm_names() {
  std::vector<std::string> out;
  for (const auto& entry : kDigestNames) out.emplace_back(entry.second);
  return out;
}

DigestAlgorithm parse_digest_algorithm(const std::string& name) {
  for (const auto& [alg, n] : kDigestNames)
    if (name == n) return alg;
  std::string valid;
  for (const auto& n : digest_algorithm_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown content digest algorithm '" + name + "' (valid: " + valid + ")");
}

ContentDigest::ContentDigest(DigestAlgorithm a) : state_(std::make_unique<State>()), algorithm_(a) { reset(a); }
ContentDigest::~ContentDigest() = default;
ContentDigest::ContentDigest(ContentDigest&&) noexcept = default;
ContentDigest& ContentDigest::operator=(ContentDigest&&) noexcept = default;

void ContentDigest::reset(DigestAlgorithm a) {
  algorithm_ = a;
  if (a == DigestAlgorithm::xxh64) check(XXH64_reset(&state_->x64, 0), "XXH64_reset");
  else check(XXH3_64bits_reset(&state_->x3), "XXH3_64bits_reset");
}

void ContentDigest::update(const void* data, std::size_t n) {
  if (n == 0) return;  // data may be null then
  if (algorithm_ == DigestAlgorithm::xxh64) check(XXH64_update(&state_->x64, data, n), "XXH64_update");
  else check(XXH3_64bits_update(&state_->x3, data, n), "XXH3_64bits_update");
}

std::uint64_t ContentDigest::digest() const {
  return algorithm_ == DigestAlgorithm::xxh64 ? XXH64_digest(&state_->x64) : XXH3_64bits_digest(&state_->x3);
}

std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed) { return XXH64(data, n, seed); }
std::uint64_t xxh3_64(const void* data, std::size_t n) { return XXH3_64bits(data, n); }

namespace {

inline std::uint32_t fold16(std::uint32_t s) { return (s & 0xffff) + (s >> 16); }

// HDF5 sums 360 big-endian 16-bit words at a time in uint32 arithmetic, then folds both
// sums. Within such a block only wrapping additions happen, so any regrouping gives the
// same bits. Word j of every 8 (j = 0..7) goes to its own lane, which keeps a running sum
// a_j and a sum of running sums c_j; over the block's M = 45 rounds word (m, j) is at
// t = 8m + j and is counted 360 - t = 8 (M - m) - j times in sum2, so
//   sum2 += 360 * sum1 + 8 * sum_j c_j - sum_j j * a_j,   sum1 += sum_j a_j.
// The lanes are four uint32 (two words each) in one 16-byte vector: GCC/Clang vector
// extensions give SSE2 / NEON code on any target without intrinsics.
constexpr std::size_t kBlockWords = 360, kRounds = kBlockWords / 8;

#if defined(__GNUC__)
typedef std::uint32_t u32x4 __attribute__((vector_size(16)));

void fletcher_block(const unsigned char* p, std::uint32_t& sum1, std::uint32_t& sum2) {
  u32x4 ae = {}, ao = {}, ce = {}, co = {};  // lanes of the even / odd word of each uint32
  for (std::size_t m = 0; m < kRounds; ++m, p += 16) {
    u32x4 x;
    std::memcpy(&x, p, sizeof x);
    u32x4 even = ((x & 0xffu) << 8) | ((x >> 8) & 0xffu);  // bytes 0,1 as a big-endian word
    u32x4 odd = ((x >> 8) & 0xff00u) | (x >> 24);          // bytes 2,3
    ae += even;
    ce += ae;
    ao += odd;
    co += ao;
  }
  std::uint32_t sa = 0, sc = 0, sj = 0;
  for (int l = 0; l < 4; ++l) {
    std::uint32_t j = 2 * static_cast<std::uint32_t>(l);
    sa += ae[l] + ao[l];
    sc += ce[l] + co[l];
    sj += j * ae[l] + (j + 1) * ao[l];
  }
  sum2 += static_cast<std::uint32_t>(kBlockWords) * sum1 + 8u * sc - sj;
  sum1 += sa;
  sum1 = fold16(sum1);
  sum2 = fold16(sum2);
}
#else
void fletcher_block(const unsigned char* p, std::uint32_t& sum1, std::uint32_t& sum2) {
  for (std::size_t i = 0; i < kBlockWords; ++i, p += 2) {
    sum1 += (static_cast<std::uint32_t>(p[0]) << 8) | p[1];
    sum2 += sum1;
  }
  sum1 = fold16(sum1);
  sum2 = fold16(sum2);
}
#endif

}  // namespace

std::uint32_t fletcher32(const void* data, std::size_t n) {
  auto p = static_cast<const unsigned char*>(data);
  std::size_t words = n / 2;
  std::uint32_t sum1 = 0, sum2 = 0;
  for (; words >= kBlockWords; words -= kBlockWords, p += 2 * kBlockWords) fletcher_block(p, sum1, sum2);
  if (words > 0) {  // HDF5's last, shorter block
    for (std::size_t i = 0; i < words; ++i, p += 2) {
      sum1 += (static_cast<std::uint32_t>(p[0]) << 8) | p[1];
      sum2 += sum1;
    }
    sum1 = fold16(sum1);
    sum2 = fold16(sum2);
  }
  if (n % 2) {  // an odd trailing byte counts as the high half of a word
    sum1 += static_cast<std::uint32_t>(p[0]) << 8;
    sum2 += sum1;
    sum1 = fold16(sum1);
    sum2 = fold16(sum2);
  }
  sum1 = fold16(sum1);
  sum2 = fold16(sum2);
  return (sum2 << 16) | sum1;
}

std::string hex64(std::uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 0xf];
  return s;
}

}  // namespace codistill::checkpoint
