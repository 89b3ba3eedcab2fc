// gossip-sim's world: churn. The scenario events of gossip-launch --churn applied to simulated
// peers (crash, stop, restart, pause, resume, join), the detection record of each, and the churn
// section of the summary.
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
// Churn: the scenario format and parser of gossip-launch --churn, applied to simulated peers

// Up and not paused: a peer that runs, and answers.
bool World::responsive(const Peer& p) const { return p.up && !p.paused; }

// A crash, stop or pause of peer i from now: its observers are the peers that answer now.
World::Crash& World::open_record(int i, const std::string& source) {
  auto c = std::make_unique<Crash>();
  c->victim = i;
  c->at = now_s();
  c->source = source;
  for (const auto& q : peers_)
    if (responsive(*q) && q->index != i) c->observers.push_back(q->index);
  crashes_.push_back(std::move(c));
  return *crashes_.back();
}

void World::crash(int i, const std::string& source, bool graceful) {
  Peer& p = *peers_[i];
  if (!p.up) return;
  graceful = graceful && !p.paused;  // a stopped process cannot leave: its end is a kill
  if (!p.paused) open_record(i, source).graceful = graceful;  // a paused peer's is open
  p.paused = false;
  if (graceful) {
    // gossip-peer's clean stop: announce "left", linger, then the process ends.
    p.node->leave();
    const auto linger = p.node->membership().config().leave_linger + Millis(100);
    p.t->schedule(linger, [this, i] {
      Peer& q = *peers_[i];
      net_.kill(q.addr, true);
      set_up(q, false);
      q.down_since = now_s();
      tear_down(q);
    });
    return;
  }
  net_.kill(p.addr, true);  // SIGKILL: the kernel resets the peer's connections
  set_up(p, false);
  p.down_since = now_s();
  tear_down(p);
}

void World::restart(int i, const std::string& source) {
  Peer& p = *peers_[i];
  if (p.up || !p.ever_started) return;
  for (auto& c : crashes_)
    if (c->victim == i && !c->restarted_after) c->restarted_after = now_s() - c->at;
  ++restarts_;
  start_peer(i);
  emit({{"t", now_s()}, {"event", "restart"}, {"peer", i}, {"source", source}});
}

// SIGSTOP and SIGCONT: the node's events wait in the network (net::SimNetwork::pause) while the
// others detect it as they would a crash; at resume it runs what waited and refutes.
void World::pause(int i, const std::string& source) {
  Peer& p = *peers_[i];
  if (!responsive(p)) return;
  open_record(i, source).paused = true;
  net_.pause(p.addr);
  p.paused = true;
  p.down_since = now_s();
}

void World::resume(int i, const std::string& source) {
  Peer& p = *peers_[i];
  if (!p.up || !p.paused) return;
  for (auto& c : crashes_)
    if (c->victim == i && !c->restarted_after) c->restarted_after = now_s() - c->at;
  net_.resume(p.addr);
  p.paused = false;
  p.up_since = now_s();
  emit({{"t", now_s()}, {"event", "resume"}, {"peer", i}, {"source", source}});
}

void World::join(const std::string& source) {
  int slot = -1;
  for (const auto& p : peers_)
    if (!p->ever_started) {
      slot = p->index;
      break;
    }
  if (slot < 0) return;  // total_peers() planned one slot per joiner
  ++joins_;
  start_peer(slot, /*joiner=*/true);
  emit({{"t", now_s()}, {"event", "join"}, {"peer", slot}, {"source", source}});
}

std::vector<int> World::existing(const std::vector<int>& peers) const {
  std::vector<int> out;
  for (int i : peers)
    if (i < static_cast<int>(peers_.size())) out.push_back(i);
  return out;
}

void World::churn_partition(const core::ChurnEvent& e) {
  std::vector<std::vector<std::string>> groups;
  for (const auto& g : e.groups) {
    groups.emplace_back();
    for (int i : existing(g))
      if (peers_[i]->ever_started) groups.back().push_back(peers_[i]->addr);
  }
  net_.partition(groups);
}

// The peer's own link, both ways (gossip-launch --netns shapes its veth the same way); an event
// with neither rate nor loss (a "for" ending) restores it. A slot whose peer has not started yet
// has no link to shape.
void World::churn_link(const core::ChurnEvent& e) {
  std::optional<double> bytes_per_s;
  if (e.rate_mbit) bytes_per_s = *e.rate_mbit * 1e6 / 8.0;
  for (int i : existing(e.peers))
    if (peers_[i]->ever_started) net_.set_link(peers_[i]->addr, bytes_per_s, e.loss);
}

// gossip-launch restarts the peer with --fault MODE (and without, at the end); here the running
// averager changes its fault in place, which the restart amounts to for the exchange. An end (no
// mode) makes it honest again. A slot not started yet gets it at start.
void World::churn_fault(const core::ChurnEvent& e) {
  for (int i : existing(e.peers)) {
    Peer& p = *peers_[i];
    p.fault = e.mode.empty() ? gossip::FaultConfig{} : gossip::parse_fault(e.mode);
    if (p.up && p.node) p.node->averager().set_fault(p.fault);
  }
}

void World::apply_churn(const core::ChurnEvent& e, const std::string& source) {
  using core::ChurnKind;
  json line = core::to_json(e);
  line["t"] = now_s();
  line["event"] = "churn";
  line["kind"] = std::string(core::churn_kind_name(e.kind));
  line["source"] = source;
  emit(line);
  switch (e.kind) {
    case ChurnKind::Crash:
    case ChurnKind::Stop:
      for (int i : existing(e.peers)) crash(i, source, e.kind == ChurnKind::Stop);
      break;
    case ChurnKind::Restart:
      for (int i : existing(e.peers)) restart(i, source);
      break;
    case ChurnKind::Join:
      for (int k = 0; k < e.count; ++k) join(source);
      break;
    case ChurnKind::Partition: churn_partition(e); break;
    case ChurnKind::Heal: net_.heal(); break;
    case ChurnKind::Pause:
      for (int i : existing(e.peers)) pause(i, source);
      break;
    case ChurnKind::Resume:
      for (int i : existing(e.peers)) resume(i, source);
      break;
    case ChurnKind::Link: churn_link(e); break;
    case ChurnKind::Fault: churn_fault(e); break;
  }
}

// Each observer's wrong beliefs now: members it holds dead that are up, and members it holds alive
// or suspect that have been down for longer than the detection bound.
// At the end: how far the peers up are from holding every other peer up alive (what convergence
// means), for a run that ends before it converged.
void World::held_alive_at_end(json& m) const {
  std::vector<std::size_t> up;
  for (const auto& p : peers_)
    if (p->up) up.push_back(static_cast<std::size_t>(p->index));
  if (up.size() < 2) return;
  int complete = 0;
  double sum = 0, lowest = 1;
  for (std::size_t o : up) {
    std::size_t held = 0;
    for (std::size_t j : up)
      held += j != o && peers_[o]->view[j] == static_cast<int>(gossip::MemberState::Alive);
    const double frac = static_cast<double>(held) / static_cast<double>(up.size() - 1);
    complete += held == up.size() - 1 ? 1 : 0;
    sum += frac;
    lowest = std::min(lowest, frac);
  }
  m["peers_holding_all_alive_at_end"] = complete;
  m["held_alive_fraction_mean_at_end"] = sum / static_cast<double>(up.size());
  m["held_alive_fraction_min_at_end"] = lowest;
}

void World::census() {
  const double bound = detection_bound_s();
  // What each member is, once: the n^2 loop below then reads two flat arrays and the views.
  enum : std::uint8_t { kSkip, kUp, kDownLong, kDownRecent };
  std::vector<std::uint8_t> truth(peers_.size(), kSkip);
  for (const auto& m : peers_) {
    if (!m->ever_started) continue;
    truth[m->index] = responsive(*m)                       ? kUp
                      : now_s() - m->down_since > bound ? kDownLong
                                                        : kDownRecent;
  }
  for (const auto& o : peers_) {
    if (!responsive(*o)) continue;
    int wrong_dead = 0, wrong_alive = 0;
    const std::size_t n = std::min(o->view.size(), truth.size());
    for (std::size_t j = 0; j < n; ++j) {
      if (j == static_cast<std::size_t>(o->index) || truth[j] == kSkip) continue;
      const int v = o->view[j];
      if (truth[j] == kUp && v == static_cast<int>(gossip::MemberState::Dead)) ++wrong_dead;
      if (truth[j] == kDownLong && live_state(v)) ++wrong_alive;
    }
    wrong_dead_sum_ += wrong_dead;
    wrong_alive_sum_ += wrong_alive;
    wrong_dead_max_ = std::max(wrong_dead_max_, wrong_dead);
    wrong_alive_max_ = std::max(wrong_alive_max_, wrong_alive);
    ++census_observations_;
  }
  alive_over_time_.emplace_back(now_s(), up_count());
}

json World::churn_summary() const {
  const double bound = detection_bound_s();
  json list = json::array();
  int undetected = 0, within = 0, detected_all = 0;
  std::vector<double> maxes;
  for (const auto& c : crashes_) {
    json j{{"peer", c->victim},
           {"at", c->at},
           {"kind", c->graceful ? "stop" : c->paused ? "pause" : "crash"},
           {"source", c->source},
           {"observers", c->observers.size()},
           {"detected_by", c->detected.size()}};
    if (c->restarted_after) j["restarted_after_s"] = *c->restarted_after;
    // Observers that went down themselves cannot report; the others must all have seen it.
    std::size_t expected = 0;
    for (int o : c->observers) expected += responsive(*peers_[o]) || c->detected.count(o) ? 1 : 0;
    if (c->detected.size() >= expected && expected > 0) {
      double mx = 0;
      for (const auto& [o, d] : c->detected) mx = std::max(mx, d);
      j["max_detection_s"] = mx;
      j["within_bound"] = mx <= bound;
      maxes.push_back(mx);
      ++detected_all;
      within += mx <= bound ? 1 : 0;
    } else if (!c->restarted_after) {
      ++undetected;
    }
    if (list.size() < 200) list.push_back(j);
  }
  std::sort(maxes.begin(), maxes.end());
  const double n_obs = std::max<double>(1.0, static_cast<double>(census_observations_));
  return {{"detection_bound_s", bound},
          {"crashes_and_stops", crashes_.size()},
          {"detected_by_all", detected_all},
          {"detected_within_bound", within},
          {"not_detected_by_all_and_not_restarted", undetected},
          {"max_detection_s_median", maxes.empty() ? json(nullptr) : json(maxes[maxes.size() / 2])},
          {"max_detection_s_max", maxes.empty() ? json(nullptr) : json(maxes.back())},
          {"restarts", restarts_},
          {"joins", joins_},
          {"catch_ups_ok", catch_ups_ok_},
          {"catch_ups_failed", catch_ups_failed_},
          {"false_dead_marks", false_dead_},
          {"false_dead_marks_of_peers_up_longer_than_bound", false_dead_stable_},
          {"suspicions", suspicions_},
          {"wrongly_dead_per_peer_mean", wrong_dead_sum_ / n_obs},
          {"wrongly_dead_per_peer_max", wrong_dead_max_},
          {"wrongly_alive_per_peer_mean", wrong_alive_sum_ / n_obs},
          {"wrongly_alive_per_peer_max", wrong_alive_max_},
          {"census_observations", census_observations_},
          {"crashes", list}};
}

}  // namespace gossiptrain::apps::sim
