// A snapshot as the exchange sends it: already cut into Chunk messages (header space first, then
// the data), so the protocol thread hands them to the transport without copying; and the received
// Chunk messages of the partner's vector.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "gossip/exchange/wire_format.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// One encoded snapshot. Reused across exchanges once nobody else holds them.
struct ChunkSet {
  std::vector<std::shared_ptr<net::Bytes>> chunks;
  std::size_t payload_bytes = 0;
  WireFormat wire = WireFormat::Fp32;  // the encoding of the payload
  std::atomic<std::size_t> ready{0};  // chunks[0, ready) hold their data (set by training thread)
  std::size_t ready_count() const { return ready.load(std::memory_order_acquire); }
};
using ChunkSetPtr = std::shared_ptr<ChunkSet>;
using ChunkList = std::vector<net::Bytes>;  // received Chunk messages, in order

}  // namespace gossiptrain::gossip
