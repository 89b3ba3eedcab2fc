// What the averaging exchange needs from membership: the current live peers to choose from, and
// for the partner schedule every member known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

  // The partner schedule's member list (--partner-choice hypercube): every member known, in any
  // state (dead and left ones too, until forgotten), not ourselves, in no order. A crash or a
  // restart does not change it, so churn does not reshuffle the schedule. Default: the live ones.
  virtual std::vector<std::string> member_ids() const;
  // Changes whenever member_ids() may have changed; 0: not tracked (the caller derives again
  // when the live count changes, and every few seconds).
  virtual std::uint64_t members_version() const { return 0; }
  // The member `id` when it is live, with its address (its rounds are skipped otherwise).
  virtual std::optional<PeerRef> live_peer(const std::string& id) const;
  // Whether membership suspects the live member `id` (protocol thread). Such a partner is asked
  // only when no other is left, as one backed off (across a partition it is most likely gone).
  virtual bool suspected(const std::string&) const { return false; }
};

}  // namespace gossiptrain::gossip
