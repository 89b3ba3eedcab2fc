#include "gossip/pace.hpp"

#include <algorithm>

namespace gossiptrain::gossip {

namespace {
// A rate sample spans 0.2 s at least, so one slow step (an exchange's mix) does not swing it.
constexpr double kMinSampleS = 0.2;
}  // namespace

void PaceKeeper::heard(const std::string& partner, double progress, double now_s) {
  if (progress < 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = partners_.find(partner);
  if (it == partners_.end() || progress < it->second.from_progress) {  // new, or restarted
    partners_[partner] = Heard{progress, now_s, false, -1, progress, now_s};
  } else {
    Heard& h = it->second;
    h.progress = progress;
    h.at_s = now_s;
    h.spent = false;
    if (now_s - h.from_s >= kMinSampleS) {
      const double r = (progress - h.from_progress) / (now_s - h.from_s);
      h.rate = h.rate >= 0 ? 0.7 * h.rate + 0.3 * r : r;
      h.from_progress = progress;
      h.from_s = now_s;
    }
  }
  // Forget the silent ones, so the table stays the size of the recent partners.
  std::erase_if(partners_, [&](const auto& kv) { return now_s - kv.second.at_s > cfg_.window_s; });
}

void PaceKeeper::trained(double progress, double now_s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (last_progress_ < 0 || progress < last_progress_) {  // first call, or restored to earlier
    last_progress_ = progress;
    last_s_ = now_s;
    return;
  }
  const double dt = now_s - last_s_;
  if (dt < kMinSampleS) return;
  const double r = (progress - last_progress_) / dt;
  rate_ = rate_ > 0 ? 0.7 * rate_ + 0.3 * r : r;
  last_progress_ = progress;
  last_s_ = now_s;
}

void PaceKeeper::resumed(double progress, double now_s) {
  std::lock_guard<std::mutex> lk(mu_);
  last_progress_ = progress;
  last_s_ = now_s;
  for (auto& [id, h] : partners_) h.spent = true;
}

double PaceKeeper::ahead(double own, double now_s) const {
  std::lock_guard<std::mutex> lk(mu_);
  double most = 0;
  for (const auto& [id, h] : partners_) {
    if (h.spent || now_s - h.at_s > cfg_.window_s || h.progress >= 1.0) continue;
    const double rate = h.rate >= 0 ? std::min(rate_, h.rate) : rate_;
    const double now_at = std::min(1.0, h.progress + rate * std::max(0.0, now_s - h.at_s));
    const double gap = own - now_at;
    if (gap <= cfg_.ignore_behind) most = std::max(most, gap);
  }
  return most;
}

double PaceKeeper::rate() const {
  std::lock_guard<std::mutex> lk(mu_);
  return rate_;
}

}  // namespace gossiptrain::gossip
