// The Transport interface that gossip/ speaks to, and the Scheduler (clock + timers) it runs on.
// Two implementations of each: TCP over the encrypted channel (tcp/tcp_transport.hpp, Asio timers)
// and an in-memory seeded network with a fake clock (memory/memory_transport.hpp) for tests and
// simulation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/close_reason.hpp"

namespace gossiptrain::net {

using Bytes = std::vector<std::uint8_t>;
using SharedBytes = std::shared_ptr<const Bytes>;
using Millis = std::chrono::milliseconds;

class BufferPool;  // buffer_pool.hpp

// One authenticated connection to a remote peer. All methods are called on the transport's
// protocol thread (the one that runs the handler callbacks and timers).
class Connection {
 public:
  virtual ~Connection() = default;
  // Authenticated identity of the remote side (hex peer id derived from its public key).
  virtual const std::string& peer_id() const = 0;
  // Remote socket address as seen locally ("host:port"); for inbound connections this is the
  // remote's ephemeral port, not its listen address.
  virtual const std::string& remote_addr() const = 0;
  // Queues one message (type byte + payload). Returns false, without queueing, when the connection
  // is closed or its bounded send queue is full (back-pressure: try later or give up).
  virtual bool send(std::uint8_t type, SharedBytes payload) = 0;
  // Closes the connection; the handler's on_closed is called once with this cause.
  virtual void close(CloseCause cause) = 0;
  void close(CloseReason reason, std::string_view detail = {}) {
    close(CloseCause{reason, std::string(detail)});
  }
  virtual bool is_open() const = 0;
};
using ConnectionPtr = std::shared_ptr<Connection>;

// Receives the events of a Transport, all on its protocol thread.
class TransportHandler {
 public:
  virtual ~TransportHandler() = default;
  // A connection finished its handshake (inbound: accepted; outbound: also reported to the
  // connect() callback, after this).
  virtual void on_connection(const ConnectionPtr& c, bool inbound) = 0;
  virtual void on_message(const ConnectionPtr& c, std::uint8_t type, Bytes&& payload) = 0;
  // Called exactly once per connection that was reported to on_connection.
  virtual void on_closed(const ConnectionPtr& c, const CloseCause& cause) = 0;
};

// Clock and timers of the protocol thread. Callbacks never run re-entrantly inside schedule().
class Scheduler {
 public:
  using TimerId = std::uint64_t;
  virtual ~Scheduler() = default;
  virtual Millis now() const = 0;  // monotonic, since an arbitrary epoch
  virtual TimerId schedule(Millis delay, std::function<void()> fn) = 0;
  virtual void cancel(TimerId id) = 0;  // no-op if already fired or unknown
  // Runs fn on the protocol thread as soon as possible; safe to call from any thread.
  virtual void post(std::function<void()> fn) = 0;
};

class Transport {
 public:
  // The error of a failed connect: a typed reason where the channel closed (handshake_failed,
  // shared_identity, ...), else free text (Unspecified).
  using ConnectCallback = std::function<void(ConnectionPtr, const CloseCause& error)>;
  virtual ~Transport() = default;
  virtual void set_handler(TransportHandler* h) = 0;  // before start; not owned, outlives stop()
  virtual Scheduler& scheduler() = 0;
  // Our own identity.
  virtual const std::string& local_id() const = 0;
  // The address we are bound to locally ("host:port"; may be a wildcard such as 0.0.0.0:7000).
  virtual const std::string& listen_addr() const = 0;
  // The address others should dial ("host:port"): what membership announces. Never a wildcard.
  virtual const std::string& advertised_addr() const = 0;
  // Dials addr ("host:port") and completes the handshake; calls done(conn, {}) on success or
  // done(nullptr, error) on failure, on the protocol thread, within the connect deadline.
  virtual void connect(const std::string& addr, ConnectCallback done) = 0;
  // Where this transport's large received messages come from (any thread): a consumer done with
  // one may give it back with buffers().recycle(), so the next one reuses its mapped pages.
  virtual BufferPool& buffers() = 0;
};

}  // namespace gossiptrain::net
