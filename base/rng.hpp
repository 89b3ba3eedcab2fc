// Small deterministic generators and hashes: identical results on every platform and standard
// library (std:: distributions are not), so seeds reproduce runs, splits and simulations
// everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace gossiptrain::base {

// The distributions shared by the generators below (Derived provides next()).
template <typename Derived>
class RandomMethods {
 public:
  // Uniform in [0, 1).
  double uniform() { return double(self().next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1): never 0, so log() of it is safe.
  double uniform_open() { return (double(self().next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform in [0, n) for n > 0, exactly (rejection of the short top range).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      const std::uint64_t r = self().next();
      if (r >= threshold) return r % n;
    }
  }
  // Any value but 0 (protocol ids, where 0 means none).
  std::uint64_t nonzero() {
    for (;;)
      if (const std::uint64_t r = self().next()) return r;
  }
  // Standard normal (Box-Muller, one value per call).
  double normal() {
    const double u1 = uniform_open(), u2 = uniform_open();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

class SplitMix64 : public RandomMethods<SplitMix64> {
 public:
  explicit SplitMix64(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t s_;
};

// xoshiro256** seeded through splitmix64 (its authors' recommended seeding): a longer period and
// better equidistribution than splitmix64 alone, for long simulations and large splits.
class Xoshiro256 : public RandomMethods<Xoshiro256> {
 public:
  explicit Xoshiro256(std::uint64_t seed) {
    SplitMix64 sm(seed);
    for (auto& w : s_) w = sm.next();
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

// The one generator of the protocols (membership, partner choice, exchange ids, catch-up, fault
// injection): seeded from their config's seed field, reproducible everywhere.
using ProtocolRng = SplitMix64;

// Fisher-Yates from the back: v in a uniformly random order (the project's one shuffle; its draws
// are part of every seeded run).
template <typename T, typename Rng>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// min(k, v.size()) distinct elements of v, uniformly, in random order: a partial Fisher-Yates
// from the front, then v cut to them.
template <typename T, typename Rng>
void keep_random(std::vector<T>& v, std::size_t k, Rng& rng) {
  const std::size_t take = std::min(k, v.size());
  for (std::size_t i = 0; i < take; ++i) std::swap(v[i], v[i + rng.below(v.size() - i)]);
  v.resize(take);
}

// 64 bits from std::random_device, for a seed field left 0 ("unseeded").
inline std::uint64_t random_seed() {
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gossiptrain::base
