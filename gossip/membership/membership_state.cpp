// SWIM membership, the state machine: alive/suspect/dead precedence by incarnation, refutation,
// Lifeguard suspicion with confirmations (memberlist state.go and suspicion.go), and the helpers
// over the member table.
#include "gossip/membership/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::gossip {

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

std::vector<std::string> Membership::member_ids() const { return table_->ids(); }

std::uint64_t Membership::members_version() const { return table_->ids_version(); }

std::optional<PeerRef> Membership::live_peer(const std::string& id) const {
  return table_->live_ref(id);
}

bool Membership::suspected(const std::string& id) const {
  const Row* m = table_->find(id);
  return m && m->state == MemberState::Suspect;
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
