// Large message buffers recycled between the consumers done with them and the channels that fill
// them. A 100 MB vector arrives as about a hundred 1 MiB messages; freed, their memory goes back to
// the allocator, which hands out fresh pages for the next exchange, and faulting in 100 MB of
// fresh pages costs about as much CPU as decrypting it. A consumer that is done with a message
// gives it back with recycle(); the channel's next large message reuses it, pages already mapped.
// Nothing depends on recycling: a buffer that is never given back is simply freed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "net/transport.hpp"

namespace gossiptrain::net {

// Buffers of at least this capacity are pooled; smaller ones are cheap to allocate.
inline constexpr std::size_t kPooledMinBytes = 64 * 1024;

// An empty buffer with capacity >= n: a recycled one when the pool holds one of at most 5/4 n,
// else a fresh allocation. Any thread.
Bytes take_buffer(std::size_t n);

// Gives b's memory to the pool (any thread). b is left empty. Buffers under kPooledMinBytes, and
// any that would take the pool above its bound, are freed instead.
void recycle(Bytes&& b);

struct BufferPoolStats {
  std::uint64_t reused = 0;      // take_buffer answered from the pool
  std::uint64_t fresh = 0;       // take_buffer allocated (n >= kPooledMinBytes only)
  std::uint64_t held_bytes = 0;  // capacity held by the pool now
  std::uint64_t limit_bytes = 0;
};
BufferPoolStats buffer_pool_stats();

// Most bytes of capacity the pool holds (default 256 MiB); lowering it frees what is over.
void set_buffer_pool_limit(std::size_t bytes);

}  // namespace gossiptrain::net
