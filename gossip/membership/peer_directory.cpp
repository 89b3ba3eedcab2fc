// The defaults of a PeerDirectory (see peer_directory.hpp), from its live peers.
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

std::vector<PeerRef> PeerDirectory::live_sample(std::size_t k, base::ProtocolRng& rng) const {
  std::vector<PeerRef> live = live_peers();
  base::keep_random(live, k, rng);
  return live;
}

std::vector<std::string> PeerDirectory::member_ids() const {
  std::vector<std::string> ids;
  for (auto& p : live_peers()) ids.push_back(std::move(p.id));
  return ids;
}

std::optional<PeerRef> PeerDirectory::live_peer(const std::string& id) const {
  for (auto& p : live_peers())
    if (p.id == id) return std::move(p);
  return std::nullopt;
}

}  // namespace gossiptrain::gossip
