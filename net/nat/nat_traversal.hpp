// NAT traversal for the TCP transport (docs/nat.md): dial-backs (reverse connections and the
// reachability self-check, dial_back.cpp) and relays (relay.cpp), both carried by the transport's
// own messages (dial_back_messages.hpp). One object per TcpTransport, which it serves through
// NatHost; everything runs on the transport's io thread unless said otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "net/nat/dial_back_messages.hpp"
#include "net/secure/channel.hpp"
#include "net/secure/limits.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

struct NatConfig {
  // Reachability self-check (docs/nat.md): on our first outbound connection, ask that peer to
  // dial us back at our advertised address, and say in one info line whether it could (with the
  // fix when not). Off by default so that transport tests count only their own connections.
  bool reachability_check = false;
  // Relaying for peers that cannot be dialled (relay.cpp): the most bytes per second this peer
  // forwards for others, all relayed connections together; 0: it relays nothing.
  double relay_max_bytes_per_s = 25e6;
  // Tests only: sees (and may alter) every chunk of bytes this peer relays, as a hostile relay;
  // returns how many of its first bytes to forward (n: all, 0: the chunk is dropped).
  std::function<std::size_t(std::uint8_t* data, std::size_t n)> relay_tamper;
};

struct NatStats {
  // Dial-backs: connections we obtained by asking a peer that cannot be dialled to dial us
  // (reverse connections), and dial-backs we made for others.
  std::uint64_t reverse_connections = 0;
  std::uint64_t reverse_failures = 0;
  std::uint64_t dial_backs_served = 0;
  std::uint64_t dial_backs_refused = 0;  // over the rate bounds
  // Relays: connections we opened through a relay, and what we relayed for others.
  std::uint64_t relayed_connections = 0;
  std::uint64_t relay_failures = 0;
  std::uint64_t relays_served = 0;
  std::uint64_t relayed_bytes = 0;
};

// What the reachability self-check found (docs/nat.md).
enum class Reachability { Unknown, Reachable, Unreachable };

// What NAT traversal needs of the transport it serves (TcpTransport). Io thread.
class NatHost {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~NatHost() = default;
  // The transport: its identity, addresses and scheduler.
  virtual Transport& nat_transport() = 0;
  virtual Scheduler& nat_scheduler() = 0;
  // stop() has begun: no new connections.
  virtual bool nat_stopping() const = 0;
  // Open channels (handshaking and established).
  virtual const std::set<std::shared_ptr<Channel>>& nat_channels() const = 0;
  // A direct dial (no dial-back, no relay).
  virtual void nat_dial_direct(const std::string& addr, Transport::ConnectCallback done) = 0;
  // Makes a channel of a socket (inbound: this side responds to the handshake) and starts its
  // handshake, due by deadline; done, if any, gets the channel once established, or the error.
  virtual std::shared_ptr<Channel> nat_open_channel(asio::ip::tcp::socket sock, bool inbound,
                                                    bool relayed, Clock::time_point deadline,
                                                    Transport::ConnectCallback done) = 0;
  // An accepted socket, not yet known to be a channel or a relay's, is held (counted against the
  // connection limits as a channel) or released.
  virtual void nat_hold_socket(bool held) = 0;
};

class NatTraversal {
 public:
  using Clock = std::chrono::steady_clock;
  // config and limits are the transport's, and outlive this object.
  NatTraversal(NatHost& host, asio::io_context& io, const NatConfig& config, const Limits& limits);
  ~NatTraversal();
  NatTraversal(const NatTraversal&) = delete;
  NatTraversal& operator=(const NatTraversal&) = delete;

  // Transport::connect: a direct dial; a peer that cannot be dialled but is connected to us is
  // asked to dial us instead, and one that is not is reached through a relay.
  void connect(const std::string& addr, Transport::ConnectCallback done);
  // An accepted socket: a relay's raw connection (joined to its splice) or a channel (handed to
  // the host).
  void accept(asio::ip::tcp::socket sock);
  // A transport message (types kDialBackTypeFirst..Last), which never reaches the handler.
  void on_message(const std::shared_ptr<Channel>& ch, std::uint8_t type, const Bytes& payload);
  void on_established(const std::shared_ptr<Channel>& ch);
  // The established channel ch closed (on_closed), or a channel is gone (established or not).
  void on_closed(const std::shared_ptr<Channel>& ch, const CloseCause& cause);
  void on_gone(const std::shared_ptr<Channel>& ch, const CloseCause& cause);
  // stop(): closes the splices this peer relays, and with cancel_pending also forgets the
  // connects in flight (their callbacks are not called).
  void stop(bool cancel_pending);

  NatStats stats() const;  // any thread
  // What the reachability self-check found so far; any thread.
  Reachability reachability() const { return static_cast<Reachability>(reachability_.load()); }
  // Whether connect(addr) goes straight to a reverse connection (the peer said it cannot be
  // dialled, or a direct dial failed lately).
  bool known_undialable(const std::string& addr);

 private:
  using ConnectCallback = Transport::ConnectCallback;
  using TimerId = Scheduler::TimerId;

  // Dial-backs and the reachability self-check (dial_back.cpp).
  struct PendingReverse {
    std::string peer;
    ConnectCallback done;
    TimerId timer = 0;
  };
  std::shared_ptr<Channel> channel_advertising(const std::string& addr) const;
  void reverse_connect(const std::shared_ptr<Channel>& via, ConnectCallback done);
  void finish_reverse(std::uint64_t nonce, ConnectionPtr c, const std::string& err);
  void serve_dial_back(const std::shared_ptr<Channel>& ch, DialBackPurpose purpose,
                       std::uint64_t nonce);
  void start_self_check(const std::shared_ptr<Channel>& ch);
  void self_check_result(const std::string& checker, bool ok, const std::string& reason);
  void send_reachability(const std::shared_ptr<Channel>& ch);

  // Relays (relay.cpp).
  struct PendingRelay {
    std::string addr;
    ConnectCallback done;
    std::vector<std::weak_ptr<Channel>> candidates;  // relays still to try, last first
    std::string relay_peer, relay_addr;
    TimerId timer = 0;
    std::string last_error;
  };
  struct Splice;
  void relay_connect(const std::string& addr, CloseCause error, ConnectCallback done);
  void relay_try_next(std::uint64_t nonce);
  void relay_answer(std::uint64_t nonce, bool ok, const std::string& reason);
  void serve_relay_ask(const std::shared_ptr<Channel>& ch, const RelayAsk& m);
  void serve_relay_dial(const std::shared_ptr<Channel>& ch, std::uint64_t nonce);
  asio::awaitable<void> open_relayed(std::string relay_addr, std::string relay_peer,
                                     std::uint64_t nonce, std::uint8_t side, ConnectCallback done);
  asio::awaitable<void> sniff(std::shared_ptr<asio::ip::tcp::socket> sock);
  void splice_arrived(std::uint64_t nonce, std::uint8_t side,
                      std::shared_ptr<asio::ip::tcp::socket> sock);
  asio::awaitable<void> pipe(std::shared_ptr<Splice> sp, int from);
  void relayed_closed(const std::shared_ptr<Channel>& ch, const CloseCause& cause);
  void close_splices();

  Scheduler& sched() const { return host_.nat_scheduler(); }
  const std::string& local_id() const { return host_.nat_transport().local_id(); }
  const std::string& listen_addr() const { return host_.nat_transport().listen_addr(); }
  const std::string& advertised_addr() const { return host_.nat_transport().advertised_addr(); }

  NatHost& host_;
  asio::io_context& io_;
  const NatConfig& config_;
  const Limits& limits_;

  std::map<std::uint64_t, PendingReverse> pending_reverse_;
  std::map<std::string, Clock::time_point> undialable_;  // addr -> until
  std::map<std::string, int> serving_;                   // requester -> dial-backs in flight for it
  int serving_total_ = 0;
  std::map<std::string, Clock::time_point> last_check_served_;
  std::uint64_t check_nonce_ = 0;  // the self-check in flight, 0: none
  int check_attempts_ = 0;
  bool check_done_ = false;
  std::atomic<int> reachability_{0};

  std::map<std::uint64_t, PendingRelay> pending_relay_;
  std::map<std::uint64_t, std::shared_ptr<Splice>> splices_;
  std::map<Channel*, std::string> relay_of_;  // our relayed channels -> their relay's peer id
  std::map<std::string, Clock::time_point> bad_relays_;
  Clock::time_point relay_next_free_{};

  mutable std::mutex stats_mu_;
  NatStats stats_;
};

}  // namespace gossiptrain::net
