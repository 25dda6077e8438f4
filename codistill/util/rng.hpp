#pragma once
// A small, fast, portable random generator (xoshiro256**) whose whole state is four
// 64-bit words: it goes into a checkpoint and comes back bit-exactly, and it gives the
// same stream on every platform (std::normal_distribution does not).
#include <array>
#include <cstdint>

namespace codistill {

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Rng(std::uint64_t seed = 1) { reseed(seed); }
  // Independent stream for (seed, a, b): e.g. (run seed, worker id, purpose).
  Rng(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0);

  // A stream whose normal() is 0 without drawing (the rest draws as usual): for a model whose
  // parameters are overwritten right after it is built (a teacher rebuilt from its
  // checkpoint), where drawing Gaussian weights was most of the rebuild's time.
  static Rng placeholder();

  void reseed(std::uint64_t seed);
  std::uint64_t next_u64();
  double uniform();                        // [0, 1)
  double uniform(double lo, double hi);    // [lo, hi)
  double normal();                         // standard normal (Box-Muller, no cached value)
  std::uint64_t below(std::uint64_t n);    // uniform in [0, n), unbiased

  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_{};
  bool placeholder_ = false;
};

// Fisher-Yates shuffle of [first, first + n) driven by rng.
template <class It>
void shuffle(It first, std::uint64_t n, Rng& rng) {
  for (std::uint64_t i = n; i > 1; --i) {
    std::uint64_t j = rng.below(i);
    auto tmp = first[i - 1];
    first[i - 1] = first[j];
    first[j] = tmp;
  }
}

}  // namespace codistill
