#include "net/buffer_pool.hpp"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace gossiptrain::net {
namespace {

struct Pool {
  std::mutex mu;
  std::multimap<std::size_t, Bytes> free;  // by capacity
  std::size_t held = 0;
  std::size_t limit = std::size_t(256) << 20;
  std::uint64_t reused = 0, fresh = 0;

  // Frees the largest buffers until the pool is within its bound (mu held). The buffers are
  // moved out and freed by the caller, outside the lock.
  void trim(std::vector<Bytes>& out) {
    while (held > limit && !free.empty()) {
      auto it = std::prev(free.end());
      held -= it->first;
      out.push_back(std::move(it->second));
      free.erase(it);
    }
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: recycle() may run during static destruction
  return *p;
}

}  // namespace

Bytes take_buffer(std::size_t n) {
  if (n >= kPooledMinBytes) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    auto it = p.free.lower_bound(n);
    if (it != p.free.end() && it->first <= n + n / 4) {
      Bytes b = std::move(it->second);
      p.held -= it->first;
      p.free.erase(it);
      ++p.reused;
      b.clear();
      return b;
    }
    ++p.fresh;
  }
  Bytes b;
  b.reserve(n);
  return b;
}

void recycle(Bytes&& b) {
  Bytes mine = std::move(b);
  b.clear();
  const std::size_t cap = mine.capacity();
  if (cap < kPooledMinBytes) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.held + cap > p.limit) return;  // freed after the lock is released (declared before it)
  p.held += cap;
  p.free.emplace(cap, std::move(mine));
}

BufferPoolStats buffer_pool_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  return {p.reused, p.fresh, p.held, p.limit};
}

void set_buffer_pool_limit(std::size_t bytes) {
  std::vector<Bytes> drop;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    p.limit = bytes;
    p.trim(drop);
  }
}

}  // namespace gossiptrain::net
