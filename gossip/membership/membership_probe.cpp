// SWIM membership, the periodic loops: probes (direct and indirect), gossip, push-pull sync,
// reconnection and housekeeping (memberlist state.go: probe, gossip, pushPull).
#include "gossip/membership/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::gossip {

// ---------------------------------------------------------------------------------------------
// Periodic loops

void Membership::probe_tick() {
  finish_probe();
  later(cfg_.probe_interval, [this] { probe_tick(); });
  if (leaving_) return;
  // Round-robin over a shuffled list (memberlist): every member is probed once per round, so a
  // failure is detected in bounded time rather than only in expectation.
  const Row* target = nullptr;
  for (int pass = 0; pass < 2 && !target; ++pass) {
    while (probe_index_ < probe_order_.size()) {
      const Row* m = table_->find(probe_order_[probe_index_++]);
      if (m && m->id != self_name_ && is_live(m->state)) {
        target = m;
        break;
      }
    }
    if (!target) {
      probe_order_.clear();
      for (std::size_t slot = 1; slot < table_->size(); ++slot) {
        if (is_live(table_->at(slot).state)) probe_order_.push_back(table_->at(slot).id);
      }
      base::shuffle(probe_order_, rng_);
      probe_index_ = 0;
    }
  }
  if (!target) return;
  const Row t = *target;
  const std::string& target_id = table_->id_str(t);
  const std::uint32_t seq = next_seq_++;
  probe_ = Probe{t.id, seq, false, true};
  // Direct and indirect acks carry the same seq; any of them counts until the period ends.
  expect_ack(seq, cfg_.probe_interval, [this, seq] {
    if (probe_.active && probe_.seq == seq) probe_.acked = true;
  });
  std::vector<Update> piggyback;
  if (t.state == MemberState::Suspect) {
    // Lifeguard's buddy system: tell a suspect directly, so it can refute at once.
    piggyback.push_back(update_of(t, MemberState::Suspect, self_id_));
  }
  for (auto& u :
       take_broadcasts(cfg_.max_piggyback - std::min(cfg_.max_piggyback, piggyback.size()))) {
    if (u.id != target_id || piggyback.empty()) piggyback.push_back(std::move(u));
  }
  send_to(target_id, table_->addr_str(t), MembershipType::Ping,
          encode(PingMsg{seq, target_id, std::move(piggyback), own_word()}));
  later(cfg_.probe_timeout, [this, seq] { indirect_probe(seq); });
}

void Membership::probe_soon(const std::string& id) {
  const Row* m = table_->find(id);
  if (!m || m->id == self_name_ || !is_live(m->state)) return;
  if (probe_.active && probe_.target == m->id) return;  // being probed now
  // Next in the round-robin; its own turn later in the round stays (a second probe then).
  probe_index_ = std::min(probe_index_, probe_order_.size());
  if (probe_index_ < probe_order_.size() && probe_order_[probe_index_] == m->id) return;
  probe_order_.insert(probe_order_.begin() + static_cast<std::ptrdiff_t>(probe_index_), m->id);
}

void Membership::indirect_probe(std::uint32_t seq) {
  if (!probe_.active || probe_.seq != seq || probe_.acked) return;
  const std::string& target_id = table_->id_str(probe_.target);
  drop_link(target_id);
  const Row* found = table_->find(probe_.target);
  if (!found) return;
  const std::string& target_addr = table_->addr_str(*found);
  const auto helpers = random_members(static_cast<std::size_t>(cfg_.indirect_checks), probe_.target,
                                      [](const Row& m) { return m.state == MemberState::Alive; });
  for (const Row& h : helpers) {
    send_to(table_->id_str(h), table_->addr_str(h), MembershipType::PingReq,
            encode(PingReqMsg{seq, target_id, target_addr, take_broadcasts(cfg_.max_piggyback),
                              own_word()}));
  }
}

void Membership::finish_probe() {
  if (!probe_.active) return;
  probe_.active = false;
  auto a = acks_.find(probe_.seq);
  if (a != acks_.end()) {
    sched_.cancel(a->second.timer);
    acks_.erase(a);
  }
  if (probe_.acked) return;
  const Row* m = table_->find(probe_.target);
  if (!m || !is_live(m->state)) return;
  spdlog::debug("membership {}: no ack from {} in a probe period, suspecting", self_id_,
                table_->id_str(*m));
  suspect_node(update_of(*m, MemberState::Suspect, self_id_));
}

void Membership::gossip_tick() {
  later(cfg_.gossip_interval, [this] { gossip_tick(); });
  if (table_->queue_empty()) return;
  const Millis now = sched_.now();
  // Recently dead members still hear gossip, so a member wrongly declared dead learns it and
  // refutes (memberlist's GossipToTheDeadTime).
  const auto targets =
      random_members(static_cast<std::size_t>(cfg_.gossip_nodes), self_name_, [&](const Row& m) {
        return is_live(m.state) ||
               (m.state == MemberState::Dead && now - m.state_change < cfg_.gossip_to_the_dead);
      });
  for (const Row& m : targets) {
    auto ups = take_broadcasts(cfg_.max_piggyback);
    if (ups.empty()) break;
    send_to(table_->id_str(m), table_->addr_str(m), MembershipType::Gossip,
            encode(GossipMsg{std::move(ups)}));
  }
}

Millis push_pull_period(Millis interval, std::size_t n) {
  // memberlist's pushPullScale: above 32 members the interval grows with log2(n), so the total
  // sync traffic of the cluster stays bounded.
  if (n <= 32) return interval;
  const double mult = std::ceil(std::log2(static_cast<double>(n)) - std::log2(32.0)) + 1.0;
  return Millis(static_cast<Millis::rep>(static_cast<double>(interval.count()) * mult));
}

void Membership::push_pull_tick() {
  later(push_pull_period(cfg_.push_pull_interval, est_num_nodes()), [this] { push_pull_tick(); });
  sync_now();
}

void Membership::sync_now() {
  if (leaving_) return;
  const auto t =
      random_members(1, self_name_, [](const Row& m) { return m.state == MemberState::Alive; });
  if (t.empty()) return;
  send_to(table_->id_str(t[0]), table_->addr_str(t[0]), MembershipType::Sync,
          encode(SyncMsg{next_seq_++, false, full_state()}));
}

void Membership::reconnect_tick() {
  later(cfg_.reconnect_interval, [this] { reconnect_tick(); });
  if (leaving_) return;
  // After a partition each side holds the other as dead; a sync with one of them makes it refute
  // (it sees itself dead) and merges the two views again.
  const auto t =
      random_members(1, self_name_, [](const Row& m) { return m.state == MemberState::Dead; });
  if (t.empty()) return;
  const std::string& id = table_->id_str(t[0]);
  spdlog::debug("membership {}: trying to reconnect to dead member {}", self_id_, id);
  send_to(id, table_->addr_str(t[0]), MembershipType::Sync,
          encode(SyncMsg{next_seq_++, false, full_state()}));
}

void Membership::housekeeping_tick() {
  later(cfg_.probe_interval, [this] { housekeeping_tick(); });
  const Millis now = sched_.now();
  // Close the connections we dialed that membership no longer uses.
  // Scanned only once the first of them can have gone idle: last_used only grows, and a
  // connection added later goes idle later still.
  std::vector<Owned> idle;
  if (now >= next_idle_check_) {
    next_idle_check_ = Millis::max();
    for (const auto& [ptr, o] : owned_) {
      if (now - o.last_used >= cfg_.idle_connection_timeout) idle.push_back(o);
      else
        next_idle_check_ = std::min(next_idle_check_, o.last_used + cfg_.idle_connection_timeout);
    }
  }
  std::sort(idle.begin(), idle.end(),
            [](const Owned& a, const Owned& b) { return a.order < b.order; });
  for (auto& o : idle) {
    owned_.erase(o.conn.get());
    o.conn->close(net::CloseReason::NotNeeded, "idle");
  }
  // Forget long-dead members.
  for (auto d = down_.begin(); d != down_.end();) {
    const Row* m = table_->find(*d);
    if (now - m->state_change < cfg_.dead_reap_after) {
      ++d;
      continue;
    }
    cancel_suspicion(m->id);
    links_.erase(table_->id_str(*m));
    table_->remove(m->id);
    d = down_.erase(d);
  }
  // Alone: keep re-dialling the seeds (a healed partition, or everyone restarted).
  if (!leaving_ && !join_in_progress_ && est_num_nodes() <= 1) {
    const bool has_seeds = std::any_of(cfg_.seeds.begin(), cfg_.seeds.end(),
                                       [this](const std::string& s) { return s != self_addr_; });
    if (has_seeds) {
      spdlog::info("membership {}: no live members left, re-dialling seeds", self_id_);
      join_attempt();
    }
  }
}

}  // namespace gossiptrain::gossip
