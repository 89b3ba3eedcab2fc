// The run's one time axis over its launches, and each peer process's place on it (run_clock.hpp).
#include "apps/launch/run_clock.hpp"

#include <algorithm>

namespace gossiptrain::apps {

RunClock::RunClock(const std::vector<nlohmann::json>& events, std::optional<double> summary_seconds,
                   double unix_now_s) {
  double end = summary_seconds.value_or(0.0);
  for (const auto& e : events) {
    if (!e.is_object() || !e.contains("t") || !e["t"].is_number()) continue;
    const double t = e["t"].get<double>();
    end = std::max(end, t);
    if (e.value("event", "") == "launch" && e.contains("unix_s") && e["unix_s"].is_number())
      launches_.push_back({e["unix_s"].get<double>(), t});
  }
  std::sort(launches_.begin(), launches_.end(),
            [](const Span& a, const Span& b) { return a.unix_s < b.unix_s; });
  launches_.push_back({unix_now_s, end});
}

double RunClock::at_unix(double unix_s) const {
  const Span* on = &launches_.front();
  for (const auto& l : launches_)
    if (l.unix_s <= unix_s) on = &l;
  return on->run_s + (unix_s - on->unix_s);
}

void LifeOffsets::add(int life, double t, double now_s, std::optional<double> exact_s) {
  if (life < 0) return;
  while (offsets_.size() <= std::size_t(life)) {
    offsets_.push_back(now_s - t);
    exact_.push_back(false);
  }
  const std::size_t k = std::size_t(life);
  if (exact_s) {
    offsets_[k] = *exact_s;
    exact_[k] = true;
  } else if (!exact_[k]) {
    offsets_[k] = std::min(offsets_[k], now_s - t);
  }
}

}  // namespace gossiptrain::apps
