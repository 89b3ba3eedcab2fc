// The partners this peer refuses to exchange with for a while, after repeated refusals of their
// vectors (RobustConfig::ban_*). Protocol thread; no timers: callers pass the time.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "gossip/exchange/robust_bound.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// A partner banned after repeated refusals of its vector.
struct BanEvent {
  std::string partner;
  std::string reason;  // the last refusal's reason (anomalous, invalid:...)
  net::Millis duration{0};
  int count = 0;  // bans of this partner so far, this one included
};

class BanList {
 public:
  explicit BanList(const RobustConfig& rc) : rc_(rc) {}
  bool banned(const std::string& peer, net::Millis now) const;
  // We refused partner's vector (reason) at now: the ban this triggers, if any. ban_after
  // refusals within ban_window ban the partner for ban_base * 2^(bans so far), at most ban_max.
  // Bounded: a partner's refusal list never holds more than ban_after entries, and past 4096
  // partners the ones neither banned nor recently refused are forgotten.
  std::optional<BanEvent> note_refusal(const std::string& partner, const std::string& reason,
                                       net::Millis now);

 private:
  struct State {
    std::deque<net::Millis> refusals;  // within ban_window, fewer than ban_after
    int bans = 0;
    net::Millis until{0};
  };
  void forget_stale(net::Millis now);
  RobustConfig rc_;
  std::unordered_map<std::string, State> bans_;
};

}  // namespace gossiptrain::gossip
