#include "gossip/node/behind.hpp"

#include <algorithm>
#include <utility>

namespace gossiptrain::gossip {

void BehindWatch::exchanged(const std::string& partner, double partner_progress, double clip,
                            double distance, double now_s) {
  if (cfg_.behind <= 0 || partner_progress < 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  // Bounded by the members met: drop what is stale before a new partner is added.
  constexpr std::size_t kMaxHeard = 4096;
  if (heard_.size() >= kMaxHeard && !heard_.count(partner))
    std::erase_if(heard_, [&](const auto& kv) { return now_s - kv.second.at_s > cfg_.window_s; });
  if (heard_.size() >= kMaxHeard && !heard_.count(partner)) return;
  heard_[partner] = Heard{partner_progress, now_s, clip < cfg_.max_clip && distance > cfg_.min_distance};
}

std::vector<std::string> BehindWatch::partners_in(double from, double to, bool clipped_only,
                                                  double now_s) const {
  std::size_t recent = 0;
  std::vector<std::pair<double, std::string>> found;
  for (const auto& [id, h] : heard_) {
    if (now_s - h.at_s > cfg_.window_s) continue;
    ++recent;
    if ((h.clipped_away || !clipped_only) && h.progress >= from && h.progress <= to)
      found.emplace_back(h.progress, id);
  }
  if (found.size() < cfg_.min_partners || 2 * found.size() <= recent) return {};
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> ids;
  for (auto& [p, id] : found) ids.push_back(std::move(id));
  return ids;
}

std::vector<std::string> BehindWatch::far_ahead(double own, double now_s) const {
  if (cfg_.behind <= 0 || own < 0) return {};
  std::lock_guard<std::mutex> lk(mu_);
  if (now_s < quiet_until_s_) return {};
  return partners_in(own + cfg_.behind, 1.0, /*clipped_only=*/true, now_s);
}

bool BehindWatch::ran_ahead(double own, double now_s) const {
  if (cfg_.behind <= 0 || own < 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return !partners_in(0.0, own - cfg_.behind, /*clipped_only=*/true, now_s).empty();
}

bool BehindWatch::apart(double now_s) const {
  if (cfg_.behind <= 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return !partners_in(0.0, 1.0, /*clipped_only=*/true, now_s).empty();
}

bool BehindWatch::ahead_of_swarm(double own, double now_s) const {
  if (cfg_.behind <= 0 || own < 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return !partners_in(0.0, own - cfg_.behind, /*clipped_only=*/false, now_s).empty();
}

std::vector<std::string> BehindWatch::finished_apart(double now_s) const {
  if (cfg_.behind <= 0) return {};
  std::lock_guard<std::mutex> lk(mu_);
  if (now_s < quiet_until_s_) return {};
  return partners_in(1.0, 1.0, /*clipped_only=*/true, now_s);
}

void BehindWatch::tried(double now_s, double quiet_s) {
  std::lock_guard<std::mutex> lk(mu_);
  heard_.clear();
  quiet_until_s_ = now_s + (quiet_s < 0 ? cfg_.after_try_s : quiet_s);
}

}  // namespace gossiptrain::gossip
