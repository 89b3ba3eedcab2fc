// A seeded, deterministic in-memory network with a virtual clock (c-toxcore style) for protocol
// tests and simulation: latency + jitter, per-message loss, partitions, node kill/revive.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/rng.hpp"
#include "net/buffer_pool.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

// Seeded generator of the simulation: the same sequence on every platform and standard library.
using SimRng = base::Xoshiro256;

struct SimOptions {
  std::uint64_t seed = 1;
  Millis latency{5};  // one-way base latency (with latency_sigma: the median of the links)
  Millis jitter{0};   // extra one-way latency of each message, uniform in [0, jitter]
  // Log-normal links: when > 0, the base latency of each link (pair of nodes) is
  // latency * exp(sigma * Z), Z a standard normal drawn once per link from the seed.
  double latency_sigma = 0.0;
  // Each node's uplink in bytes per simulated second; 0: unlimited. A node's messages leave one
  // after another at this rate (later sends queue behind earlier ones), then travel the latency.
  double uplink_bytes_per_s = 0.0;
  // Regions: region_of[i] is node i's (nodes beyond the list are in region 0), and the one-way
  // latency between regions a and b, region_ms[a][b], is added to every link between them.
  std::vector<int> region_of;
  std::vector<std::vector<double>> region_ms;
  double loss = 0.0;  // probability that one message is dropped (see SimNetwork::set_loss)
  // Dials to an unknown, dead, handler-less or partitioned address fail after this long.
  Millis connect_timeout{1000};
};

struct SimStats {
  std::uint64_t sent = 0;               // send() calls that returned true
  std::uint64_t delivered = 0;          // on_message calls
  std::uint64_t dropped_loss = 0;       // random loss
  std::uint64_t dropped_partition = 0;  // sender and receiver in different groups
  std::uint64_t dropped_dead = 0;       // receiver killed or its end already closed
  std::uint64_t connects_ok = 0;
  std::uint64_t connects_failed = 0;
};

class SimNetwork;
class SimConnection;

// One node: both its Transport and its Scheduler (now() is the network's virtual clock).
// All callbacks run on the thread that drives the SimNetwork; post() may be called from any thread.
class SimTransport final : public Transport, public Scheduler {
 public:
  SimTransport(SimNetwork& net, std::size_t index, std::string addr, std::string id);

  // Transport
  void set_handler(TransportHandler* h) override { handler_ = h; }
  Scheduler& scheduler() override { return *this; }
  const std::string& local_id() const override { return id_; }
  const std::string& listen_addr() const override { return addr_; }
  const std::string& advertised_addr() const override { return addr_; }
  void connect(const std::string& addr, ConnectCallback done) override;
  // Delivered messages are copies made for the receiver; a pool of limit 0 frees what it is given.
  BufferPool& buffers() override { return buffers_; }

  // Scheduler
  Millis now() const override;
  TimerId schedule(Millis delay, std::function<void()> fn) override;
  void cancel(TimerId id) override;
  void post(std::function<void()> fn) override;

  bool alive() const { return alive_.load(); }
  TransportHandler* handler() const { return handler_; }

 private:
  friend class SimNetwork;
  friend class SimConnection;
  SimNetwork& net_;
  std::size_t index_;
  std::string addr_;
  std::string id_;
  TransportHandler* handler_ = nullptr;
  BufferPool buffers_{0};
  std::atomic<bool> alive_{true};
  bool paused_ = false;  // SimNetwork::pause: its events wait in SimNetwork::held_
  // Bumped by kill(): events (timers, deliveries, connects) of an older generation are discarded,
  // so a killed node's timers never fire and a revived node starts clean.
  std::atomic<std::uint64_t> generation_{0};
  // Open connections are owned here, as a real transport's reader keeps its socket alive; the
  // handler may drop its pointers without closing the connection.
  std::vector<std::shared_ptr<SimConnection>> conns_;
  std::size_t prune_at_ = 16;  // conns_ size at which the next prune() runs
  double uplink_free_ms_ = 0;  // when the uplink has sent everything queued so far
  // SimNetwork::set_link: this node's own link (0: none set).
  double link_bytes_per_s_ = 0;  // both ways, instead of the network's uplink rate
  double link_loss_ = 0;         // of every message it sends or receives, besides the network's
  double downlink_free_ms_ = 0;  // when its link has delivered everything queued to it so far
};

// One end of an in-memory connection pair.
class SimConnection final : public Connection, public std::enable_shared_from_this<SimConnection> {
 public:
  SimConnection(SimNetwork& net, std::size_t owner, std::uint64_t owner_gen, std::string peer_id,
                std::string remote_addr);
  const std::string& peer_id() const override { return peer_id_; }
  const std::string& remote_addr() const override { return remote_addr_; }
  bool send(std::uint8_t type, SharedBytes payload) override;
  using Connection::close;  // close(CloseReason, detail)
  void close(CloseCause cause) override;
  bool is_open() const override { return open_; }

 private:
  friend class SimNetwork;
  friend class SimTransport;
  SimNetwork& net_;
  std::size_t owner_;        // node index of this end
  std::uint64_t owner_gen_;  // that node's generation when the connection was made
  std::string peer_id_;
  std::string remote_addr_;
  std::weak_ptr<SimConnection> other_;
  bool open_ = true;
  bool reported_ = false;         // on_connection was called (so on_closed is owed)
  bool closed_reported_ = false;  // on_closed was called
  Millis last_delivery_{0};       // keeps this direction FIFO under jitter
  double tcp_free_ms_ = 0;        // when a lossy link's slowed flow has sent what it was given
};

// The simulated network: owns the virtual clock, the single event queue and the nodes.
// Deterministic for a given seed and call sequence: events run by (time, sequence number).
// Semantics: a dial reaches the acceptor after one latency and completes one latency later; a
// message arrives after latency + jitter, in send order per connection (FIFO per direction, even
// under jitter); loss drops single messages (UDP-like, for SWIM); close() reports on_closed locally
// as the next event and to the other end after the in-flight data; everything runs on the thread
// that calls step()/run_*(), and post() may be called from any thread.
class SimNetwork {
 public:
  explicit SimNetwork(SimOptions opts = {});
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // Adds a node reachable at addr with identity id. The reference stays valid for the network's
  // lifetime. Throws std::invalid_argument if addr is already taken.
  SimTransport& add_node(const std::string& addr, const std::string& id);
  SimTransport* node(const std::string& addr);

  void set_latency(Millis base, Millis jitter);
  // Loss applies to messages whose type is in [first_type, last_type] (all by default), so a test
  // can make the small UDP-like membership messages lossy and leave bulk transfers alone.
  void set_loss(double p, std::uint8_t first_type = 0, std::uint8_t last_type = 255);

  // Splits the nodes into groups; nodes not named form one extra group together. Messages (and
  // connect attempts) between groups are dropped silently; existing connections stay "open", as a
  // real network partition looks to TCP until its timeouts fire.
  void partition(std::vector<std::vector<std::string>> groups);
  void heal();
  bool reachable(const std::string& from, const std::string& to) const;

  // Makes a node vanish like a crashed machine: its timers and pending events are dropped, its
  // handler is cleared and its own ends of connections turn closed without callbacks. The other
  // side learns only by its own timeouts (messages to it are silently dropped), unless reset is
  // true: then, like a kernel sending RST for a killed process, each peer end gets
  // on_closed("connection reset") after one latency.
  void kill(const std::string& addr, bool reset = false);
  // Brings a killed node back with no connections and no handler: call set_handler again (the
  // "restarted process"). Returns the node.
  SimTransport& revive(const std::string& addr);
  // Freezes a node like a stopped process (SIGSTOP): nothing of it runs (its timers, posted work,
  // deliveries to it, dials reaching it) but it keeps its connections, and what reaches it waits,
  // as in a socket buffer. resume() runs everything that waited, in order, from now (SIGCONT).
  // A kill while paused drops what waited. Unknown addresses throw std::invalid_argument.
  void pause(const std::string& addr);
  void resume(const std::string& addr);
  bool paused(const std::string& addr);
  // One node's own link, as a churn "link" event shapes a peer's network interface: a rate in
  // bytes per simulated second both ways (its messages leave at that rate, instead of the
  // network's uplink rate, and messages to it are delivered at that rate after their latency,
  // queued in the order they were sent), and a loss probability for every message it sends or
  // receives, on top of the network's (of the types set_loss names, all by default). Messages of
  // the other types (TCP traffic) are not dropped but slowed: each connection through a lossy
  // link carries them at the Mathis bound MSS / (RTT sqrt(2p/3)) (lossy_tcp_done). Nullopt
  // clears that part. Throws std::invalid_argument for
  // an unknown address, a rate <= 0 or a loss outside [0, 1].
  void set_link(const std::string& addr, std::optional<double> bytes_per_s,
                std::optional<double> loss);

  Millis now() const { return Millis(now_ms_.load()); }
  // Runs the next event (advancing the clock to it). False when the queue is empty.
  bool step();
  // Runs every event due at or before t, then sets the clock to t.
  void run_until(Millis t);
  void run_for(Millis d) { run_until(now() + d); }
  // Runs until no events are left or max_events ran; true when idle.
  bool run_until_idle(std::size_t max_events = 10'000'000);

  const SimStats& stats() const { return stats_; }
  SimRng& rng() { return rng_; }
  const SimOptions& options() const { return opts_; }

 private:
  friend class SimTransport;
  friend class SimConnection;
  static constexpr std::size_t kNoNode = static_cast<std::size_t>(-1);

  struct Event {
    Millis at;
    std::uint64_t seq;
    std::size_t node;  // owner whose generation must still match; kNoNode: always runs
    std::uint64_t gen;
    std::uint64_t timer;  // non-zero: cancellable timer id
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };

  std::uint64_t enqueue(Millis at, std::size_t node, std::uint64_t gen, std::function<void()> fn,
                        bool cancellable);
  void cancel_timer(std::uint64_t id);
  bool step_until(Millis limit);  // runs the next live event due at or before limit
  // The latency of one message (or SYN, FIN) from node a to node b: the link's, plus jitter.
  Millis one_way_delay(std::size_t a, std::size_t b);
  Millis link_latency(std::size_t a, std::size_t b) const;
  // When a message of `bytes` sent now by node a has left its uplink.
  Millis uplink_done(std::size_t a, std::size_t bytes);
  bool reachable_idx(std::size_t a, std::size_t b) const;
  bool lossy_type(std::uint8_t type) const;  // in the range set_loss names
  bool lossy(std::uint8_t type);
  // The combined loss of a's and b's own links (set_link); nullopt when neither has any.
  std::optional<double> link_loss(std::size_t a, std::size_t b) const;
  // set_link's loss of a's or b's link, for the types set_loss names.
  bool link_lossy(std::uint8_t type, std::size_t a, std::size_t b);
  Millis downlink_done(std::size_t b, Millis arrive, std::size_t bytes);
  // When a message of a type outside the lossy range (the TCP-like traffic), ready to go at
  // `ready`, has gone through connection c (from its owner to node b) when either end's link
  // loses packets: TCP retransmits, so the flow slows to the Mathis bound instead of dropping.
  Millis lossy_tcp_done(SimConnection& c, std::size_t b, std::uint8_t type, Millis ready,
                        std::size_t bytes);
  void do_connect(std::size_t from, const std::string& addr, Transport::ConnectCallback done);
  // Releases node n's closed connection ends, once their number has doubled since the last time
  // (amortized O(1) per connect: a node of a large swarm holds hundreds).
  static void prune(SimTransport& n);
  void report_closed(const std::shared_ptr<SimConnection>& c, const CloseCause& reason);
  std::string ephemeral_addr(const std::string& addr);

  SimOptions opts_;
  SimRng rng_;
  std::atomic<std::int64_t> now_ms_{0};
  std::deque<std::unique_ptr<SimTransport>> nodes_;
  std::unordered_map<std::string, std::size_t> by_addr_;
  std::vector<int> group_of_;  // per node; equal groups can talk. Empty: no partition
  int unnamed_group_ = 0;      // group of nodes not named in partition() (also later nodes)
  std::uint8_t loss_first_ = 0, loss_last_ = 255;
  std::uint32_t next_port_ = 40000;
  SimStats stats_;

  mutable std::mutex mu_;  // guards the queue and timer bookkeeping (post() is cross-thread)
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_timer_ = 1;
  std::unordered_set<std::uint64_t> pending_timers_;
  std::unordered_set<std::uint64_t> cancelled_;
  std::unordered_map<std::size_t, std::vector<Event>> held_;  // a paused node's events, in order
};

}  // namespace gossiptrain::net
