#include "gossip/node/exchange_health.hpp"

#include <algorithm>

namespace gossiptrain::gossip {

namespace {
std::string most_common(const std::map<std::string, int>& counts) {
  auto it = std::max_element(counts.begin(), counts.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
  return it == counts.end() ? std::string() : it->first;
}
}  // namespace

ExchangeHealth::Change ExchangeHealth::on_result(bool ok, const std::string& reason,
                                                 const std::string& addr, net::Millis now) {
  if (ok) {
    const bool was_reported = reported_;
    failures_ = 0;
    reasons_.clear();
    addrs_.clear();
    reported_ = false;
    return was_reported ? Change::Recovered : Change::None;
  }
  if (failures_ == 0) first_failure_ = now;
  ++failures_;
  last_failure_ = now;
  ++reasons_[reason.empty() ? "unknown" : reason];
  if (!addr.empty()) ++addrs_[addr];
  if (reported_ || failures_ < cfg_.min_failures || now - first_failure_ < cfg_.min_duration)
    return Change::None;
  reported_ = true;
  return Change::Failing;
}

ExchangeAlert ExchangeHealth::alert() const {
  ExchangeAlert a;
  a.failures = failures_;
  a.duration = last_failure_ - first_failure_;
  a.reason = most_common(reasons_);
  a.addr = most_common(addrs_);
  a.by_reason = reasons_;
  return a;
}

}  // namespace gossiptrain::gossip
