// Little-endian 64-bit fields of the fixed-layout gossip messages (exchange, catch-up), written
// byte by byte so the layout is the same on every host.
#pragma once

#include <cstdint>
#include <cstring>

namespace gossiptrain::gossip {

inline void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

// An IEEE double as its 64-bit pattern, little-endian.
inline void put_f64(std::uint8_t* p, double d) {
  std::uint64_t v = 0;
  std::memcpy(&v, &d, 8);
  put_u64(p, v);
}

inline double get_f64(const std::uint8_t* p) {
  const std::uint64_t v = get_u64(p);
  double d = 0;
  std::memcpy(&d, &v, 8);
  return d;
}

}  // namespace gossiptrain::gossip
