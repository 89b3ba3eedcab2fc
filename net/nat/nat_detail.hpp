// What the two halves of NatTraversal share (dial_back.cpp, relay.cpp): request nonces and
// payloads as shared bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <sodium.h>

#include "net/transport.hpp"

namespace gossiptrain::net::nat_detail {

// A random nonce, never 0 (the messages' default).
inline std::uint64_t random_nonce() {
  std::uint64_t n = 0;
  while (n == 0) randombytes_buf(&n, sizeof n);
  return n;
}

inline SharedBytes shared(Bytes b) { return std::make_shared<const Bytes>(std::move(b)); }

}  // namespace gossiptrain::net::nat_detail
