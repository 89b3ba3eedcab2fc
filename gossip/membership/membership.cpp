// SWIM membership with Lifeguard suspicion. The state rules (alive/suspect/dead precedence by
// incarnation, refutation, confirmations) follow hashicorp/memberlist state.go and suspicion.go.
// This file: the configuration, start, stop, leave, joining through the seeds and the transmit
// queue; membership_probe.cpp the periodic loops, membership_state.cpp the state machine,
// membership_net.cpp the messages.
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
  for (auto& o : owned) o.conn->close(net::CloseReason::Shutdown, leaving_ ? "left" : "membership stopped");
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
  join_refused_ = 0;
  join_failed_ = 0;
  // Counted before the dials: a dial that fails at once must not find the attempt still empty.
  join_tried_ = static_cast<int>(
      std::count_if(cfg_.seeds.begin(), cfg_.seeds.end(),
                    [this](const std::string& s) { return s != self_addr_; }));
  if (join_tried_ == 0) {
    join_in_progress_ = false;
    return;
  }
  const std::uint64_t attempt = ++join_attempt_no_;
  join_waiting_ = true;
  for (const auto& seed : cfg_.seeds)
    if (seed != self_addr_) send_sync_to_addr(seed, true);
  later(cfg_.join_timeout, [this, attempt] {
    if (attempt == join_attempt_no_ && join_waiting_) join_check();
  });
}

// A dial of the current join attempt failed. Once every seed's has, nothing can answer it: the
// retry is scheduled now instead of after the answer's deadline (join_timeout, 3 s). Peers that a
// launcher starts together dial a seed that is not listening yet; each second spent waiting for
// its answer was a second of training alone, which put a late joiner beyond its partners' norms.
void Membership::join_dial_failed() {
  if (!join_waiting_ || join_answered_ || ++join_failed_ < join_tried_) return;
  join_check();
}

void Membership::join_check() {
  join_waiting_ = false;  // this attempt is judged once, by its deadline or its last failed dial
  if (join_given_up_) return;  // a seed was a clone of this peer (send_sync_to_addr)
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
      addr, [this, w, addr, seq, join](net::ConnectionPtr c, const net::CloseCause& err) {
        if (w.expired()) {
          if (c) c->close(net::CloseReason::Shutdown, "membership stopped");
          return;
        }
        if (!c && join && !joined_ && !join_given_up_ &&
            err.reason == net::CloseReason::SharedIdentity) {
          // A live peer with our key would be a second member of our id, and every update
          // about either would be refuted by the other: the joiner stops, the peer already in
          // the swarm goes on (docs/peer.md, "One identity per peer").
          join_in_progress_ = false;
          join_given_up_ = true;
          const std::string& why = err.detail;
          spdlog::error("membership {}: giving up joining: {}", self_id_, why);
          if (join_refused_handler_) join_refused_handler_(why);
          return;
        }
        if (!c) {
          spdlog::debug("membership {}: seed {} unreachable: {}", self_id_, addr, err);
          // Connected, then closed by the seed before the handshake completed (not a timeout).
          if (join && seq >= join_seq_lo_ && err.in_handshake &&
              err.reason != net::CloseReason::Timeout) {
            ++join_refused_;
            join_refused_error_ = err.text();
          }
          if (join && seq >= join_seq_lo_) join_dial_failed();
          return;
        }
        if (c->peer_id() == self_id_) {
          c->close(net::CloseReason::Self);
          return;
        }
        adopt(c, true);
        send_on(c, MembershipType::Sync, encode(SyncMsg{seq, join, full_state()}));
      });
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

}  // namespace gossiptrain::gossip

