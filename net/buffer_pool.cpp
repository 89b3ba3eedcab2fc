#include "net/buffer_pool.hpp"

#include <utility>
#include <vector>

namespace gossiptrain::net {

Bytes BufferPool::take(std::size_t n) {
  if (n >= kPooledMinBytes) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.lower_bound(n);
    if (it != free_.end() && it->first <= n + n / 4) {
      Bytes b = std::move(it->second);
      held_ -= it->first;
      free_.erase(it);
      ++reused_;
      b.clear();
      return b;
    }
    ++fresh_;
  }
  Bytes b;
  b.reserve(n);
  return b;
}

void BufferPool::recycle(Bytes&& b) {
  Bytes mine = std::move(b);
  b.clear();
  const std::size_t cap = mine.capacity();
  if (cap < kPooledMinBytes) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (held_ + cap > limit_) return;  // freed after the lock is released (declared before it)
  held_ += cap;
  free_.emplace(cap, std::move(mine));
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {reused_, fresh_, held_, limit_};
}

void BufferPool::set_limit(std::size_t bytes) {
  std::vector<Bytes> drop;  // freed outside the lock, after it is released
  std::lock_guard<std::mutex> lk(mu_);
  limit_ = bytes;
  while (held_ > limit_ && !free_.empty()) {
    auto it = std::prev(free_.end());  // the largest first
    held_ -= it->first;
    drop.push_back(std::move(it->second));
    free_.erase(it);
  }
}

}  // namespace gossiptrain::net
