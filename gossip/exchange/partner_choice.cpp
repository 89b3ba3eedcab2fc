#include "gossip/exchange/partner_choice.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gossiptrain::gossip {

namespace {
constexpr std::size_t kMaxPartners = 4096;
}

PartnerChoice::PartnerChoice(PartnerChoiceConfig cfg) : cfg_(cfg) {
  if (!(cfg_.alpha > 0 && cfg_.alpha <= 1) || !(cfg_.slack >= 1) || !std::isfinite(cfg_.slack) ||
      !(cfg_.min_weight > 0 && cfg_.min_weight <= 1) || !(cfg_.backoff_min_ms >= 0) ||
      !(cfg_.backoff_max_ms >= cfg_.backoff_min_ms) || !std::isfinite(cfg_.backoff_max_ms) ||
      !(cfg_.schedule_wait_ms >= 0) || !std::isfinite(cfg_.schedule_wait_ms))
    throw std::invalid_argument("partner choice: bad parameters");
}

void PartnerChoice::record(const std::string& partner, double ms, Millis now) {
  if (partner.empty() || !(ms >= 0) || !std::isfinite(ms)) return;
  auto it = costs_.find(partner);
  if (it == costs_.end()) {
    if (costs_.size() >= kMaxPartners)
      costs_.erase(std::min_element(costs_.begin(), costs_.end(), [](auto& a, auto& b) {
        return a.second.last < b.second.last;
      }));
    costs_[partner] = Cost{ms, now};
    return;
  }
  it->second.ms = cfg_.alpha * ms + (1 - cfg_.alpha) * it->second.ms;
  it->second.last = now;
}

void PartnerChoice::unreachable(const std::string& partner, Millis now) {
  if (partner.empty()) return;
  auto it = backoff_.find(partner);
  if (it == backoff_.end()) {
    if (backoff_.size() >= kMaxPartners)
      backoff_.erase(std::min_element(backoff_.begin(), backoff_.end(), [](auto& a, auto& b) {
        return a.second.until < b.second.until;
      }));
    it = backoff_.emplace(partner, Backoff{}).first;
  }
  Backoff& b = it->second;
  b.failures = std::min(b.failures + 1, 30);
  const double ms = std::min(cfg_.backoff_max_ms, cfg_.backoff_min_ms * std::ldexp(1.0, b.failures - 1));
  b.until = now + Millis(static_cast<std::int64_t>(ms));
}

bool PartnerChoice::backed_off(const std::string& partner, Millis now) const {
  auto it = backoff_.find(partner);
  return it != backoff_.end() && now < it->second.until;
}

double PartnerChoice::cost(const std::string& partner) const {
  auto it = costs_.find(partner);
  return it == costs_.end() ? -1 : it->second.ms;
}

double PartnerChoice::weight(const std::string& partner, double ref) const {
  const double c = cost(partner);
  if (!(c > 0) || !(ref > 0)) return 1.0;
  const double q = cfg_.slack * ref / c;
  return std::clamp(q * q, cfg_.min_weight, 1.0);
}

std::size_t PartnerChoice::pick(const std::vector<PeerRef>& cands, base::ProtocolRng& rng) const {
  if (cands.empty()) throw std::logic_error("partner choice: no candidate");
  if (!cfg_.weighted() || cands.size() == 1) return std::size_t(rng.below(cands.size()));
  std::vector<double> known;
  for (const auto& p : cands)
    if (double c = cost(p.id); c > 0) known.push_back(c);
  if (known.size() < 2) return std::size_t(rng.below(cands.size()));
  auto mid = known.begin() + std::ptrdiff_t(known.size() / 2);
  std::nth_element(known.begin(), mid, known.end());
  const double ref = *mid;
  std::vector<double> w;
  w.reserve(cands.size());
  for (const auto& p : cands) w.push_back(weight(p.id, ref));
  // Our own draw from the rng's 64 bits, so the choice is the same on every standard library.
  double total = 0;
  for (double x : w) total += x;
  double u = rng.uniform() * total;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u < w[i]) return i;
    u -= w[i];
  }
  return w.size() - 1;
}

}  // namespace gossiptrain::gossip
