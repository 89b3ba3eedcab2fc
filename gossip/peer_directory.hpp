// What the averaging exchange needs from membership: the current live peers to choose from.
#pragma once

#include <string>
#include <vector>

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
};

}  // namespace gossiptrain::gossip
