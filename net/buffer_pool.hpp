// Large message buffers recycled between the consumers done with them and the channels that fill
// them. A 100 MB vector arrives as about a hundred 1 MiB messages; freed, their memory goes back to
// the allocator, which hands out fresh pages for the next exchange, and faulting in 100 MB of
// fresh pages costs about as much CPU as decrypting it. A consumer that is done with a message
// gives it back to the transport it came from (Transport::buffers().recycle()); that transport's
// next large message reuses it, pages already mapped. Each transport owns its pool, as gloo's
// pairs create their own receive buffers: no process-wide state. Nothing depends on recycling: a
// buffer that is never given back is simply freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "net/transport.hpp"

namespace gossiptrain::net {

// Buffers of at least this capacity are pooled; smaller ones are cheap to allocate.
inline constexpr std::size_t kPooledMinBytes = 64 * 1024;
inline constexpr std::size_t kDefaultPoolLimitBytes = std::size_t(256) << 20;

struct BufferPoolStats {
  std::uint64_t reused = 0;      // take() answered from the pool
  std::uint64_t fresh = 0;       // take() allocated (n >= kPooledMinBytes only)
  std::uint64_t held_bytes = 0;  // capacity held by the pool now
  std::uint64_t limit_bytes = 0;
};

// Every method may be called from any thread.
class BufferPool {
 public:
  explicit BufferPool(std::size_t limit_bytes = kDefaultPoolLimitBytes) : limit_(limit_bytes) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // An empty buffer with capacity >= n: a recycled one when the pool holds one of at most 5/4 n,
  // else a fresh allocation.
  Bytes take(std::size_t n);
  // Gives b's memory to the pool; b is left empty. Buffers under kPooledMinBytes, and any that
  // would take the pool above its limit, are freed instead.
  void recycle(Bytes&& b);
  BufferPoolStats stats() const;
  // Most bytes of capacity the pool holds; lowering it frees what is over. 0: a pool that only
  // allocates (the in-memory transport's, whose messages are not reused).
  void set_limit(std::size_t bytes);

 private:
  mutable std::mutex mu_;
  std::multimap<std::size_t, Bytes> free_;  // by capacity
  std::size_t held_ = 0;
  std::size_t limit_;
  std::uint64_t reused_ = 0, fresh_ = 0;
};

}  // namespace gossiptrain::net
