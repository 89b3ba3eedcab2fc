// The ban list of the averaging exchange (see ban_list.hpp).
#include "gossip/exchange/ban_list.hpp"

#include <algorithm>

namespace gossiptrain::gossip {

bool BanList::banned(const std::string& peer, net::Millis now) const {
  auto it = bans_.find(peer);
  return it != bans_.end() && now < it->second.until;
}

void BanList::forget_stale(net::Millis now) {
  if (bans_.size() < 4096) return;
  for (auto it = bans_.begin(); it != bans_.end();) {
    const State& s = it->second;
    if (s.until <= now && (s.refusals.empty() || s.refusals.back() + rc_.ban_window < now))
      it = bans_.erase(it);
    else ++it;
  }
}

std::optional<BanEvent> BanList::note_refusal(const std::string& partner, const std::string& reason,
                                              net::Millis now) {
  if (rc_.ban_after <= 0 || partner.empty()) return std::nullopt;
  forget_stale(now);
  State& b = bans_[partner];
  b.refusals.push_back(now);
  while (!b.refusals.empty() && b.refusals.front() + rc_.ban_window < now) b.refusals.pop_front();
  if (b.refusals.size() < std::size_t(rc_.ban_after)) return std::nullopt;
  b.refusals.clear();
  net::Millis d = rc_.ban_base;
  for (int k = 0; k < b.bans && d < rc_.ban_max; ++k) d *= 2;
  d = std::min(d, rc_.ban_max);
  ++b.bans;
  b.until = now + d;
  return BanEvent{partner, reason, d, b.bans};
}

}  // namespace gossiptrain::gossip
