#include "gossip/node/pace.hpp"

#include <algorithm>

namespace gossiptrain::gossip {

namespace {
// A rate sample spans 0.2 s at least, so one slow step (an exchange's mix) does not swing it.
constexpr double kMinSampleS = 0.2;
}  // namespace

void PaceKeeper::Rate::add(double progress, double now_s) {
  if (from_progress < 0 || progress < from_progress) return restart(progress, now_s);
  if (now_s - from_s < kMinSampleS) return;
  const double r = (progress - from_progress) / (now_s - from_s);
  rate = rate >= 0 ? 0.7 * rate + 0.3 * r : r;
  restart(progress, now_s);
}

void PaceKeeper::unreachable(const std::string& partner) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = partners_.find(partner);
  if (it != partners_.end()) it->second.spent = true;
}

void PaceKeeper::heard(const std::string& partner, double progress, double now_s) {
  if (progress < 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  Heard& h = partners_[partner];
  h.progress = progress;
  h.at_s = now_s;
  h.spent = false;
  if (progress < h.rate.from_progress) h.rate = Rate{};  // restarted: its old rate says nothing
  h.rate.add(progress, now_s);
  // Forget the silent ones, so the table stays the size of the recent partners.
  std::erase_if(partners_, [&](const auto& kv) { return now_s - kv.second.at_s > cfg_.window_s; });
}

void PaceKeeper::trained(double progress, double now_s) {
  std::lock_guard<std::mutex> lk(mu_);
  own_.add(progress, now_s);
}

void PaceKeeper::resumed(double progress, double now_s) {
  std::lock_guard<std::mutex> lk(mu_);
  own_.restart(progress, now_s);
  for (auto& [id, h] : partners_) h.spent = true;
}

double PaceKeeper::ahead(double own, double now_s) const {
  std::lock_guard<std::mutex> lk(mu_);
  const double ours = std::max(0.0, own_.rate);  // 0 until measured
  double most = 0, front = -1;
  int near = 0, far = 0;
  for (const auto& [id, h] : partners_) {
    if (h.spent || now_s - h.at_s > cfg_.window_s || h.progress >= 1.0) continue;
    const double rate = h.rate.rate >= 0 ? std::min(ours, h.rate.rate) : ours;
    const double now_at = std::min(1.0, h.progress + rate * std::max(0.0, now_s - h.at_s));
    const double gap = own - now_at;
    if (gap <= cfg_.ignore_behind) {
      most = std::max(most, gap);
      ++near;
    } else {
      front = std::max(front, now_at);
      ++far;
    }
  }
  // Far behind us, one partner is a straggler (restarted, catching up) not to be waited for. But
  // when two or more are and none is near, we are the one that ran away (a burst, a partition
  // side of slower peers): keep pace with the front of them.
  if (near == 0 && far >= 2) return own - front;
  return most;
}

double PaceKeeper::rate() const {
  std::lock_guard<std::mutex> lk(mu_);
  return std::max(0.0, own_.rate);
}

}  // namespace gossiptrain::gossip
