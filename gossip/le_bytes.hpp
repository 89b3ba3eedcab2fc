// Little-endian 64-bit fields of the fixed-layout gossip messages (exchange, catch-up), written
// byte by byte so the layout is the same on every host.
#pragma once

#include <cstdint>

namespace gossiptrain::gossip {

inline void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace gossiptrain::gossip
