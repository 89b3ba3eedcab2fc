// The default sampling of a PeerDirectory (see peer_directory.hpp).
#include "gossip/peer_directory.hpp"

#include <algorithm>
#include <utility>

namespace gossiptrain::gossip {

std::vector<PeerRef> PeerDirectory::live_sample(std::size_t k, base::ProtocolRng& rng) const {
  std::vector<PeerRef> live = live_peers();
  const std::size_t take = std::min(k, live.size());
  for (std::size_t i = 0; i < take; ++i) std::swap(live[i], live[i + rng.below(live.size() - i)]);
  live.resize(take);
  return live;
}

}  // namespace gossiptrain::gossip
