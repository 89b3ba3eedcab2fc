// The seeded in-memory network: one event queue on a virtual clock drives every node's timers,
// connects and message deliveries, so a whole simulated cluster is deterministic for a seed.
#include "net/memory/memory_transport.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace gossiptrain::net {

// ---------------------------------------------------------------------------------------------
// SimTransport

SimTransport::SimTransport(SimNetwork& net, std::size_t index, std::string addr, std::string id)
    : net_(net), index_(index), addr_(std::move(addr)), id_(std::move(id)) {}

void SimTransport::connect(const std::string& addr, ConnectCallback done) {
  net_.do_connect(index_, addr, std::move(done));
}

Millis SimTransport::now() const { return net_.now(); }

Scheduler::TimerId SimTransport::schedule(Millis delay, std::function<void()> fn) {
  if (delay < Millis(0)) delay = Millis(0);
  return net_.enqueue(net_.now() + delay, index_, generation_, std::move(fn), true);
}

void SimTransport::cancel(TimerId id) { net_.cancel_timer(id); }

void SimTransport::post(std::function<void()> fn) {
  net_.enqueue(net_.now(), index_, generation_, std::move(fn), false);
}

// ---------------------------------------------------------------------------------------------
// SimConnection

SimConnection::SimConnection(SimNetwork& net, std::size_t owner, std::uint64_t owner_gen,
                             std::string peer_id, std::string remote_addr)
    : net_(net),
      owner_(owner),
      owner_gen_(owner_gen),
      peer_id_(std::move(peer_id)),
      remote_addr_(std::move(remote_addr)) {}

bool SimConnection::send(std::uint8_t type, SharedBytes payload) {
  if (!open_) return false;
  auto& st = net_.stats_;
  ++st.sent;
  auto other = other_.lock();
  if (!other || !net_.nodes_[other->owner_]->alive_ ||
      net_.nodes_[other->owner_]->generation_ != other->owner_gen_) {
    ++st.dropped_dead;
    return true;  // the sender cannot tell: like bytes written into a dead TCP peer
  }
  if (!net_.reachable_idx(owner_, other->owner_)) {
    ++st.dropped_partition;
    return true;
  }
  if (net_.lossy(type) || net_.link_lossy(type, owner_, other->owner_)) {
    ++st.dropped_loss;
    return true;
  }
  const std::size_t bytes = payload ? payload->size() + 1 : 1;
  const Millis left =
      net_.lossy_tcp_done(*this, other->owner_, type, net_.uplink_done(owner_, bytes), bytes);
  Millis at = std::max(
      net_.downlink_done(other->owner_, left + net_.one_way_delay(owner_, other->owner_), bytes),
      last_delivery_);
  last_delivery_ = at;
  std::weak_ptr<SimConnection> weak = other;
  SimNetwork* net = &net_;
  net_.enqueue(
      at, other->owner_, other->owner_gen_,
      [net, weak, type, payload]() {
        auto to = weak.lock();
        if (!to || !to->open_ || !to->reported_) {
          ++net->stats_.dropped_dead;
          return;
        }
        TransportHandler* h = net->nodes_[to->owner_]->handler_;
        if (!h) {
          ++net->stats_.dropped_dead;
          return;
        }
        ++net->stats_.delivered;
        Bytes copy = payload ? *payload : Bytes{};
        h->on_message(to, type, std::move(copy));
      },
      false);
  return true;
}

void SimConnection::close(CloseCause reason) {
  if (!open_) return;
  open_ = false;
  // Our own on_closed runs as the next event, never inside close(), so handlers may close from
  // within their callbacks without re-entrancy.
  auto self = shared_from_this();
  SimNetwork* net = &net_;
  net_.enqueue(
      net_.now(), owner_, owner_gen_, [net, self, reason]() { net->report_closed(self, reason); },
      false);
  // The FIN travels like data, after everything already sent on this direction; a partition
  // swallows it (the other end then learns by its own timeouts, as with TCP).
  auto other = other_.lock();
  if (!other || !net_.reachable_idx(owner_, other->owner_)) return;
  Millis at = std::max(net_.now() + net_.one_way_delay(owner_, other->owner_), last_delivery_);
  last_delivery_ = at;
  std::weak_ptr<SimConnection> weak = other;
  net_.enqueue(
      at, other->owner_, other->owner_gen_,
      [net, weak, reason]() {
        auto to = weak.lock();
        if (!to || !to->open_) return;
        to->open_ = false;
        // As over TCP: the remote sees our reason's text as the detail of its remote_closed.
        net->report_closed(to, CloseCause{CloseReason::RemoteClosed, reason.text()});
      },
      false);
}

// ---------------------------------------------------------------------------------------------
// SimNetwork

SimNetwork::SimNetwork(SimOptions opts) : opts_(std::move(opts)), rng_(opts_.seed) {
  if (!(opts_.latency_sigma >= 0 && opts_.latency_sigma < 10))
    throw std::invalid_argument("SimNetwork: latency_sigma must be in [0, 10)");
  if (!(opts_.uplink_bytes_per_s >= 0 && std::isfinite(opts_.uplink_bytes_per_s)))
    throw std::invalid_argument("SimNetwork: uplink_bytes_per_s must be >= 0");
  const std::size_t r = opts_.region_ms.size();
  for (const auto& row : opts_.region_ms) {
    if (row.size() != r) throw std::invalid_argument("SimNetwork: region_ms must be square");
    for (double ms : row)
      if (!(ms >= 0 && ms <= 600000))
        throw std::invalid_argument("SimNetwork: region latency must be in [0, 600000] ms");
  }
  for (int g : opts_.region_of)
    if (g < 0 || std::size_t(g) >= std::max<std::size_t>(r, 1))
      throw std::invalid_argument("SimNetwork: a node's region is not in region_ms");
}

SimTransport& SimNetwork::add_node(const std::string& addr, const std::string& id) {
  if (by_addr_.count(addr)) throw std::invalid_argument("SimNetwork: address taken: " + addr);
  const std::size_t idx = nodes_.size();
  nodes_.push_back(std::make_unique<SimTransport>(*this, idx, addr, id));
  by_addr_[addr] = idx;
  if (!group_of_.empty()) group_of_.push_back(unnamed_group_);
  return *nodes_.back();
}

SimTransport* SimNetwork::node(const std::string& addr) {
  auto it = by_addr_.find(addr);
  return it == by_addr_.end() ? nullptr : nodes_[it->second].get();
}

void SimNetwork::set_latency(Millis base, Millis jitter) {
  opts_.latency = base;
  opts_.jitter = jitter;
}

void SimNetwork::set_loss(double p, std::uint8_t first_type, std::uint8_t last_type) {
  opts_.loss = p;
  loss_first_ = first_type;
  loss_last_ = last_type;
}

void SimNetwork::partition(std::vector<std::vector<std::string>> groups) {
  unnamed_group_ = static_cast<int>(groups.size());
  group_of_.assign(nodes_.size(), unnamed_group_);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const auto& a : groups[g]) {
      auto it = by_addr_.find(a);
      if (it == by_addr_.end()) throw std::invalid_argument("SimNetwork: unknown address: " + a);
      group_of_[it->second] = static_cast<int>(g);
    }
  }
}

void SimNetwork::heal() { group_of_.clear(); }

bool SimNetwork::reachable(const std::string& from, const std::string& to) const {
  auto a = by_addr_.find(from), b = by_addr_.find(to);
  if (a == by_addr_.end() || b == by_addr_.end()) return false;
  return reachable_idx(a->second, b->second);
}

bool SimNetwork::reachable_idx(std::size_t a, std::size_t b) const {
  return group_of_.empty() || group_of_[a] == group_of_[b];
}

namespace {
// A message of `bytes` ready at ready_ms goes through a pipe of `rate` bytes per second that is
// busy until free_ms: when it is through, rounded up to the clock's ms (free_ms moves on).
Millis through(double& free_ms, double ready_ms, std::size_t bytes, double rate) {
  free_ms = std::max(ready_ms, free_ms) + 1000.0 * double(bytes) / rate;
  return Millis(static_cast<Millis::rep>(std::ceil(free_ms)));
}
}  // namespace

bool SimNetwork::lossy_type(std::uint8_t type) const {
  return type >= loss_first_ && type <= loss_last_;
}

std::optional<double> SimNetwork::link_loss(std::size_t a, std::size_t b) const {
  const double la = nodes_[a]->link_loss_, lb = nodes_[b]->link_loss_;
  if (la <= 0 && lb <= 0) return std::nullopt;
  return 1.0 - (1.0 - la) * (1.0 - lb);
}

bool SimNetwork::lossy(std::uint8_t type) {
  if (opts_.loss <= 0.0 || !lossy_type(type)) return false;
  return rng_.uniform() < opts_.loss;
}

Millis SimNetwork::link_latency(std::size_t a, std::size_t b) const {
  double ms = double(opts_.latency.count());
  if (opts_.latency_sigma > 0) {
    // Z from the link alone (Box-Muller on a generator seeded by the seed and the pair), so a
    // link keeps its latency whatever else the run draws.
    base::SplitMix64 g(opts_.seed ^ (std::min(a, b) * 0x9E3779B97F4A7C15ull) ^
                       (std::max(a, b) * 0xC2B2AE3D27D4EB4Full));
    const double z = std::sqrt(-2.0 * std::log(g.uniform_open())) *
                     std::cos(2.0 * std::numbers::pi * g.uniform());
    ms *= std::exp(opts_.latency_sigma * z);
  }
  if (!opts_.region_ms.empty()) {
    auto region = [&](std::size_t i) {
      return i < opts_.region_of.size() ? std::size_t(opts_.region_of[i]) : std::size_t(0);
    };
    ms += opts_.region_ms[region(a)][region(b)];
  }
  return Millis(static_cast<Millis::rep>(std::llround(ms)));
}

Millis SimNetwork::one_way_delay(std::size_t a, std::size_t b) {
  Millis d = link_latency(a, b);
  if (opts_.jitter.count() > 0) {
    d += Millis(
        static_cast<Millis::rep>(rng_.below(static_cast<std::uint64_t>(opts_.jitter.count()) + 1)));
  }
  return d;
}

Millis SimNetwork::uplink_done(std::size_t a, std::size_t bytes) {
  SimTransport& n = *nodes_[a];
  const double rate = n.link_bytes_per_s_ > 0 ? n.link_bytes_per_s_ : opts_.uplink_bytes_per_s;
  if (rate <= 0) return now();
  return through(n.uplink_free_ms_, double(now().count()), bytes, rate);
}

Millis SimNetwork::downlink_done(std::size_t b, Millis arrive, std::size_t bytes) {
  SimTransport& n = *nodes_[b];
  if (n.link_bytes_per_s_ <= 0) return arrive;
  return through(n.downlink_free_ms_, double(arrive.count()), bytes, n.link_bytes_per_s_);
}

// Mathis, Semke, Mahdavi and Ott (1997): a TCP flow that loses a fraction p of its segments
// settles at MSS / (RTT * sqrt(2p/3)) bytes per second. The bound holds for small p; above 50%
// loss it is taken at 50% (real TCP would stall on timeouts there).
Millis SimNetwork::lossy_tcp_done(SimConnection& c, std::size_t b, std::uint8_t type, Millis ready,
                                  std::size_t bytes) {
  const auto loss = link_loss(c.owner_, b);
  if (!loss || lossy_type(type)) return ready;
  constexpr double kMss = 1448;  // bytes: a 1500-byte MTU less IP and TCP headers with timestamps
  const double p = std::min(0.5, *loss);
  const double rtt_s = std::max(1.0, 2.0 * double(link_latency(c.owner_, b).count())) / 1000.0;
  const double rate = kMss / (rtt_s * std::sqrt(2.0 * p / 3.0));
  return through(c.tcp_free_ms_, double(ready.count()), bytes, rate);
}

bool SimNetwork::link_lossy(std::uint8_t type, std::size_t a, std::size_t b) {
  const auto loss = link_loss(a, b);
  if (!loss) return false;  // no draw: runs without link loss keep their sequence
  if (!lossy_type(type)) return false;
  return rng_.uniform() < *loss;
}

void SimNetwork::set_link(const std::string& addr, std::optional<double> bytes_per_s,
                          std::optional<double> loss) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork::set_link: unknown address " + addr);
  if (bytes_per_s && !(*bytes_per_s > 0 && std::isfinite(*bytes_per_s)))
    throw std::invalid_argument("SimNetwork::set_link: the rate must be > 0");
  if (loss && !(*loss >= 0 && *loss <= 1))
    throw std::invalid_argument("SimNetwork::set_link: the loss must be in [0, 1]");
  n->link_bytes_per_s_ = bytes_per_s.value_or(0.0);
  n->link_loss_ = loss.value_or(0.0);
}

std::string SimNetwork::ephemeral_addr(const std::string& addr) {
  const auto colon = addr.rfind(':');
  const std::string host = colon == std::string::npos ? addr : addr.substr(0, colon);
  return host + ":" + std::to_string(next_port_++);
}

void SimNetwork::do_connect(std::size_t from, const std::string& addr,
                            Transport::ConnectCallback done) {
  SimTransport& src = *nodes_[from];
  const std::uint64_t src_gen = src.generation_;
  const Millis started = now();
  // The SYN reaches the target after one latency; the dialer completes one latency later.
  enqueue(
      now() + one_way_delay(from, by_addr_.count(addr) ? by_addr_.at(addr) : from), from, src_gen,
      [this, from, src_gen, addr, started, done = std::move(done)]() mutable {
        auto it = by_addr_.find(addr);
        SimTransport* dst = it == by_addr_.end() ? nullptr : nodes_[it->second].get();
        if (!dst || !dst->alive_ || !dst->handler_ || !reachable_idx(from, dst->index_)) {
          ++stats_.connects_failed;
          enqueue(
              started + opts_.connect_timeout, from, src_gen,
              [done = std::move(done)]() {
                done(nullptr, CloseCause{CloseReason::Unspecified, "connect timeout"});
              },
              false);
          return;
        }
        SimTransport& src = *nodes_[from];
        auto a = std::make_shared<SimConnection>(*this, from, src_gen, dst->id_, dst->addr_);
        auto b = std::make_shared<SimConnection>(*this, dst->index_, dst->generation_, src.id_,
                                                 ephemeral_addr(src.addr_));
        a->other_ = b;
        b->other_ = a;
        prune(src);
        prune(*dst);
        src.conns_.push_back(a);
        dst->conns_.push_back(b);
        const Millis complete_at = now() + one_way_delay(dst->index_, from);
        // Nothing from the acceptor may overtake the dialer's completion.
        b->last_delivery_ = complete_at;
        ++stats_.connects_ok;
        enqueue(
            complete_at, from, src_gen,
            [this, a, from, done = std::move(done)]() {
              if (!a->open_) {
                done(nullptr,
                     CloseCause{CloseReason::Unspecified, "connection closed during handshake",
                                true});
                return;
              }
              a->reported_ = true;
              if (TransportHandler* h = nodes_[from]->handler_) h->on_connection(a, false);
              done(a, {});
            },
            false);
        b->reported_ = true;
        dst->handler_->on_connection(b, true);
      },
      false);
}

void SimNetwork::prune(SimTransport& n) {
  auto& v = n.conns_;
  if (v.size() < n.prune_at_) return;
  // Closed ends are released here; a pending on_closed event holds its own reference.
  v.erase(std::remove_if(v.begin(), v.end(), [](const auto& c) { return !c->open_; }), v.end());
  n.prune_at_ = std::max<std::size_t>(16, 2 * v.size());
}

void SimNetwork::report_closed(const std::shared_ptr<SimConnection>& c, const CloseCause& reason) {
  if (!c->reported_ || c->closed_reported_) return;
  c->closed_reported_ = true;
  SimTransport& n = *nodes_[c->owner_];
  if (n.generation_ != c->owner_gen_) return;
  if (TransportHandler* h = n.handler_) h->on_closed(c, reason);
}

void SimNetwork::kill(const std::string& addr, bool reset) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork: unknown address: " + addr);
  if (!n->alive_) return;
  n->alive_ = false;
  ++n->generation_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n->paused_ = false;  // what waited belonged to the killed process
    if (auto it = held_.find(n->index_); it != held_.end()) {
      for (const auto& ev : it->second)
        if (ev.timer) pending_timers_.erase(ev.timer);
      held_.erase(it);
    }
  }
  n->handler_ = nullptr;
  for (auto& c : n->conns_) {
    if (!c->open_) continue;  // closed before: its FIN already went out
    c->open_ = false;
    auto other = c->other_.lock();
    if (!reset || !other || !other->open_ || !reachable_idx(n->index_, other->owner_)) continue;
    std::weak_ptr<SimConnection> weak = other;
    enqueue(
        now() + one_way_delay(n->index_, other->owner_), other->owner_, other->owner_gen_,
        [this, weak]() {
          auto to = weak.lock();
          if (!to || !to->open_) return;
          to->open_ = false;
          report_closed(to, CloseCause{CloseReason::IoError, "connection reset"});
        },
        false);
  }
  n->conns_.clear();
}

void SimNetwork::pause(const std::string& addr) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork: unknown address: " + addr);
  std::lock_guard<std::mutex> lock(mu_);
  if (n->alive_) n->paused_ = true;
}

void SimNetwork::resume(const std::string& addr) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork: unknown address: " + addr);
  std::lock_guard<std::mutex> lock(mu_);
  if (!n->paused_) return;
  n->paused_ = false;
  auto it = held_.find(n->index_);
  if (it == held_.end()) return;
  for (auto& ev : it->second) {  // in the order they fell due, all due now
    ev.at = now();
    ev.seq = next_seq_++;
    queue_.push(std::move(ev));
  }
  held_.erase(it);
}

bool SimNetwork::paused(const std::string& addr) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork: unknown address: " + addr);
  std::lock_guard<std::mutex> lock(mu_);
  return n->paused_;
}

SimTransport& SimNetwork::revive(const std::string& addr) {
  SimTransport* n = node(addr);
  if (!n) throw std::invalid_argument("SimNetwork: unknown address: " + addr);
  if (!n->alive_) {
    // A second bump: anything the dead incarnation's objects scheduled while dead is discarded.
    ++n->generation_;
    n->alive_ = true;
  }
  return *n;
}

std::uint64_t SimNetwork::enqueue(Millis at, std::size_t node, std::uint64_t gen,
                                  std::function<void()> fn, bool cancellable) {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t id = 0;
  if (cancellable) {
    id = next_timer_++;
    pending_timers_.insert(id);
  }
  queue_.push(Event{at, next_seq_++, node, gen, id, std::move(fn)});
  return id;
}

void SimNetwork::cancel_timer(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_timers_.erase(id)) cancelled_.insert(id);
}

bool SimNetwork::step() { return step_until(Millis::max()); }

bool SimNetwork::step_until(Millis limit) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (;;) {
      // The bound is checked for every candidate: skipping cancelled or stale events must not
      // carry us past the limit to a live one.
      if (queue_.empty() || queue_.top().at > limit) return false;
      Event ev = std::move(const_cast<Event&>(queue_.top()));
      queue_.pop();
      if (ev.timer && cancelled_.erase(ev.timer)) continue;
      if (ev.at.count() > now_ms_.load()) now_ms_.store(ev.at.count());
      const bool owned = ev.node != kNoNode;
      if (owned && nodes_[ev.node]->paused_ && nodes_[ev.node]->generation_ == ev.gen) {
        held_[ev.node].push_back(std::move(ev));  // a held timer stays pending (cancellable)
        continue;
      }
      if (ev.timer) pending_timers_.erase(ev.timer);
      if (owned && nodes_[ev.node]->generation_ != ev.gen) continue;
      fn = std::move(ev.fn);
      break;
    }
  }
  fn();
  return true;
}

void SimNetwork::run_until(Millis t) {
  while (step_until(t)) {
  }
  if (t.count() > now_ms_.load()) now_ms_.store(t.count());
}

bool SimNetwork::run_until_idle(std::size_t max_events) {
  for (std::size_t i = 0; i < max_events; ++i) {
    if (!step()) return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty();
}

}  // namespace gossiptrain::net
