// The TCP Transport + Scheduler: encrypted channels (net/secure/channel.hpp) on one asio::io_context that runs
// on the transport's own thread, the protocol thread.
//
// Threading: start() spawns the io thread; every TransportHandler callback, connect callback and
// timer runs on it. post() may be called from any thread; connect(), schedule() and cancel() too
// (they hop onto the io thread). Connection methods must be called on the io thread (i.e. from
// callbacks or posted functions). stop() must be called from another thread (it joins the io
// thread); the destructor calls it.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "net/nat/nat_traversal.hpp"
#include "net/repeat_limiter.hpp"
#include "net/secure/channel.hpp"
#include "net/secure/identity.hpp"
#include "net/secure/limits.hpp"
#include "net/socket/address.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

struct TcpTransportConfig {
  std::string listen = "127.0.0.1:0";  // host:port to bind; port 0 picks a free one
  // Address announced to peers; default: listen_addr(). Required when listen is a wildcard
  // address (0.0.0.0, ::), which no other machine can dial.
  std::string advertise;
  std::shared_ptr<const Identity> identity;  // required
  // Where the identity was read from, named in the error about another peer using it; empty:
  // not named.
  std::string identity_file;
  std::optional<crypto::SymKey> network_key;
  std::optional<Allowlist> allowlist;
  std::uint64_t model_fingerprint = 0;
  Limits limits;
  AeadPreference aead = AeadPreference::Auto;
  // The io thread runs this many nice levels (0..19) below the thread that calls start(), so that
  // a busy training loop keeps the CPU and exchanges take what it leaves (Linux; a warning
  // elsewhere).
  int thread_nice = 0;
  // Cores the io thread (and any thread it starts) runs on; empty: wherever the scheduler puts it
  // (core::CpuPlan::net, computed by the app).
  std::vector<int> thread_cpus;
  // Crypto threads (net/secure/crypto_pool.hpp): workers that seal and open the frames of messages of at
  // least crypto_min_message_bytes; 0 or 1: none, the io thread does all of it. They run at the
  // io thread's priority (thread_nice).
  unsigned crypto_threads = default_crypto_threads();
  std::size_t crypto_min_message_bytes = kParallelMinMessageBytes;
  // Peers behind NAT (net/nat/nat_traversal.hpp): the reachability self-check and relaying.
  NatConfig nat;
  // Optional observer of failed handshakes and refused sockets (metrics, tests), with the reason's
  // text as logged; io thread.
  std::function<void(const std::string& remote_addr, const std::string& reason)>
      on_handshake_failed;
  // Called once per address (the first kMaxSharedIdentityAddrs) of a live peer that proved it
  // holds our identity key (close reason shared_identity), after the error line; io thread.
  std::function<void(const std::string& addr)> on_shared_identity;
};

// Addresses whose clash of identity keys is logged at error level (then debug): a bound.
inline constexpr std::size_t kMaxSharedIdentityAddrs = 16;

struct TcpTransportStats {
  std::uint64_t accepted = 0;     // sockets accepted
  std::uint64_t refused = 0;      // dropped at once by the connection/handshake limits
  std::uint64_t established = 0;  // handshakes completed
  std::uint64_t handshake_failures = 0;
  // Handshakes refused because the remote holds our identity key (among handshake_failures).
  std::uint64_t shared_identity = 0;
  std::uint64_t closed = 0;        // established connections closed
  CloseCounts closed_by_reason{};  // the same, by CloseReason
  NatStats nat;                    // dial-backs and relays
};

class TcpTransport : public Transport, public Scheduler, private ChannelHost, private NatHost {
 public:
  // Validates the configuration (ConfigError on bad values).
  explicit TcpTransport(TcpTransportConfig config);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  // Binds and listens (ConfigError if the address is bad or taken), then starts the io thread.
  void start();
  // Closes every connection with reason "shutdown" (close frames sent within the close linger),
  // stops the io thread and joins it. Idempotent. Not from the io thread.
  void stop();

  // Transport.
  void set_handler(TransportHandler* h) override { handler_ = h; }
  Scheduler& scheduler() override { return *this; }
  const std::string& local_id() const override { return local_id_; }
  const std::string& listen_addr() const override { return listen_addr_; }
  const std::string& advertised_addr() const override { return advertised_addr_; }
  void connect(const std::string& addr, ConnectCallback done) override;
  BufferPool& buffers() override { return *options_->buffers; }

  // Scheduler.
  Millis now() const override;
  TimerId schedule(Millis delay, std::function<void()> fn) override;
  void cancel(TimerId id) override;
  void post(std::function<void()> fn) override;

  TcpTransportStats stats() const;
  // What the reachability self-check found so far; any thread.
  Reachability reachability() const { return nat_->reachability(); }
  // Whether connect(addr) goes straight to a reverse connection (the peer said it cannot be
  // dialled, or a direct dial failed lately). Io thread only (tests: through post()).
  bool known_undialable(const std::string& addr) { return nat_->known_undialable(addr); }
  // Open channels (handshaking + established); any thread.
  std::size_t channel_count() const { return channel_count_.load(); }
  const TcpTransportConfig& config() const { return config_; }
  // Threads that seal and open the frames of a large message: the pool's workers, or 1 (the io
  // thread) without a pool.
  unsigned crypto_threads() const {
    return config_.crypto_threads > 1 ? config_.crypto_threads : 1;
  }
  // Frames or runs of frames the crypto threads have sealed or opened; any thread.
  std::uint64_t crypto_tasks_run() const {
    return options_->crypto_pool ? options_->crypto_pool->tasks_run() : 0;
  }

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> dial(std::string addr, ConnectCallback done);
  void channel_established(const std::shared_ptr<Channel>& ch) override;
  void channel_message(const std::shared_ptr<Channel>& ch, std::uint8_t type,
                       Bytes&& payload) override;
  void channel_report_closed(const std::shared_ptr<Channel>& ch, const CloseCause& reason) override;
  void channel_gone(const std::shared_ptr<Channel>& ch, const CloseCause& reason) override;
  // A handshake refused as shared_identity: counts it, logs the fix (once per address) and
  // returns the close reason's text with the remote's address and our identity file.
  CloseCause shared_identity_reason(const std::shared_ptr<Channel>& ch);
  ChannelHost& channel_host() { return *this; }
  bool on_io_thread() const { return std::this_thread::get_id() == io_thread_id_.load(); }
  std::size_t handshaking() const;
  void dial_direct(const std::string& addr, ConnectCallback done);
  // A channel over sock, counted and started (handshake due by deadline); done, if any, gets the
  // connect result.
  std::shared_ptr<Channel> open_channel(asio::ip::tcp::socket sock, bool inbound, bool relayed,
                                        std::chrono::steady_clock::time_point deadline,
                                        ConnectCallback done);

  // NatHost.
  Transport& nat_transport() override { return *this; }
  Scheduler& nat_scheduler() override { return *this; }
  bool nat_stopping() const override { return stopping_; }
  const std::set<std::shared_ptr<Channel>>& nat_channels() const override { return channels_; }
  void nat_dial_direct(const std::string& addr, ConnectCallback done) override {
    dial_direct(addr, std::move(done));
  }
  std::shared_ptr<Channel> nat_open_channel(asio::ip::tcp::socket sock, bool inbound, bool relayed,
                                            std::chrono::steady_clock::time_point deadline,
                                            ConnectCallback done) override {
    return open_channel(std::move(sock), inbound, relayed, deadline, std::move(done));
  }
  void nat_hold_socket(bool held) override;

  // Peers behind NAT. Built in the constructor (it holds config_'s parts); destroyed after io_.
  std::unique_ptr<NatTraversal> nat_;
  std::size_t sniffing_ = 0;  // accepted sockets nat_ holds (nat_hold_socket)

  TcpTransportConfig config_;
  std::shared_ptr<ChannelOptions> options_;
  std::string local_id_;
  std::string listen_addr_;
  std::string advertised_addr_;
  TransportHandler* handler_ = nullptr;

  // Shared with the channels (see Channel): it outlives every Connection the application holds.
  std::shared_ptr<asio::io_context> io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  std::future<void> thread_done_;
  std::atomic<std::thread::id> io_thread_id_{};
  std::chrono::steady_clock::time_point epoch_;
  bool started_ = false;
  bool stopped_ = false;
  bool stopping_ = false;  // io thread: no new connections

  // io thread only.
  std::set<std::shared_ptr<Channel>> channels_;
  std::map<Channel*, ConnectCallback> pending_connects_;
  std::map<TimerId, std::unique_ptr<asio::steady_timer>> timers_;
  std::atomic<TimerId> next_timer_{1};
  std::atomic<std::size_t> channel_count_{0};

  mutable std::mutex stats_mu_;
  RepeatLimiter connect_warnings_;              // a failed dial warns once per address per 30 s
  std::set<std::string> shared_identity_told_;  // addresses of clones, logged once (io thread)
  TcpTransportStats stats_;
};

}  // namespace gossiptrain::net
