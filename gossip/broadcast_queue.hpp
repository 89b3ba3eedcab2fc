// Membership's transmit queue (memberlist's TransmitLimitedQueue, simplified): the updates still
// to piggyback, least transmitted first, then newest, each until it has gone out `limit` times.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "gossip/messages.hpp"

namespace gossiptrain::gossip {

class BroadcastQueue {
 public:
  // Queues u; a newer update about a member replaces the older one still queued.
  void push(const Update& u);
  // Up to max updates to send now; each counts one more transmission, and every update sent
  // limit times leaves the queue (the limit shrinks with the swarm, so not only these).
  std::vector<Update> take(std::size_t max, int limit);
  bool empty() const { return queue_.empty(); }
  std::size_t size() const { return queue_.size(); }

 private:
  struct Key {  // order: unique, newer is larger
    int transmits = 0;
    std::uint64_t order = 0;
    bool operator<(const Key& o) const {
      return transmits != o.transmits ? transmits < o.transmits : order > o.order;
    }
  };
  std::map<Key, Update> queue_;
  std::unordered_map<std::string, Key> key_of_;  // member id -> its queued update
  std::uint64_t order_ = 0;
};

}  // namespace gossiptrain::gossip
