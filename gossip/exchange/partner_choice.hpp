// Which live member an initiator asks (docs/ARCHITECTURE.md, "Partner choice"): uniformly at
// random, except that a partner whose recent exchanges took far longer than the others' (a slow
// or lossy link) is asked much less often, so that it does not keep this peer busy (and answering
// BUSY to everyone) for seconds at a time. Such a partner is still asked now and then, and it
// still starts exchanges of its own, so it is not cut off. Deterministic given the rng and the
// recorded durations.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/rng.hpp"
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

struct PartnerChoiceConfig {
  bool weighted = true;  // false: uniform
  // A partner's cost is an exponential moving average of its exchange durations (ms), the newest
  // weighted alpha. Its weight is 1 up to slack times the median cost of the candidates, then
  // falls as (slack * median / cost)^2, never below min_weight.
  double alpha = 0.3;
  double slack = 3.0;
  double min_weight = 0.002;
};

class PartnerChoice {
 public:
  using Millis = std::chrono::milliseconds;
  explicit PartnerChoice(PartnerChoiceConfig cfg = {});

  // An exchange with partner (either role) that took ms: finished, or failed once the transfer
  // had begun or by a timeout (a quick BUSY or refusal says nothing about the link).
  void record(const std::string& partner, double ms, Millis now);
  // An index into cands (not empty), drawn with the weights above.
  std::size_t pick(const std::vector<PeerRef>& cands, base::ProtocolRng& rng) const;
  // The weight of partner among candidates whose median cost is ref (1 when either is unknown).
  double weight(const std::string& partner, double ref) const;
  // The recorded cost of partner in ms, or -1.
  double cost(const std::string& partner) const;

 private:
  struct Cost {
    double ms = 0;
    Millis last{0};
  };
  PartnerChoiceConfig cfg_;
  std::unordered_map<std::string, Cost> costs_;  // at most kMaxPartners
};

}  // namespace gossiptrain::gossip
