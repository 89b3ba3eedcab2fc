// SWIM membership with Lifeguard suspicion. The state rules (alive/suspect/dead precedence by
// incarnation, refutation, confirmations) follow hashicorp/memberlist state.go and suspicion.go.
#include "gossip/membership/membership.hpp"

#include <algorithm>
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
  if (join_refused_limit < 0)
    throw std::invalid_argument("membership: join_refused_limit must be >= 0");
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
      token_(std::make_shared<bool>(true)) {
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
  if (!cfg_.names) cfg_.names = std::make_shared<MemberNames>();
  table_ = std::make_unique<MemberTable>(cfg_.names, self_id_, self_addr_, inc, sched_.now());
  self_name_ = table_->self_id();
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
  const Row& self = table_->self();
  const Millis now = sched_.now();
  table_->modify(self, [now](Row& r) {
    r.state = MemberState::Left;
    r.state_change = now;
  });
  const Update u{self_id_, self_addr_, self.incarnation, MemberState::Left, self_id_};
  table_->queue(self, MemberState::Left, self.incarnation, self_name_);
  // Told directly (to a bounded number) as well as gossiped: a leave should not wait for a probe
  // to be noticed, and the receivers pass it on.
  const auto targets =
      random_members(kLeaveDirectFanout, self_name_, [](const Row& m) { return is_live(m.state); });
  for (const Row& m : targets)
    send_to(table_->id_str(m), table_->addr_str(m), MembershipType::Gossip, encode(GossipMsg{{u}}));
  spdlog::info("membership {}: leaving, told {} members", self_id_, targets.size());
  later(cfg_.leave_linger, [this] { stop(); });
}

// ---------------------------------------------------------------------------------------------
// Join and re-join through the seeds

void Membership::join_attempt() {
  if (!running_ || leaving_ || join_given_up_) return;
  join_in_progress_ = true;
  join_answered_ = false;
  join_seq_lo_ = next_seq_;
  join_tried_ = 0;
  join_refused_ = 0;
  int tried = 0;
  for (const auto& seed : cfg_.seeds) {
    if (seed == self_addr_) continue;
    send_sync_to_addr(seed, true);
    ++tried;
  }
  join_tried_ = tried;
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
  // Every seed took the TCP connection and then closed it in the handshake: they refuse us. A
  // seed that is down or unreachable fails to connect instead, and is worth waiting for.
  const bool refused = !joined_ && join_tried_ > 0 && join_refused_ == join_tried_;
  join_refused_attempts_ = refused ? join_refused_attempts_ + 1 : 0;
  if (!refused) {
    spdlog::warn("membership {}: no seed answered ({} seeds), retrying in {} ms", self_id_,
                 cfg_.seeds.size(), join_backoff_.count());
    later(join_backoff_, [this] { join_attempt(); });
    return;
  }
  const std::string why =
      "every seed (" + std::to_string(join_tried_) +
      ") closed the connection during the handshake ('" + join_refused_error_ +
      "'): most likely this peer's --network-key is not the swarm's (the seeds log 'bad MAC ... "
      "network key mismatch'), or a seed's --allowlist does not hold this peer's key";
  if (cfg_.join_refused_limit > 0 && join_refused_attempts_ >= cfg_.join_refused_limit) {
    join_in_progress_ = false;
    join_given_up_ = true;  // nor re-dialled when alone (housekeeping): the seeds refuse us
    spdlog::error("membership {}: giving up joining after {} attempts: {}", self_id_,
                  join_refused_attempts_, why);
    if (join_refused_handler_) join_refused_handler_(why);
    return;
  }
  spdlog::warn("membership {}: {}; retrying in {} ms (attempt {} of {})", self_id_, why,
               join_backoff_.count(), join_refused_attempts_, cfg_.join_refused_limit);
  later(join_backoff_, [this] { join_attempt(); });
}

void Membership::send_sync_to_addr(const std::string& addr, bool join) {
  // A seed we already talk to is reached over the existing connection.
  const auto addr_name = table_->names().addrs.find(addr);
  for (std::size_t slot = 1; addr_name && slot < table_->size(); ++slot) {
    if (table_->at(slot).addr != *addr_name) continue;
    auto it = links_.find(table_->id_str(table_->at(slot)));
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
          // Connected, then closed by the seed before the handshake completed (not a timeout).
          if (join && seq >= join_seq_lo_ && err.find("during handshake") != std::string::npos &&
              err.find("timeout") == std::string::npos) {
            ++join_refused_;
            join_refused_error_ = err;
          }
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
          encode(PingMsg{seq, target_id, std::move(piggyback)}));
  later(cfg_.probe_timeout, [this, seq] { indirect_probe(seq); });
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
            encode(PingReqMsg{seq, target_id, target_addr, take_broadcasts(cfg_.max_piggyback)}));
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
    o.conn->close("idle");
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
      const Row* m = table_->find(u.id);
      if (m && m->state == MemberState::Alive && u.incarnation < m->incarnation)
        corrections.push_back(update_of(*m, MemberState::Alive, ""));
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
  const Row* st = table_->find(a.id);
  if (!st) {
    if (table_->size() >= kMaxSyncMembers) {
      spdlog::warn("membership {}: member table full ({}), ignoring {}", self_id_, kMaxSyncMembers,
                   a.id);
      return;
    }
    const Row& m = table_->add(cfg_.names->ids.intern(a.id), cfg_.names->addrs.intern(a.addr),
                               a.incarnation, sched_.now());
    // A random slot in the probe round, so a new member is probed soon but not always first.
    probe_order_.push_back(m.id);
    const std::size_t j = rng_.below(probe_order_.size());
    std::swap(probe_order_[j], probe_order_.back());
    table_->queue(m, MemberState::Alive, a.incarnation, kNoName, MemberTable::News::Join);
    spdlog::debug("membership {}: new member {} at {} (incarnation {})", self_id_, a.id, a.addr,
                  a.incarnation);
    notify(m);
    return;
  }
  if (!is_self && a.incarnation <= st->incarnation) return;
  if (is_self && a.incarnation < st->incarnation) return;
  cancel_suspicion(st->id);
  if (is_self) {
    if (bootstrap || (a.incarnation == st->incarnation && a.addr == table_->addr_str(*st))) return;
    // Someone announces us with our incarnation or a later one (our previous life, or a
    // different address): outbid it.
    if (!leaving_) refute(a.incarnation);
    return;
  }
  const NameId addr = cfg_.names->addrs.intern(a.addr);
  const bool addr_changed = st->addr != addr;
  const MemberState before = st->state;
  table_->modify(*st, [&](Row& m) {
    m.incarnation = a.incarnation;
    m.addr = addr;
  });
  table_->queue(*st, MemberState::Alive, a.incarnation, kNoName);
  if (addr_changed) links_.erase(a.id);  // the old connection points at the old address
  if (before != MemberState::Alive) {
    if (before != MemberState::Suspect) {
      spdlog::info("membership {}: {} is alive again (incarnation {})", self_id_, a.id,
                   a.incarnation);
    }
    set_state(*st, MemberState::Alive);
  } else if (addr_changed) {
    notify(*st);
  }
}

NameId Membership::accuser(const std::string& from) {
  if (auto n = cfg_.names->ids.find(from)) return *n;
  // Not a name we know: kept while the names table is within a few times the largest member
  // table, so that accusers made up by a peer cannot grow it without bound.
  if (cfg_.names->ids.size() >= 4 * kMaxSyncMembers) return kNoName;
  return cfg_.names->ids.intern(from);
}

void Membership::suspect_node(const Update& s) {
  const Row* st = table_->find(s.id);
  if (!st) return;
  if (s.incarnation < st->incarnation) return;
  const NameId from = accuser(s.from);
  if (suspicions_.count(st->id)) {
    // An independent accusation shortens the timeout (Lifeguard); pass it on if it was new.
    if (confirm_suspicion(st->id, from))
      table_->queue(*st, MemberState::Suspect, s.incarnation, from);
    return;
  }
  if (st->state != MemberState::Alive) return;
  if (s.id == self_id_) {
    refute(s.incarnation);
    return;
  }
  table_->queue(*st, MemberState::Suspect, s.incarnation, from);
  table_->modify(*st, [&](Row& m) { m.incarnation = s.incarnation; });
  spdlog::debug("membership {}: suspecting {} (incarnation {}, by {}) at {} ms", self_id_, s.id,
                s.incarnation, s.from, sched_.now().count());
  set_state(*st, MemberState::Suspect);
  start_suspicion(*st, from);
}

void Membership::dead_node(const Update& d) {
  const Row* st = table_->find(d.id);
  if (!st) return;
  if (d.incarnation < st->incarnation) return;
  cancel_suspicion(st->id);
  if (st->state == MemberState::Dead || st->state == MemberState::Left) return;
  if (d.id == self_id_) {
    if (!leaving_) refute(d.incarnation);
    return;
  }
  const bool left = d.from == d.id;
  const MemberState state = left ? MemberState::Left : MemberState::Dead;
  table_->queue(*st, state, d.incarnation, left ? st->id : accuser(d.from));
  table_->modify(*st, [&](Row& m) { m.incarnation = d.incarnation; });
  spdlog::info("membership {}: {} is {} (incarnation {})", self_id_, d.id, left ? "left" : "dead",
               d.incarnation);
  set_state(*st, state);
}

void Membership::refute(std::uint64_t accused_incarnation) {
  const Row& self = table_->self();
  std::uint64_t inc = self.incarnation + 1;
  if (accused_incarnation >= inc) inc = accused_incarnation + 1;
  table_->modify(self, [inc](Row& r) { r.incarnation = inc; });
  spdlog::debug("membership {}: refuting, incarnation now {}", self_id_, inc);
  table_->queue(self, MemberState::Alive, inc, kNoName);
}

Millis Membership::suspicion_min_timeout(std::size_t n) const {
  const double node_scale = std::max(1.0, std::log10(std::max(1.0, static_cast<double>(n))));
  return Millis(static_cast<Millis::rep>(std::floor(
      cfg_.suspicion_mult * node_scale * static_cast<double>(cfg_.probe_interval.count()))));
}

void Membership::start_suspicion(const Row& m, NameId from) {
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
  const NameId id = m.id;
  const std::uint64_t inc = m.incarnation;
  s.timer = later(timeout, [this, id, inc] { suspicion_fired(id, inc); });
  cancel_suspicion(id);
  suspicions_[id] = std::move(s);
}

bool Membership::confirm_suspicion(NameId id, NameId from) {
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
  spdlog::debug("membership {}: suspicion of {} confirmed by {} ({}/{}), {} ms left", self_id_,
                table_->id_str(id), from == kNoName ? "?" : table_->id_str(from), confirmed, s.k,
                remaining.count());
  sched_.cancel(s.timer);
  const std::uint64_t inc = s.incarnation;
  s.timer = later(std::max(remaining, Millis(0)), [this, id, inc] { suspicion_fired(id, inc); });
  return true;
}

void Membership::suspicion_fired(NameId id, std::uint64_t incarnation) {
  suspicions_.erase(id);
  const Row* m = table_->find(id);
  if (!m) return;
  if (m->state != MemberState::Suspect || m->incarnation != incarnation) return;
  spdlog::debug("membership {}: suspicion of {} timed out at {} ms", self_id_, table_->id_str(id),
                sched_.now().count());
  dead_node(update_of(*m, MemberState::Dead, self_id_));
}

void Membership::cancel_suspicion(NameId id) {
  auto it = suspicions_.find(id);
  if (it == suspicions_.end()) return;
  sched_.cancel(it->second.timer);
  suspicions_.erase(it);
}

// ---------------------------------------------------------------------------------------------
// Dissemination (the transmit queue of member_table.hpp)

int Membership::retransmit_limit() const {
  const double n = static_cast<double>(est_num_nodes());
  return cfg_.retransmit_mult * static_cast<int>(std::ceil(std::log10(n + 1.0)));
}

std::vector<Update> Membership::take_broadcasts(std::size_t max) {
  return table_->take(max, retransmit_limit());
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
    forget_link_if_idle(c->peer_id());
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
        } else if (const Row* r = table_->find(requester)) {
          send_to(requester, table_->addr_str(*r), MembershipType::Ack, std::move(ack));
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
                   table_->size());
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
  forget_link_if_idle(id);
  if (owned_.erase(c.get())) c->close("no ack");
}

void Membership::forget_link_if_idle(const std::string& id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  const Link& l = it->second;
  if (!l.conn && !l.dialing && l.pending.empty()) links_.erase(it);
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
      forget_link_if_idle(id);
      return;
    }
    if (c->peer_id() != id) {
      spdlog::warn("membership {}: dialled {} but reached {}", self_id_, id, c->peer_id());
      c->close("unexpected peer id");
      forget_link_if_idle(id);
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

Update Membership::self_update() const { return update_of(table_->self(), MemberState::Alive, ""); }

Update Membership::update_of(const Row& m, MemberState state, const std::string& from) const {
  return Update{table_->id_str(m), table_->addr_str(m), m.incarnation, state, from};
}

std::vector<Update> Membership::full_state() const {
  std::vector<Update> out;
  out.reserve(table_->size());
  for (std::size_t slot = 0; slot < table_->size(); ++slot) {
    const Row& m = table_->at(slot);
    std::string from;
    if (m.state == MemberState::Left) from = table_->id_str(m);
    if (m.state == MemberState::Suspect || m.state == MemberState::Dead) from = self_id_;
    out.push_back(update_of(m, m.state, from));
  }
  return out;
}

std::size_t Membership::est_num_nodes() const {
  // Kept up to date by every state change; reaping removes only members that are not live.
  return table_->live_members();
}

std::vector<MemberTable::Row> Membership::random_members(
    std::size_t k, NameId exclude, const std::function<bool(const Row&)>& ok) {
  std::vector<Row> c;
  if (k == 0) return c;
  // Draws with rejection from every member but ourselves (slots 1..): O(k) when most members
  // qualify, as in a large healthy swarm. After a bounded number of draws (few qualify, or the
  // table is small) the whole table is scanned and shuffled, so exactly min(k, qualifying)
  // distinct members come back either way.
  const std::size_t n = table_->size() - 1;
  auto taken = [&c](const Row& m) {
    return std::any_of(c.begin(), c.end(), [&m](const Row& x) { return x.id == m.id; });
  };
  if (n > 8 * k) {
    for (std::size_t tries = 0; tries < 4 * k + 8 && c.size() < k; ++tries) {
      const Row& m = table_->at(1 + rng_.below(n));
      if (m.id == exclude || !ok(m) || taken(m)) continue;
      c.push_back(m);
    }
    if (c.size() == k) return c;
    c.clear();
  }
  for (std::size_t slot = 1; slot <= n; ++slot) {
    const Row& m = table_->at(slot);
    if (m.id != exclude && ok(m)) c.push_back(m);
  }
  base::keep_random(c, k, rng_);
  return c;
}

void Membership::set_state(const Row& m, MemberState s) {
  if (m.state == s) return;
  const Millis now = sched_.now();
  table_->modify(m, [s, now](Row& r) {
    r.state = s;
    r.state_change = now;
  });
  if (m.id != self_name_) {
    if (is_live(s)) down_.erase(m.id);
    else down_.insert(m.id);
  }
  notify(m);
}

void Membership::notify(const Row& m) {
  if (listener_ && m.id != self_name_) listener_(table_->info_of(m));
}

std::vector<PeerRef> Membership::live_peers() const { return table_->live_peers(); }

std::size_t Membership::live_count() const { return table_->live_count(); }

std::vector<PeerRef> Membership::live_sample(std::size_t k, base::ProtocolRng& rng) const {
  return table_->live_sample(k, rng);
}

std::vector<MemberInfo> Membership::members() const { return table_->all(); }

std::optional<MemberInfo> Membership::member(const std::string& id) const {
  return table_->info(id);
}

std::vector<std::string> Membership::dialed_peers() const {
  std::vector<std::string> out;
  for (const auto& [ptr, o] : owned_) {
    if (o.conn->is_open()) out.push_back(o.conn->peer_id());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t Membership::incarnation() const { return table_->self_incarnation(); }

}  // namespace gossiptrain::gossip
