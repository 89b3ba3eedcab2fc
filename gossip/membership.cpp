// SWIM membership with Lifeguard suspicion. The state rules (alive/suspect/dead precedence by
// incarnation, refutation, confirmations) follow hashicorp/memberlist state.go and suspicion.go.
#include "gossip/membership.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::gossip {

namespace {
constexpr std::size_t kLeaveDirectFanout = 16;  // members told of a leave directly
net::SharedBytes share(net::Bytes b) { return std::make_shared<const net::Bytes>(std::move(b)); }
}  // namespace

void MembershipConfig::validate() const {
  auto positive = [](Millis v, const char* name) {
    if (v.count() <= 0)
      throw std::invalid_argument(std::string("membership: ") + name + " must be > 0");
  };
  positive(probe_interval, "probe_interval");
  positive(probe_timeout, "probe_timeout");
  positive(gossip_interval, "gossip_interval");
  positive(push_pull_interval, "push_pull_interval");
  positive(reconnect_interval, "reconnect_interval");
  positive(join_timeout, "join_timeout");
  positive(join_backoff_initial, "join_backoff_initial");
  positive(idle_connection_timeout, "idle_connection_timeout");
  positive(dead_reap_after, "dead_reap_after");
  if (probe_timeout >= probe_interval) {
    throw std::invalid_argument("membership: probe_timeout must be shorter than probe_interval");
  }
  if (join_backoff_max < join_backoff_initial) {
    throw std::invalid_argument("membership: join_backoff_max must be >= join_backoff_initial");
  }
  if (indirect_checks < 0 || gossip_nodes < 0) {
    throw std::invalid_argument("membership: indirect_checks and gossip_nodes must be >= 0");
  }
  if (suspicion_mult < 1 || suspicion_max_timeout_mult < 1 || retransmit_mult < 1) {
    throw std::invalid_argument("membership: suspicion and retransmit multipliers must be >= 1");
  }
  if (max_piggyback > kMaxUpdatesPerMessage) {
    throw std::invalid_argument("membership: max_piggyback above " +
                                std::to_string(kMaxUpdatesPerMessage));
  }
  for (const auto& s : seeds) {
    if (!valid_addr(s)) throw std::invalid_argument("membership: bad seed address '" + s + "'");
  }
}

Membership::Membership(net::Transport& transport, MembershipConfig config)
    : transport_(transport),
      sched_(transport.scheduler()),
      cfg_(std::move(config)),
      self_id_(transport.local_id()),
      self_addr_(transport.advertised_addr()),
      rng_(cfg_.rng_seed ? cfg_.rng_seed : base::random_seed()),
      token_(std::make_shared<bool>(true)),
      snapshot_(transport.local_id()) {
  cfg_.validate();
  if (self_id_.empty() || self_id_.size() > kMaxPeerIdBytes) {
    throw std::invalid_argument("membership: bad local peer id");
  }
  if (!valid_addr(self_addr_) || !net::dialable_addr(self_addr_)) {
    throw std::invalid_argument("membership: advertised address '" + self_addr_ +
                                "' is not one other peers can dial");
  }
  const std::uint64_t inc =
      cfg_.initial_incarnation
          ? *cfg_.initial_incarnation
          : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
  members_[self_id_] = Member{self_id_, self_addr_, inc, MemberState::Alive, sched_.now()};
  live_count_ = 1;
  publish();
}

Membership::~Membership() {
  // Timers and callbacks hold only a weak reference to the token: they turn into no-ops. We do
  // not close connections here: the owner unregisters us from the transport first.
  token_.reset();
}

net::Scheduler::TimerId Membership::later(Millis d, std::function<void()> fn) {
  std::weak_ptr<bool> w = token_;
  return sched_.schedule(d, [w, fn = std::move(fn)]() {
    if (!w.expired()) fn();
  });
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

void Membership::start() {
  if (running_) return;
  running_ = true;
  // Random first offsets keep the members' periods out of lock step, as memberlist does.
  auto jitter = [this](Millis period) {
    return Millis(static_cast<Millis::rep>(rng_.below(static_cast<std::uint64_t>(period.count()))));
  };
  later(jitter(cfg_.probe_interval), [this] { probe_tick(); });
  later(jitter(cfg_.gossip_interval), [this] { gossip_tick(); });
  later(jitter(cfg_.push_pull_interval), [this] { push_pull_tick(); });
  later(cfg_.reconnect_interval + jitter(cfg_.reconnect_interval), [this] { reconnect_tick(); });
  later(cfg_.probe_interval, [this] { housekeeping_tick(); });
  const bool has_seeds = std::any_of(cfg_.seeds.begin(), cfg_.seeds.end(),
                                     [this](const std::string& s) { return s != self_addr_; });
  if (has_seeds) {
    join_attempt();
  } else {
    joined_ = true;  // the first member: nothing to join
    spdlog::info("membership {}: started without seeds at {}", self_id_, self_addr_);
  }
}

void Membership::stop() {
  if (!running_) return;
  running_ = false;
  token_ = std::make_shared<bool>(true);  // every pending timer and callback becomes a no-op
  for (auto& [id, s] : suspicions_) sched_.cancel(s.timer);
  suspicions_.clear();
  for (auto& [seq, a] : acks_) sched_.cancel(a.timer);
  acks_.clear();
  std::vector<Owned> owned;
  for (auto& [ptr, o] : owned_) owned.push_back(o);
  std::sort(owned.begin(), owned.end(),
            [](const Owned& a, const Owned& b) { return a.order < b.order; });
  owned_.clear();
  links_.clear();
  for (auto& o : owned) o.conn->close(leaving_ ? "left" : "membership stopped");
  probe_.active = false;
  spdlog::info("membership {}: stopped", self_id_);
}

void Membership::leave() {
  if (!running_ || leaving_) return;
  leaving_ = true;
  Member& self = members_[self_id_];
  if (is_live(self.state)) --live_count_;
  self.state = MemberState::Left;
  self.state_change = sched_.now();
  publish(self);
  const Update u{self_id_, self_addr_, self.incarnation, MemberState::Left, self_id_};
  queue_broadcast(u);
  // Told directly (to a bounded number) as well as gossiped: a leave should not wait for a probe
  // to be noticed, and the receivers pass it on.
  const auto targets = random_members(kLeaveDirectFanout, self_id_,
                                      [](const Member& m) { return is_live(m.state); });
  for (const Member* m : targets)
    send_to(m->id, m->addr, MembershipType::Gossip, encode(GossipMsg{{u}}));
  spdlog::info("membership {}: leaving, told {} members", self_id_, targets.size());
  later(cfg_.leave_linger, [this] { stop(); });
}

// ---------------------------------------------------------------------------------------------
// Join and re-join through the seeds

void Membership::join_attempt() {
  if (!running_ || leaving_) return;
  join_in_progress_ = true;
  join_answered_ = false;
  join_seq_lo_ = next_seq_;
  int tried = 0;
  for (const auto& seed : cfg_.seeds) {
    if (seed == self_addr_) continue;
    send_sync_to_addr(seed, true);
    ++tried;
  }
  if (tried == 0) {
    join_in_progress_ = false;
    return;
  }
  later(cfg_.join_timeout, [this] { join_check(); });
}

void Membership::join_check() {
  if (join_answered_) {
    join_in_progress_ = false;
    join_backoff_ = Millis(0);
    return;
  }
  join_backoff_ = join_backoff_.count() == 0 ? cfg_.join_backoff_initial
                                             : std::min(2 * join_backoff_, cfg_.join_backoff_max);
  spdlog::warn("membership {}: no seed answered ({} seeds), retrying in {} ms", self_id_,
               cfg_.seeds.size(), join_backoff_.count());
  later(join_backoff_, [this] { join_attempt(); });
}

void Membership::send_sync_to_addr(const std::string& addr, bool join) {
  // A seed we already talk to is reached over the existing connection.
  for (const auto& [id, m] : members_) {
    if (m.addr != addr || id == self_id_) continue;
    auto it = links_.find(id);
    if (it != links_.end() && it->second.conn && it->second.conn->is_open()) {
      send_on(it->second.conn, MembershipType::Sync,
              encode(SyncMsg{next_seq_++, join, full_state()}));
      return;
    }
  }
  const std::uint32_t seq = next_seq_++;
  std::weak_ptr<bool> w = token_;
  transport_.connect(
      addr, [this, w, addr, seq, join](net::ConnectionPtr c, const std::string& err) {
        if (w.expired()) {
          if (c) c->close("membership stopped");
          return;
        }
        if (!c) {
          spdlog::debug("membership {}: seed {} unreachable: {}", self_id_, addr, err);
          return;
        }
        if (c->peer_id() == self_id_) {
          c->close("connected to ourselves");
          return;
        }
        adopt(c, true);
        send_on(c, MembershipType::Sync, encode(SyncMsg{seq, join, full_state()}));
      });
}

// ---------------------------------------------------------------------------------------------
// Periodic loops

void Membership::probe_tick() {
  finish_probe();
  later(cfg_.probe_interval, [this] { probe_tick(); });
  if (leaving_) return;
  // Round-robin over a shuffled list (memberlist): every member is probed once per round, so a
  // failure is detected in bounded time rather than only in expectation.
  const Member* target = nullptr;
  for (int pass = 0; pass < 2 && !target; ++pass) {
    while (probe_index_ < probe_order_.size()) {
      auto it = members_.find(probe_order_[probe_index_++]);
      if (it != members_.end() && it->first != self_id_ && is_live(it->second.state)) {
        target = &it->second;
        break;
      }
    }
    if (!target) {
      probe_order_.clear();
      for (const auto& [id, m] : members_) {
        if (id != self_id_ && is_live(m.state)) probe_order_.push_back(id);
      }
      for (std::size_t i = probe_order_.size(); i > 1; --i) {
        std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
      }
      probe_index_ = 0;
    }
  }
  if (!target) return;
  const std::uint32_t seq = next_seq_++;
  probe_ = Probe{target->id, seq, false, true};
  // Direct and indirect acks carry the same seq; any of them counts until the period ends.
  expect_ack(seq, cfg_.probe_interval, [this, seq] {
    if (probe_.active && probe_.seq == seq) probe_.acked = true;
  });
  std::vector<Update> piggyback;
  if (target->state == MemberState::Suspect) {
    // Lifeguard's buddy system: tell a suspect directly, so it can refute at once.
    piggyback.push_back(
        Update{target->id, target->addr, target->incarnation, MemberState::Suspect, self_id_});
  }
  for (auto& u :
       take_broadcasts(cfg_.max_piggyback - std::min(cfg_.max_piggyback, piggyback.size()))) {
    if (u.id != target->id || piggyback.empty()) piggyback.push_back(std::move(u));
  }
  send_to(target->id, target->addr, MembershipType::Ping,
          encode(PingMsg{seq, target->id, std::move(piggyback)}));
  later(cfg_.probe_timeout, [this, seq] { indirect_probe(seq); });
}

void Membership::indirect_probe(std::uint32_t seq) {
  if (!probe_.active || probe_.seq != seq || probe_.acked) return;
  drop_link(probe_.target);
  auto it = members_.find(probe_.target);
  if (it == members_.end()) return;
  const Member target = it->second;
  const auto helpers =
      random_members(static_cast<std::size_t>(cfg_.indirect_checks), target.id,
                     [](const Member& m) { return m.state == MemberState::Alive; });
  for (const Member* h : helpers) {
    send_to(h->id, h->addr, MembershipType::PingReq,
            encode(PingReqMsg{seq, target.id, target.addr, take_broadcasts(cfg_.max_piggyback)}));
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
  auto it = members_.find(probe_.target);
  if (it == members_.end() || !is_live(it->second.state)) return;
  spdlog::debug("membership {}: no ack from {} in a probe period, suspecting", self_id_,
                probe_.target);
  const Member& m = it->second;
  suspect_node(Update{m.id, m.addr, m.incarnation, MemberState::Suspect, self_id_});
}

void Membership::gossip_tick() {
  later(cfg_.gossip_interval, [this] { gossip_tick(); });
  if (broadcasts_.empty()) return;
  const Millis now = sched_.now();
  // Recently dead members still hear gossip, so a member wrongly declared dead learns it and
  // refutes (memberlist's GossipToTheDeadTime).
  const auto targets =
      random_members(static_cast<std::size_t>(cfg_.gossip_nodes), self_id_, [&](const Member& m) {
        return is_live(m.state) ||
               (m.state == MemberState::Dead && now - m.state_change < cfg_.gossip_to_the_dead);
      });
  for (const Member* m : targets) {
    auto ups = take_broadcasts(cfg_.max_piggyback);
    if (ups.empty()) break;
    send_to(m->id, m->addr, MembershipType::Gossip, encode(GossipMsg{std::move(ups)}));
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
      random_members(1, self_id_, [](const Member& m) { return m.state == MemberState::Alive; });
  if (t.empty()) return;
  send_to(t[0]->id, t[0]->addr, MembershipType::Sync,
          encode(SyncMsg{next_seq_++, false, full_state()}));
}

void Membership::reconnect_tick() {
  later(cfg_.reconnect_interval, [this] { reconnect_tick(); });
  if (leaving_) return;
  // After a partition each side holds the other as dead; a sync with one of them makes it refute
  // (it sees itself dead) and merges the two views again.
  const auto t =
      random_members(1, self_id_, [](const Member& m) { return m.state == MemberState::Dead; });
  if (t.empty()) return;
  spdlog::debug("membership {}: trying to reconnect to dead member {}", self_id_, t[0]->id);
  send_to(t[0]->id, t[0]->addr, MembershipType::Sync,
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
    o.conn->close("idle");
  }
  // Forget long-dead members.
  bool reaped = false;
  for (auto d = down_.begin(); d != down_.end();) {
    auto it = members_.find(*d);
    const Member& m = it->second;
    if (now - m.state_change < cfg_.dead_reap_after) {
      ++d;
      continue;
    }
    cancel_suspicion(m.id);
    links_.erase(m.id);
    Member* last = others_.back();
    others_[m.slot] = last;
    last->slot = m.slot;
    others_.pop_back();
    members_.erase(it);
    d = down_.erase(d);
    reaped = true;
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
  if (reaped) publish();
}

// ---------------------------------------------------------------------------------------------
// State machine

void Membership::apply(const Update& u) {
  switch (u.state) {
    case MemberState::Alive: alive_node(u, false); break;
    case MemberState::Suspect: suspect_node(u); break;
    case MemberState::Dead: dead_node(u); break;
    case MemberState::Left: {
      Update d = u;
      d.from = u.id;  // "left" is a dead message from the member itself
      dead_node(d);
      break;
    }
  }
}

void Membership::apply_all(const net::ConnectionPtr& c, const std::vector<Update>& updates) {
  // Stale accusations (older than an alive incarnation we know) are answered straight back with
  // the newer state: otherwise a member that missed a refutation keeps a suspicion nobody corrects
  // and may declare a live member dead. memberlist has no such reply; it is cheap and only fires
  // while stale news circulates.
  std::vector<Update> corrections;
  for (const auto& u : updates) {
    if (u.state != MemberState::Alive && corrections.size() < cfg_.max_piggyback) {
      auto it = members_.find(u.id);
      if (it != members_.end() && it->second.state == MemberState::Alive &&
          u.incarnation < it->second.incarnation) {
        const Member& m = it->second;
        corrections.push_back(Update{m.id, m.addr, m.incarnation, MemberState::Alive, ""});
      }
    }
    apply(u);
  }
  if (!corrections.empty())
    send_on(c, MembershipType::Gossip, encode(GossipMsg{std::move(corrections)}));
}

void Membership::merge_remote(const std::vector<Update>& remote) {
  // memberlist mergeRemoteState: a remote's "dead" only makes us suspect (its view may be stale,
  // and the member gets the chance to refute); "left" is final.
  for (const auto& r : remote) {
    switch (r.state) {
      case MemberState::Alive: alive_node(r, false); break;
      case MemberState::Left: {
        Update d = r;
        d.state = MemberState::Dead;
        d.from = r.id;
        dead_node(d);
        break;
      }
      case MemberState::Dead:
      case MemberState::Suspect: {
        Update s = r;
        s.state = MemberState::Suspect;
        s.from = self_id_;
        suspect_node(s);
        break;
      }
    }
  }
}

void Membership::alive_node(const Update& a, bool bootstrap) {
  auto it = members_.find(a.id);
  const bool is_self = a.id == self_id_;
  if (!is_self && !net::dialable_addr(a.addr)) {
    // A peer that announces a wildcard (an old build listening on 0.0.0.0 without --advertise):
    // dialling it would reach ourselves. Once per member and address, so the log stays readable.
    if (unroutable_seen_.insert(a.id + "@" + a.addr).second) {
      spdlog::warn(
          "membership {}: ignoring member {} announced at unroutable address {} "
          "(that peer needs --advertise)",
          self_id_, a.id, a.addr);
    }
    return;
  }
  if (it == members_.end()) {
    if (members_.size() >= kMaxSyncMembers) {
      spdlog::warn("membership {}: member table full ({}), ignoring {}", self_id_, kMaxSyncMembers,
                   a.id);
      return;
    }
    Member m{a.id, a.addr, a.incarnation, MemberState::Alive, sched_.now()};
    it = members_.emplace(a.id, m).first;
    it->second.slot = others_.size();
    others_.push_back(&it->second);
    ++live_count_;
    // A random slot in the probe round, so a new member is probed soon but not always first.
    probe_order_.push_back(a.id);
    const std::size_t j = rng_.below(probe_order_.size());
    std::swap(probe_order_[j], probe_order_.back());
    queue_broadcast(Update{a.id, a.addr, a.incarnation, MemberState::Alive, ""});
    spdlog::debug("membership {}: new member {} at {} (incarnation {})", self_id_, a.id, a.addr,
                  a.incarnation);
    notify(it->second);
    publish(it->second);
    return;
  }
  Member& st = it->second;
  if (!is_self && a.incarnation <= st.incarnation) return;
  if (is_self && a.incarnation < st.incarnation) return;
  cancel_suspicion(a.id);
  if (is_self) {
    if (bootstrap || (a.incarnation == st.incarnation && a.addr == st.addr)) return;
    // Someone announces us with our incarnation or a later one (our previous life, or a
    // different address): outbid it.
    if (!leaving_) refute(a.incarnation);
    return;
  }
  queue_broadcast(Update{a.id, a.addr, a.incarnation, MemberState::Alive, ""});
  const bool addr_changed = st.addr != a.addr;
  const MemberState before = st.state;
  st.incarnation = a.incarnation;
  st.addr = a.addr;
  if (addr_changed) links_.erase(a.id);  // the old connection points at the old address
  if (before != MemberState::Alive) {
    if (before != MemberState::Suspect) {
      spdlog::info("membership {}: {} is alive again (incarnation {})", self_id_, a.id,
                   a.incarnation);
    }
    set_state(st, MemberState::Alive);
  } else {
    if (addr_changed) notify(st);
    publish(st);
  }
}

void Membership::suspect_node(const Update& s) {
  auto it = members_.find(s.id);
  if (it == members_.end()) return;
  Member& st = it->second;
  if (s.incarnation < st.incarnation) return;
  if (suspicions_.count(s.id)) {
    // An independent accusation shortens the timeout (Lifeguard); pass it on if it was new.
    if (confirm_suspicion(s.id, s.from)) queue_broadcast(s);
    return;
  }
  if (st.state != MemberState::Alive) return;
  if (s.id == self_id_) {
    refute(s.incarnation);
    return;
  }
  queue_broadcast(Update{s.id, st.addr, s.incarnation, MemberState::Suspect, s.from});
  st.incarnation = s.incarnation;
  spdlog::debug("membership {}: suspecting {} (incarnation {}, by {}) at {} ms", self_id_, s.id,
                s.incarnation, s.from, sched_.now().count());
  set_state(st, MemberState::Suspect);
  start_suspicion(st, s.from);
}

void Membership::dead_node(const Update& d) {
  auto it = members_.find(d.id);
  if (it == members_.end()) return;
  Member& st = it->second;
  if (d.incarnation < st.incarnation) return;
  cancel_suspicion(d.id);
  if (st.state == MemberState::Dead || st.state == MemberState::Left) return;
  if (d.id == self_id_) {
    if (!leaving_) refute(d.incarnation);
    return;
  }
  const bool left = d.from == d.id;
  queue_broadcast(
      Update{d.id, st.addr, d.incarnation, left ? MemberState::Left : MemberState::Dead, d.from});
  st.incarnation = d.incarnation;
  spdlog::info("membership {}: {} is {} (incarnation {})", self_id_, d.id, left ? "left" : "dead",
               d.incarnation);
  set_state(st, left ? MemberState::Left : MemberState::Dead);
}

void Membership::refute(std::uint64_t accused_incarnation) {
  Member& self = members_[self_id_];
  std::uint64_t inc = self.incarnation + 1;
  if (accused_incarnation >= inc) inc = accused_incarnation + 1;
  self.incarnation = inc;
  spdlog::debug("membership {}: refuting, incarnation now {}", self_id_, inc);
  queue_broadcast(self_update());
  publish(self);
}

Millis Membership::suspicion_min_timeout(std::size_t n) const {
  const double node_scale = std::max(1.0, std::log10(std::max(1.0, static_cast<double>(n))));
  return Millis(static_cast<Millis::rep>(std::floor(
      cfg_.suspicion_mult * node_scale * static_cast<double>(cfg_.probe_interval.count()))));
}

void Membership::start_suspicion(Member& m, const std::string& from) {
  const std::size_t n = est_num_nodes();
  // k independent confirmations bring the timeout from max down to min; in a tiny cluster there
  // are not enough members to confirm, so the timeout starts at min (memberlist suspectNode).
  int k = cfg_.suspicion_mult - 2;
  if (static_cast<long>(n) - 2 < k) k = 0;
  Suspicion s;
  s.incarnation = m.incarnation;
  s.k = k;
  s.min = suspicion_min_timeout(n);
  s.max = cfg_.suspicion_max_timeout_mult * s.min;
  s.start = sched_.now();
  s.confirmations.insert(from);
  const Millis timeout = k < 1 ? s.min : s.max;
  const std::string id = m.id;
  const std::uint64_t inc = m.incarnation;
  s.timer = later(timeout, [this, id, inc] { suspicion_fired(id, inc); });
  cancel_suspicion(id);
  suspicions_[id] = std::move(s);
}

bool Membership::confirm_suspicion(const std::string& id, const std::string& from) {
  auto it = suspicions_.find(id);
  if (it == suspicions_.end()) return false;
  Suspicion& s = it->second;
  const int n =
      static_cast<int>(s.confirmations.size()) - 1;  // the first accuser is not a confirmation
  if (n >= s.k || s.confirmations.count(from)) return false;
  s.confirmations.insert(from);
  const int confirmed = n + 1;
  // memberlist remainingSuspicionTime: log-scaled from max towards min.
  const double frac = std::log(confirmed + 1.0) / std::log(s.k + 1.0);
  const double raw =
      static_cast<double>(s.max.count()) - frac * static_cast<double>((s.max - s.min).count());
  Millis timeout = Millis(static_cast<Millis::rep>(std::floor(raw)));
  if (timeout < s.min) timeout = s.min;
  const Millis remaining = timeout - (sched_.now() - s.start);
  spdlog::debug("membership {}: suspicion of {} confirmed by {} ({}/{}), {} ms left", self_id_, id,
                from, confirmed, s.k, remaining.count());
  sched_.cancel(s.timer);
  const std::uint64_t inc = s.incarnation;
  s.timer = later(std::max(remaining, Millis(0)), [this, id, inc] { suspicion_fired(id, inc); });
  return true;
}

void Membership::suspicion_fired(const std::string& id, std::uint64_t incarnation) {
  suspicions_.erase(id);
  auto it = members_.find(id);
  if (it == members_.end()) return;
  const Member& m = it->second;
  if (m.state != MemberState::Suspect || m.incarnation != incarnation) return;
  spdlog::debug("membership {}: suspicion of {} timed out at {} ms", self_id_, id,
                sched_.now().count());
  dead_node(Update{id, m.addr, incarnation, MemberState::Dead, self_id_});
}

void Membership::cancel_suspicion(const std::string& id) {
  auto it = suspicions_.find(id);
  if (it == suspicions_.end()) return;
  sched_.cancel(it->second.timer);
  suspicions_.erase(it);
}

// ---------------------------------------------------------------------------------------------
// Dissemination (broadcast_queue.hpp)

int Membership::retransmit_limit() const {
  const double n = static_cast<double>(est_num_nodes());
  return cfg_.retransmit_mult * static_cast<int>(std::ceil(std::log10(n + 1.0)));
}

void Membership::queue_broadcast(const Update& u) { broadcasts_.push(u); }

std::vector<Update> Membership::take_broadcasts(std::size_t max) {
  return broadcasts_.take(max, retransmit_limit());
}

// ---------------------------------------------------------------------------------------------
// Messages

void Membership::on_connection(const net::ConnectionPtr&, bool) {
  // Nothing: a connection becomes ours when we dial it or a membership message arrives on it, so
  // other protocols' connections sharing the transport are never used or closed by us.
}

void Membership::on_closed(const net::ConnectionPtr& c, const std::string& reason) {
  owned_.erase(c.get());
  auto it = links_.find(c->peer_id());
  if (it != links_.end() && it->second.conn == c) {
    it->second.conn.reset();
    spdlog::debug("membership {}: connection to {} closed: {}", self_id_, c->peer_id(), reason);
  }
}

void Membership::adopt(const net::ConnectionPtr& c, bool dialed) {
  if (dialed) {
    owned_[c.get()] = Owned{c, sched_.now(), ++owned_order_};
    next_idle_check_ = std::min(next_idle_check_, sched_.now() + cfg_.idle_connection_timeout);
  }
  Link& l = links_[c->peer_id()];
  if (dialed || !l.conn || !l.conn->is_open()) l.conn = c;
}

void Membership::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) {
  if (!running_) return;
  if (c->peer_id() == self_id_) {
    c->close("connected to ourselves");
    return;
  }
  auto o = owned_.find(c.get());
  if (o != owned_.end()) {
    o->second.last_used = sched_.now();
  } else {
    adopt(c, false);
  }
  try {
    handle(c, type, payload);
  } catch (const DecodeError& e) {
    spdlog::warn("membership {}: malformed message 0x{:02x} from {} ({}): {}", self_id_, type,
                 c->peer_id(), c->remote_addr(), e.what());
    c->close(std::string("malformed membership message: ") + e.what());
  }
}

void Membership::handle(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& payload) {
  switch (static_cast<MembershipType>(type)) {
    case MembershipType::Ping: handle_ping(c, decode_ping(payload)); break;
    case MembershipType::Ack: handle_ack(c, decode_ack(payload)); break;
    case MembershipType::PingReq: handle_ping_req(c, decode_ping_req(payload)); break;
    case MembershipType::Sync: handle_sync(c, decode_sync(payload), false); break;
    case MembershipType::SyncReply: handle_sync(c, decode_sync(payload), true); break;
    case MembershipType::Gossip: apply_all(c, decode_gossip(payload).updates); break;
    default: throw DecodeError("unknown membership message type");
  }
}

void Membership::handle_ping(const net::ConnectionPtr& c, PingMsg m) {
  if (m.target_id != self_id_) {
    // Meant for whoever had this address before us; answering would vouch for them.
    spdlog::debug("membership {}: ping for {} ignored", self_id_, m.target_id);
    return;
  }
  apply_all(c, m.updates);
  send_on(c, MembershipType::Ack, encode(AckMsg{m.seq, take_broadcasts(cfg_.max_piggyback)}));
}

void Membership::handle_ping_req(const net::ConnectionPtr& c, PingReqMsg m) {
  apply_all(c, m.updates);
  if (m.target_id == self_id_) {
    send_on(c, MembershipType::Ack, encode(AckMsg{m.seq, take_broadcasts(cfg_.max_piggyback)}));
    return;
  }
  if (!net::dialable_addr(m.target_addr)) {
    spdlog::debug("membership {}: ping-req for {} at unroutable {} ignored", self_id_, m.target_id,
                  m.target_addr);
    return;
  }
  const std::uint32_t seq = next_seq_++;
  const std::uint32_t their_seq = m.seq;
  const std::string requester = c->peer_id();
  const std::string target = m.target_id;
  expect_ack(
      seq, cfg_.probe_timeout,
      [this, c, their_seq, requester] {
        net::Bytes ack = encode(AckMsg{their_seq, take_broadcasts(cfg_.max_piggyback)});
        if (c->is_open()) {
          send_on(c, MembershipType::Ack, std::move(ack));
        } else if (auto it = members_.find(requester); it != members_.end()) {
          send_to(requester, it->second.addr, MembershipType::Ack, std::move(ack));
        }
      },
      [this, target] { drop_link(target); });
  send_to(m.target_id, m.target_addr, MembershipType::Ping,
          encode(PingMsg{seq, m.target_id, take_broadcasts(cfg_.max_piggyback)}));
}

void Membership::handle_ack(const net::ConnectionPtr& c, AckMsg m) {
  apply_all(c, m.updates);
  auto it = acks_.find(m.seq);
  if (it == acks_.end()) return;  // late, or answered already
  sched_.cancel(it->second.timer);
  auto fn = std::move(it->second.on_ack);
  acks_.erase(it);
  fn();
}

void Membership::handle_sync(const net::ConnectionPtr& c, SyncMsg m, bool reply) {
  // Merge first, then answer: a member that finds itself dead in our list refutes before it
  // replies, so the reply already carries its new incarnation (partition healing).
  merge_remote(m.members);
  if (!reply) {
    send_on(c, MembershipType::SyncReply, encode(SyncMsg{m.seq, m.join, full_state()}));
    return;
  }
  if (m.join && join_in_progress_ && m.seq >= join_seq_lo_ && !join_answered_) {
    join_answered_ = true;
    if (!joined_) {
      spdlog::info("membership {}: joined through {} ({} members known)", self_id_, c->peer_id(),
                   members_.size());
    } else {
      spdlog::info("membership {}: re-joined through {}", self_id_, c->peer_id());
    }
    joined_ = true;
  }
}

void Membership::expect_ack(std::uint32_t seq, Millis timeout, std::function<void()> on_ack,
                            std::function<void()> on_timeout) {
  AckWait w;
  w.on_ack = std::move(on_ack);
  w.timer = later(timeout, [this, seq, on_timeout = std::move(on_timeout)] {
    if (acks_.erase(seq) && on_timeout) on_timeout();
  });
  acks_[seq] = std::move(w);
}

void Membership::drop_link(const std::string& id) {
  // A connection that carried a ping but no ack may be dead without knowing it (the peer crashed
  // or restarted behind it): the next message dials afresh. We close it only if we dialed it.
  auto it = links_.find(id);
  if (it == links_.end() || !it->second.conn) return;
  net::ConnectionPtr c = std::move(it->second.conn);
  it->second.conn.reset();
  if (owned_.erase(c.get())) c->close("no ack");
}

void Membership::send_on(const net::ConnectionPtr& c, MembershipType type, net::Bytes payload) {
  if (!c->send(wire(type), share(std::move(payload)))) {
    spdlog::debug("membership {}: send to {} refused (closed or queue full)", self_id_,
                  c->peer_id());
  }
}

void Membership::send_to(const std::string& id, const std::string& addr, MembershipType type,
                         net::Bytes payload) {
  Link& l = links_[id];
  if (l.conn && l.conn->is_open()) {
    send_on(l.conn, type, std::move(payload));
    return;
  }
  if (l.pending.size() < cfg_.max_pending_per_peer)
    l.pending.emplace_back(wire(type), share(std::move(payload)));
  if (l.dialing) return;
  l.dialing = true;
  std::weak_ptr<bool> w = token_;
  // Over a reliable transport an undeliverable ping is simply a missed ack: the probe timers run
  // on regardless of how the dial ends.
  transport_.connect(addr, [this, w, id](net::ConnectionPtr c, const std::string& err) {
    if (w.expired()) {
      if (c) c->close("membership stopped");
      return;
    }
    Link& l = links_[id];
    l.dialing = false;
    auto pending = std::move(l.pending);
    l.pending.clear();
    if (!c) {
      spdlog::debug("membership {}: dial {} failed: {}", self_id_, id, err);
      return;
    }
    if (c->peer_id() != id) {
      spdlog::warn("membership {}: dialled {} but reached {}", self_id_, id, c->peer_id());
      c->close("unexpected peer id");
      return;
    }
    adopt(c, true);
    for (auto& [type, bytes] : pending) {
      if (!c->send(type, bytes)) break;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Helpers

Update Membership::self_update() const {
  const Member& s = members_.at(self_id_);
  return Update{s.id, s.addr, s.incarnation, MemberState::Alive, ""};
}

std::vector<Update> Membership::full_state() const {
  std::vector<Update> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) {
    Update u{m.id, m.addr, m.incarnation, m.state, ""};
    if (m.state == MemberState::Left) u.from = m.id;
    if (m.state == MemberState::Suspect || m.state == MemberState::Dead) u.from = self_id_;
    out.push_back(std::move(u));
  }
  return out;
}

std::size_t Membership::est_num_nodes() const {
  // Kept up to date by every state change (set_state, a new member, leave); reaping removes only
  // members that are not live.
  return live_count_;
}

std::vector<const Membership::Member*> Membership::random_members(
    std::size_t k, const std::string& exclude, const std::function<bool(const Member&)>& ok) {
  std::vector<const Member*> c;
  if (k == 0) return c;
  // Draws with rejection: O(k) when most members qualify, as in a large healthy swarm. After a
  // bounded number of draws (few qualify, or the table is small) the whole table is scanned and
  // shuffled, so exactly min(k, qualifying) distinct members come back either way.
  const std::size_t n = others_.size();
  if (n > 8 * k) {
    for (std::size_t tries = 0; tries < 4 * k + 8 && c.size() < k; ++tries) {
      const Member* m = others_[rng_.below(n)];
      if (m->id == exclude || !ok(*m) || std::find(c.begin(), c.end(), m) != c.end()) continue;
      c.push_back(m);
    }
    if (c.size() == k) return c;
    c.clear();
  }
  for (const Member* m : others_)
    if (m->id != exclude && ok(*m)) c.push_back(m);
  const std::size_t take = std::min(k, c.size());
  for (std::size_t i = 0; i < take; ++i) std::swap(c[i], c[i + rng_.below(c.size() - i)]);
  c.resize(take);
  return c;
}

void Membership::set_state(Member& m, MemberState s) {
  if (m.state == s) return;
  live_count_ += is_live(s) ? 1 : 0;
  live_count_ -= is_live(m.state) ? 1 : 0;
  if (m.id != self_id_) {
    if (is_live(s)) down_.erase(m.id);
    else down_.insert(m.id);
  }
  m.state = s;
  m.state_change = sched_.now();
  publish(m);
  notify(m);
}

void Membership::notify(const Member& m) {
  if (listener_ && m.id != self_id_) listener_(MemberInfo{m.id, m.addr, m.incarnation, m.state});
}

void Membership::publish() {
  std::vector<MemberInfo> all;
  all.reserve(members_.size());
  for (const auto& [id, m] : members_)
    all.push_back(MemberInfo{m.id, m.addr, m.incarnation, m.state});
  snapshot_.reset(all);
}

// One member changed: O(log n) instead of copying the whole table (a joining peer of a large
// swarm learns thousands of members, one publish each).
void Membership::publish(const Member& m) {
  snapshot_.set(MemberInfo{m.id, m.addr, m.incarnation, m.state});
}

std::vector<PeerRef> Membership::live_peers() const { return snapshot_.live(); }

std::vector<MemberInfo> Membership::members() const { return snapshot_.all(); }

std::optional<MemberInfo> Membership::member(const std::string& id) const {
  return snapshot_.find(id);
}

std::vector<std::string> Membership::dialed_peers() const {
  std::vector<std::string> out;
  for (const auto& [ptr, o] : owned_) {
    if (o.conn->is_open()) out.push_back(o.conn->peer_id());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t Membership::incarnation() const {
  auto m = member(self_id_);
  assert(m);
  return m->incarnation;
}

}  // namespace gossiptrain::gossip
