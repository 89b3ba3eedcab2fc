// The dedicated exchange connections an initiator dialled, one per partner: reused while open,
// closed after idle_close without use, so membership traffic on the other connection never
// queues behind a 100 MB payload. Protocol thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "net/transport.hpp"

namespace gossiptrain::gossip {

class ConnectionPool {
 public:
  // in_use(c): c carries the exchange in flight (never closed for idleness).
  ConnectionPool(net::Scheduler& sched, net::Millis idle_close,
                 std::function<bool(const net::ConnectionPtr&)> in_use)
      : sched_(sched), idle_close_(idle_close), in_use_(std::move(in_use)) {}
  ~ConnectionPool() { alive_.reset(); }

  // The open connection to peer, or null.
  net::ConnectionPtr open(const std::string& peer) const;
  bool has(const std::string& peer) const { return conns_.count(peer) != 0; }
  void put(const std::string& peer, net::ConnectionPtr c);  // used now
  void touch(const std::string& peer);
  // Forgets peer's connection without closing it (the caller closes it or already did).
  void forget(const std::string& peer) { conns_.erase(peer); }
  void forget(const net::ConnectionPtr& c);
  // Forgets and closes peer's connection unless it carries the exchange in flight.
  void close_unless_in_use(const std::string& peer, const std::string& reason);
  // Closes peer's connection once it was idle for idle_close.
  void schedule_idle_close(const std::string& peer);

 private:
  struct Entry {
    net::ConnectionPtr conn;
    net::Millis last_used{0};
  };
  net::Scheduler& sched_;
  net::Millis idle_close_;
  std::function<bool(const net::ConnectionPtr&)> in_use_;
  std::unordered_map<std::string, Entry> conns_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards the idle timers
};

}  // namespace gossiptrain::gossip
