#include "checkpoint/hash.hpp"

#include <bit>
#include <cstring>

namespace codistill::checkpoint {

namespace {

// XXH64's primes (from its public specification).
constexpr std::uint64_t P1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t P3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t P5 = 0x27D4EB2F165667C5ULL;

static_assert(std::endian::native == std::endian::little,
              "checkpoint hashing reads words in host order; big-endian hosts need byte swaps");

inline std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t round64(std::uint64_t acc, std::uint64_t input) {
  acc += input * P2;
  acc = std::rotl(acc, 31);
  return acc * P1;
}
inline std::uint64_t merge64(std::uint64_t h, std::uint64_t v) {
  h ^= round64(0, v);
  return h * P1 + P4;
}

// Consumes whole 32-byte stripes; returns the bytes used.
std::size_t stripes(std::array<std::uint64_t, 4>& acc, const unsigned char* p, std::size_t n) {
  // Local copies: the compiler keeps the four lanes in registers only if they do not alias p.
  std::uint64_t v1 = acc[0], v2 = acc[1], v3 = acc[2], v4 = acc[3];
  std::size_t done = 0;
  for (; done + 32 <= n; done += 32, p += 32) {
    v1 = round64(v1, load64(p));
    v2 = round64(v2, load64(p + 8));
    v3 = round64(v3, load64(p + 16));
    v4 = round64(v4, load64(p + 24));
  }
  acc = {v1, v2, v3, v4};
  return done;
}

}  // namespace

Xxh64::Xxh64(std::uint64_t seed) : seed_(seed) { acc_ = {seed + P1 + P2, seed + P2, seed, seed - P1}; }

void Xxh64::update(const void* data, std::size_t n) {
  if (n == 0) return;  // data may be null then
  auto p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (buffered_ > 0) {
    std::size_t take = std::min(n, buf_.size() - buffered_);
    std::memcpy(buf_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < buf_.size()) return;
    stripes(acc_, buf_.data(), buf_.size());
    buffered_ = 0;
  }
  std::size_t used = stripes(acc_, p, n);
  std::memcpy(buf_.data(), p + used, n - used);
  buffered_ = n - used;
}

std::uint64_t Xxh64::digest() const {
  std::uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) + std::rotl(acc_[3], 18);
    for (std::uint64_t v : acc_) h = merge64(h, v);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const unsigned char* p = buf_.data();
  std::size_t n = buffered_;
  for (; n >= 8; n -= 8, p += 8) {
    h ^= round64(0, load64(p));
    h = std::rotl(h, 27) * P1 + P4;
  }
  if (n >= 4) {
    h ^= static_cast<std::uint64_t>(load32(p)) * P1;
    h = std::rotl(h, 23) * P2 + P3;
    n -= 4;
    p += 4;
  }
  for (; n > 0; --n, ++p) {
    h ^= *p * P5;
    h = std::rotl(h, 11) * P1;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, n);
  return h.digest();
}

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
