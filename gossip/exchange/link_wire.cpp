// The wire of each exchange by partner (see link_wire.hpp).
#include "gossip/exchange/link_wire.hpp"

namespace gossiptrain::gossip {

WireFormat LinkWire::wire_for(const std::string& partner, Millis now) const {
  if (!enabled()) return wire_;
  const auto it = links_.find(partner);
  if (it == links_.end() || !it->second.slow || it->second.refused) return wire_;
  // Time to measure it again: one exchange in the configured wire.
  if (now - it->second.slow_since >= cfg_.recheck) return wire_;
  return *cfg_.slow_wire;
}

bool LinkWire::record(const std::string& partner, WireFormat w, std::uint64_t bytes, double ms,
                      Millis now) {
  if (!enabled() || w != wire_ || bytes < cfg_.min_bytes || !(ms > 0)) return false;
  if (!links_.count(partner) && links_.size() >= kMaxLinks) links_.clear();
  Link& l = links_[partner];
  const double r = double(bytes) * 1000.0 / ms;
  l.rate = l.rate < 0 ? r : cfg_.alpha * r + (1 - cfg_.alpha) * l.rate;
  const bool was = l.slow;
  l.slow = l.rate < cfg_.slow_bytes_per_s;
  if (l.slow) l.slow_since = now;
  return l.slow && !was && !l.refused;
}

double LinkWire::rate(const std::string& partner) const {
  const auto it = links_.find(partner);
  return it == links_.end() ? -1 : it->second.rate;
}

bool LinkWire::slow(const std::string& partner) const {
  const auto it = links_.find(partner);
  return it != links_.end() && it->second.slow && !it->second.refused;
}

}  // namespace gossiptrain::gossip
