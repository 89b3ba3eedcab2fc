// What the averaging exchange needs from membership: the current live peers to choose from.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/rng.hpp"

namespace gossiptrain::gossip {

struct PeerRef {
  std::string id;    // authenticated peer id
  std::string addr;  // listen address "host:port"
};

class PeerDirectory {
 public:
  virtual ~PeerDirectory() = default;
  // Live members other than ourselves (alive or suspect; never dead or left).
  virtual std::vector<PeerRef> live_peers() const = 0;
  // How many there are.
  virtual std::size_t live_count() const { return live_peers().size(); }
  // min(k, live_count()) distinct ones, uniformly at random. A directory of thousands answers in
  // O(k) (Membership does), where live_peers() copies them all.
  virtual std::vector<PeerRef> live_sample(std::size_t k, base::ProtocolRng& rng) const;
};

}  // namespace gossiptrain::gossip
