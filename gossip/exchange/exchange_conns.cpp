// The exchange connection pool (see exchange_conns.hpp).
#include "gossip/exchange/exchange_conns.hpp"

namespace gossiptrain::gossip {

net::ConnectionPtr ConnectionPool::open(const std::string& peer) const {
  auto it = conns_.find(peer);
  return it != conns_.end() && it->second.conn->is_open() ? it->second.conn : nullptr;
}

void ConnectionPool::put(const std::string& peer, net::ConnectionPtr c) {
  conns_[peer] = Entry{std::move(c), sched_.now()};
}

void ConnectionPool::touch(const std::string& peer) {
  auto it = conns_.find(peer);
  if (it != conns_.end()) it->second.last_used = sched_.now();
}

void ConnectionPool::forget(const net::ConnectionPtr& c) {
  // Pooled under its partner's id, which is the connection's authenticated peer id.
  auto it = conns_.find(c->peer_id());
  if (it != conns_.end() && it->second.conn == c) conns_.erase(it);
}

void ConnectionPool::close_unless_in_use(const std::string& peer, const std::string& reason) {
  auto it = conns_.find(peer);
  if (it == conns_.end() || in_use_(it->second.conn)) return;
  auto c = it->second.conn;
  conns_.erase(it);
  c->close(net::CloseReason::NotNeeded, reason);
}

void ConnectionPool::schedule_idle_close(const std::string& peer) {
  auto it = conns_.find(peer);
  if (it == conns_.end()) return;
  it->second.last_used = sched_.now();
  std::weak_ptr<bool> alive = alive_;
  sched_.schedule(idle_close_, [this, alive, peer] {
    if (!alive.lock()) return;
    auto it = conns_.find(peer);
    if (it == conns_.end()) return;
    if (sched_.now() - it->second.last_used < idle_close_) return;
    close_unless_in_use(peer, "exchange connection idle");
  });
}

}  // namespace gossiptrain::gossip
