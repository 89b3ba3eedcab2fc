// The default sampling of a PeerDirectory (see peer_directory.hpp).
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

std::vector<PeerRef> PeerDirectory::live_sample(std::size_t k, base::ProtocolRng& rng) const {
  std::vector<PeerRef> live = live_peers();
  base::keep_random(live, k, rng);
  return live;
}

}  // namespace gossiptrain::gossip
