// The membership transmit queue (see broadcast_queue.hpp).
#include "gossip/broadcast_queue.hpp"

#include <cstdint>
#include <utility>

namespace gossiptrain::gossip {

void BroadcastQueue::push(const Update& u) {
  auto old = key_of_.find(u.id);
  if (old != key_of_.end()) {
    queue_.erase(old->second);
    key_of_.erase(old);
  }
  const Key key{0, ++order_};
  queue_.emplace(key, u);
  key_of_.emplace(u.id, key);
}

std::vector<Update> BroadcastQueue::take(std::size_t max, int limit) {
  std::vector<Update> out;
  if (queue_.empty() || max == 0) return out;
  // Least transmitted first, then newest: fresh news spreads before old news is repeated.
  std::vector<std::pair<Key, Update>> taken;
  for (auto it = queue_.begin(); it != queue_.end() && taken.size() < max;) {
    taken.emplace_back(it->first, std::move(it->second));
    it = queue_.erase(it);
  }
  for (auto& [key, u] : taken) {
    out.push_back(u);
    ++key.transmits;
    key_of_[u.id] = key;
    queue_.emplace(key, std::move(u));
  }
  auto done = queue_.lower_bound(Key{limit, UINT64_MAX});
  for (auto it = done; it != queue_.end(); ++it) key_of_.erase(it->second.id);
  queue_.erase(done, queue_.end());
  return out;
}

}  // namespace gossiptrain::gossip
