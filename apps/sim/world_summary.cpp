// gossip-sim's world: what it measures and reports. The swarm's samples (consensus, the sum check),
// the rate check, progress lines and the summary at the end.
#include "apps/sim/world.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>

#include "apps/common/node_config.hpp"
#include "apps/sim/peer.hpp"
#include "apps/sim/world_detail.hpp"
#include "base/rng.hpp"

namespace gossiptrain::apps::sim {

using net::Millis;
using nlohmann::json;

// ------------------------------------------------------------------------------------------------
// Consensus: mean squared distance to the live peers' average

// The peers whose vectors count: those up, and the initial ones not started yet (their vectors
// exist from time 0 and join the averaging when they start).
bool World::counted(const Peer& p) const {
  if (cfg_.train()) return p.up && p.trainer;
  return p.up || (!p.ever_started && p.index < cfg_.peers);
}

// The vector a peer averages: its random vector, or its model's parameters (null while it has no
// trainer).
const float* World::vec(const Peer& p, std::vector<float>& scratch) const {
  if (!cfg_.train()) return p.x.data();
  if (!p.trainer) return nullptr;
  const float* x = p.trainer->model().params();
  if (train_be_->host_memory()) return x;
  scratch.resize(dim_);
  train_be_->download(scratch.data(), x, dim_ * sizeof(float));
  return scratch.data();
}

std::vector<double> World::coordinate_sums() const {
  std::vector<double> s(dim_, 0.0);
  std::vector<float> scratch;
  for (const auto& p : peers_)
    if (counted(*p)) {
      const float* x = vec(*p, scratch);
      for (std::size_t j = 0; j < dim_; ++j) s[j] += x[j];
    }
  return s;
}

void World::sample(const char* why) {
  int n = 0;
  for (const auto& p : peers_) n += counted(*p) ? 1 : 0;
  double msd = 0;
  if (n > 0 && dim_ > 0) {
    std::vector<double> mean = coordinate_sums();
    for (double& v : mean) v /= n;
    double total = 0;
    std::vector<float> scratch;
    for (const auto& p : peers_) {
      if (!counted(*p)) continue;
      const float* x = vec(*p, scratch);
      for (std::size_t j = 0; j < dim_; ++j) total += (x[j] - mean[j]) * (x[j] - mean[j]);
    }
    msd = total / (static_cast<double>(n) * static_cast<double>(dim_));
  }
  if (cfg_.train() && n == 0) return;  // no model up to measure
  if (msd0_ < 0 && n > 0) msd0_ = msd;
  Sample s{now_s(), ok_sides_ / 2, msd, n};
  (std::string(why) == "round" ? round_samples_ : samples_).push_back(s);
  emit({{"t", s.t},
        {"event", "sample"},
        {"why", why},
        {"msd", msd},
        {"exchanges_ok", s.exchanges},
        {"live", n}});
}

// Randomized pairwise gossip on a complete graph (Boyd et al. 2006): each exchange multiplies the
// expected msd by (1 - 1/(n-1)). Measured at each of the first rate_rounds round boundaries (n/2
// exchanges each), against the prediction for the exchanges done at that moment. The runtime is
// faster than that model: a peer takes part in one exchange at a time, so a round's exchanges are
// closer to a random perfect matching, which multiplies the msd by 1 - n/(2(n-1)) per round (n/2
// exchanges); `matching_ratio` is that bound, the fastest pairwise averaging can go.
json World::rate_check() const {
  json rounds = json::array();
  bool all_within = !round_samples_.empty() && msd0_ > 0;
  bool bounded = all_within;
  const double n = std::max(2, cfg_.peers);
  const double per = 1.0 - 1.0 / std::max(1.0, n - 1);
  const double per_matched = std::pow(std::max(1e-300, 1.0 - n / (2.0 * (n - 1))), 2.0 / n);
  for (std::size_t k = 0; k < round_samples_.size(); ++k) {
    const Sample& s = round_samples_[k];
    const double measured = s.msd / msd0_;
    const double predicted = std::pow(per, static_cast<double>(s.exchanges));
    const double factor = measured / predicted;
    const double matching = std::pow(per_matched, static_cast<double>(s.exchanges));
    const bool within = factor >= 0.5 && factor <= 2.0;
    all_within = all_within && within;
    bounded = bounded && measured >= 0.5 * matching && measured <= 2.0 * predicted;
    rounds.push_back({{"round", k + 1},
                      {"t", s.t},
                      {"exchanges", s.exchanges},
                      {"measured_ratio", measured},
                      {"predicted_ratio", predicted},
                      {"matching_ratio", matching},
                      {"factor", factor},
                      {"within_2x", within}});
  }
  const bool complete = int(round_samples_.size()) == cfg_.rate_rounds;
  return {{"rounds", rounds},
          {"per_exchange", per},
          {"all_within_2x", all_within && complete},
          {"between_half_matching_and_twice_pairwise", bounded && complete}};
}

// At most every 10 wall seconds, whatever the simulated pace (a 10,000-peer run takes about 14
// wall seconds per simulated second): a line on stderr, and events.jsonl flushed so that a killed
// run leaves what it had simulated.
void World::report_progress() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_progress_ < std::chrono::seconds(10)) return;
  last_progress_ = now;
  events_.flush();
  const double wall = std::chrono::duration<double>(now - wall_start_).count();
  std::fprintf(stderr,
               "gossip-sim: %.0f / %.0f simulated s (x%.2f real time), %d peers up, %llu "
               "exchanges, msd %.4g\n",
               now_s(), cfg_.train() ? expected_train_s_ : cfg_.sim_seconds,
               wall > 0 ? now_s() / wall : 0.0, up_count(),
               static_cast<unsigned long long>(ok_sides_ / 2),
               samples_.empty() ? -1.0 : samples_.back().msd);
}

// Stops starting exchanges, lets the ones in flight end (at most 30 simulated seconds: every
// exchange deadline is shorter), then measures.
json World::finish() {
  const double sim_end = now_s();
  ticking_ = false;
  auto busy = [this] {
    for (const auto& p : peers_)
      if (p->up && p->node && p->node->averager().in_exchange()) return true;
    return false;
  };
  const Millis drain_end = net_.now() + Millis(30000);
  while (busy() && net_.now() < drain_end) net_.run_for(Millis(10));
  sample("final");
  census();
  if (!converged_s_) check_converged();
  const int n = up_count();
  json s;
  s["sim_seconds"] = cfg_.train() ? sim_end : cfg_.sim_seconds;
  s["drain_seconds"] = now_s() - sim_end;
  s["peers"] = cfg_.peers;
  s["peers_up_at_end"] = n;
  s["workload"] = cfg_.workload;
  s["params"] = dim_;
  s["seed"] = cfg_.seed;
  s["exchanges_ok"] = ok_sides_ / 2;
  s["exchange_sides_ok"] = ok_sides_;
  s["exchange_sides_failed"] = failed_sides_;
  s["exchanges_failed_by_reason"] = failed_by_reason_;
  s["msd_initial"] = msd0_ >= 0 ? json(msd0_) : json(nullptr);
  s["msd_final"] = samples_.empty() ? json(nullptr) : json(samples_.back().msd);
  // When the spread (root msd) first fell to 1e-6 of the initial one, at a sample: the simulated
  // time, and the exchange rounds done (n/2 exchanges each, n the initial peers). null: never.
  if (!cfg_.train() && msd0_ > 0) {
    json reached = nullptr;
    for (const auto& x : samples_)
      if (x.msd <= 1e-12 * msd0_) {
        reached = {{"t", x.t},
                   {"exchanges_ok", x.exchanges},
                   {"rounds", 2.0 * double(x.exchanges) / std::max(1, cfg_.peers)}};
        break;
      }
    s["spread_1e-6"] = reached;
    // The same from the first sample once every peer held every other alive (a schedule needs
    // the members to agree on the member list): against the spread at that sample.
    json after = nullptr;
    if (converged_s_) {
      const Sample* ref = nullptr;
      for (const auto& x : samples_) {
        if (!ref && x.t >= *converged_s_ && x.msd > 0) ref = &x;
        if (ref && x.msd <= 1e-12 * ref->msd) {
          after = {{"from_t", ref->t},
                   {"t", x.t},
                   {"exchanges_ok", x.exchanges - ref->exchanges},
                   {"rounds", 2.0 * double(x.exchanges - ref->exchanges) / std::max(1, cfg_.peers)}};
          break;
        }
      }
    }
    s["spread_1e-6_after_converged"] = after;
  }
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> per_peer;
  for (const auto& p : peers_) {
    bytes += p->bytes;
    per_peer.push_back(p->bytes);
  }
  s["bytes_sent_per_peer"] = per_peer;
  s["bytes_sent_per_peer_mean"] =
      static_cast<double>(bytes) / std::max<std::size_t>(1, peers_.size());
  const auto& st = net_.stats();
  s["network_model"] = {{"latency_ms", cfg_.latency.count()},
                        {"jitter_ms", cfg_.jitter.count()},
                        {"latency_sigma", cfg_.latency_sigma},
                        {"bandwidth_mbit", cfg_.bandwidth_mbit},
                        {"regions", cfg_.topology ? json(cfg_.topology->names) : json(nullptr)}};
  s["network"] = {{"messages_sent", st.sent},
                  {"delivered", st.delivered},
                  {"dropped_loss", st.dropped_loss},
                  {"dropped_partition", st.dropped_partition},
                  {"dropped_dead", st.dropped_dead},
                  {"connects_ok", st.connects_ok},
                  {"connects_failed", st.connects_failed}};
  s["membership"] = {{"converged_s", converged_s_ ? json(*converged_s_) : json(nullptr)},
                     {"converged_after_last_start_s",
                      converged_s_ ? json(*converged_s_ - last_start_s_) : json(nullptr)},
                     {"last_start_s", last_start_s_},
                     {"seeds", seed_addrs_.size()}};
  held_alive_at_end(s["membership"]);
  if (cfg_.train()) s["train"] = train_summary();
  if (!cfg_.churn && !cfg_.train()) {
    s["rate_check"] = rate_check();
    // Pairwise mixing conserves the sum of the vectors (up to float rounding).
    const auto sum = coordinate_sums();
    double drift = 0, scale = 0;
    for (std::size_t j = 0; j < sum.size(); ++j) {
      drift = std::max(drift, std::abs(sum[j] - sum0_[j]));
      scale = std::max(scale, std::abs(sum0_[j]));
    }
    s["sum_drift_max"] = drift;
    s["sum_abs_max"] = scale;
  } else if (cfg_.churn) {
    s["churn"] = churn_summary();
    json alive = json::array();
    for (auto [t, k] : alive_over_time_) alive.push_back({t, k});
    s["churn"]["peers_alive_over_time"] = alive;
  }
  return s;
}

}  // namespace gossiptrain::apps::sim
