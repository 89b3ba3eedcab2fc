// Small deterministic generators and hashes: identical results on every platform and standard
// library (std:: distributions are not), so seeds reproduce runs everywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gossiptrain::core {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Uniform in [0, n) for n > 0 (Lemire's multiply-shift; the bias is negligible for our n).
  std::uint64_t below(std::uint64_t n) {
    return std::uint64_t((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  std::uint64_t s_;
};

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gossiptrain::core
