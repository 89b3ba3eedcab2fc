// TcpTransport: accept loop, dialing, limits, channel bookkeeping and the Asio-timer Scheduler.
#include "net/tcp/tcp_transport.hpp"

#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>

#include <vector>

#include "base/thread.hpp"
#include "net/socket/dial.hpp"

namespace gossiptrain::net {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::chrono::milliseconds kAcceptErrorBackoffMs{50};
constexpr std::chrono::milliseconds kStopPollMs{5};
constexpr std::chrono::milliseconds kStopSlackMs{200};

void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

std::string endpoint_str(const asio::ip::tcp::endpoint& ep) {
  auto a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

}  // namespace

TcpTransport::TcpTransport(TcpTransportConfig config)
    : config_(std::move(config)),
      io_(std::make_shared<asio::io_context>()),
      acceptor_(*io_),
      epoch_(std::chrono::steady_clock::now()) {
  crypto::init();
  if (!config_.identity) throw ConfigError("tcp transport: no identity");
  config_.limits.validate();
  if (aead_mask(config_.aead) == 0)
    throw ConfigError("tcp transport: AES-256-GCM required but not available on this CPU");
  if (config_.advertise.size() > kMaxAddrBytes)
    throw ConfigError("tcp transport: advertised address too long");
  if (config_.thread_nice < 0 || config_.thread_nice > 19)
    throw ConfigError("tcp transport: thread_nice must be 0..19");
  std::string h;
  std::uint16_t p;
  if (!config_.listen.empty() && !split_host_port(config_.listen, h, p))
    throw ConfigError("tcp transport: bad listen address '" + config_.listen + "' (host:port)");
  if (!config_.listen.empty() && config_.advertise.empty() && is_wildcard_host(h))
    throw ConfigError("tcp transport: listening on the wildcard address " + config_.listen +
                      " needs an advertised address that other machines can dial");
  if (!config_.advertise.empty() && !dialable_addr(config_.advertise))
    throw ConfigError("tcp transport: advertised address '" + config_.advertise +
                      "' is not one another machine can dial (host:port, no wildcard, port > 0)");
  if (config_.crypto_threads > kMaxCryptoThreads)
    throw ConfigError("tcp transport: crypto_threads must be 0.." +
                      std::to_string(kMaxCryptoThreads));
  local_id_ = config_.identity->peer_id();
  options_ = std::make_shared<ChannelOptions>();
  options_->limits = config_.limits;
  options_->handshake.identity = config_.identity.get();
  options_->handshake.network_key = config_.network_key;
  options_->handshake.allowlist = config_.allowlist ? &*config_.allowlist : nullptr;
  options_->handshake.fingerprint = config_.model_fingerprint;
  options_->handshake.aead = config_.aead;
  crypto::random_bytes(std::span(reinterpret_cast<std::uint8_t*>(&options_->handshake.instance),
                                 sizeof options_->handshake.instance));
  options_->parallel_min_message_bytes = config_.crypto_min_message_bytes;
  nat_ = std::make_unique<NatTraversal>(static_cast<NatHost&>(*this), *io_, config_.nat,
                                        config_.limits);
}

TcpTransport::~TcpTransport() { stop(); }

void TcpTransport::start() {
  if (started_) throw std::logic_error("TcpTransport::start called twice");
  if (!config_.listen.empty()) {
    std::string host;
    std::uint16_t port = 0;
    split_host_port(config_.listen, host, port);
    std::error_code ec;
    asio::ip::tcp::resolver resolver(*io_);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty())
      throw ConfigError("tcp transport: cannot resolve listen host '" + host +
                        "': " + ec.message());
    asio::ip::tcp::endpoint ep = *results.begin();
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec == asio::error::address_in_use)
      throw ConfigError("tcp transport: cannot listen on " + config_.listen +
                        ": the port is in use (another peer or job on this host?): pick another "
                        "--listen port, or --base-port under --cluster");
    if (ec)
      throw ConfigError("tcp transport: cannot listen on " + config_.listen + ": " + ec.message());
    listen_addr_ = endpoint_str(acceptor_.local_endpoint());
    asio::co_spawn(*io_, accept_loop(), rethrow);
  }
  advertised_addr_ = config_.advertise.empty() ? listen_addr_ : config_.advertise;
  if (advertised_addr_.size() > kMaxAddrBytes)
    throw ConfigError("tcp transport: listen address too long");
  options_->handshake.listen_addr = advertised_addr_;
  // The channels hold the pool through options_: it outlives every channel that uses it.
  if (config_.crypto_threads > 1)
    options_->crypto_pool = std::make_shared<CryptoPool>(config_.crypto_threads,
                                                         config_.thread_nice, config_.thread_cpus);
  started_ = true;
  work_.emplace(io_->get_executor());
  auto done = std::make_shared<std::promise<void>>();
  thread_done_ = done->get_future();
  thread_ = std::thread([this, done] {
    io_thread_id_ = std::this_thread::get_id();
    std::string err;
    if (!base::lower_this_thread_priority(config_.thread_nice, &err))
      spdlog::warn("net: could not lower the network thread's priority: {}", err);
    if (!base::pin_this_thread(config_.thread_cpus, &err))
      spdlog::warn("net: could not pin the network thread to its cores: {}", err);
    try {
      io_->run();
    } catch (const std::exception& e) {
      spdlog::critical("net: io thread: uncaught exception (a bug): {}", e.what());
      throw;
    }
    done->set_value();
  });
  spdlog::info("net: peer {} listening on {}", local_id_,
               listen_addr_.empty() ? "-" : listen_addr_);
}

void TcpTransport::stop() {
  if (!started_ || stopped_) return;
  if (on_io_thread()) throw std::logic_error("TcpTransport::stop called on the io thread");
  stopped_ = true;
  if (const auto st = nat_->stats();
      st.relayed_bytes || st.relayed_connections || st.reverse_connections)
    spdlog::info("net: peers behind NAT: {} reverse connections, {} of ours through relays ({} "
                 "failed); relayed {} connections, {:.1f} MB, for others",
                 st.reverse_connections, st.relayed_connections, st.relay_failures,
                 st.relays_served, st.relayed_bytes / 1e6);
  asio::post(*io_, [this] {
    stopping_ = true;
    std::error_code ec;
    acceptor_.close(ec);
    for (auto& [id, t] : timers_) t->cancel();
    timers_.clear();
    std::vector<std::shared_ptr<Channel>> all(channels_.begin(), channels_.end());
    for (auto& ch : all) ch->shutdown({CloseReason::Shutdown});
    nat_->stop(false);
    asio::co_spawn(
        *io_,
        [this]() -> asio::awaitable<void> {
          asio::steady_timer t(*io_);
          auto until =
              std::chrono::steady_clock::now() + config_.limits.close_linger + kStopSlackMs;
          while (!channels_.empty() && std::chrono::steady_clock::now() < until) {
            t.expires_after(kStopPollMs);
            co_await t.async_wait(kUseTuple);
          }
          // Whatever is left is cut; then run() returns once the aborted operations have finished,
          // so no coroutine (holding a channel) stays queued in the io_context.
          std::vector<std::shared_ptr<Channel>> left(channels_.begin(), channels_.end());
          for (auto& ch : left) ch->terminate({CloseReason::Shutdown});
          pending_connects_.clear();
          nat_->stop(true);
          work_.reset();
        },
        rethrow);
  });
  // A dial still waiting for TCP connect could keep run() busy up to its deadline: cut it short.
  if (thread_done_.wait_for(config_.limits.close_linger + kStopSlackMs * 5) !=
      std::future_status::ready)
    io_->stop();
  thread_.join();
  handler_ = nullptr;
  channels_.clear();
  pending_connects_.clear();
  nat_->stop(true);
  channel_count_ = 0;
}

std::size_t TcpTransport::handshaking() const {
  std::size_t n = 0;
  for (auto& ch : channels_) n += ch->established() ? 0 : 1;
  return n;
}

asio::awaitable<void> TcpTransport::accept_loop() {
  asio::steady_timer backoff(*io_);
  for (;;) {
    auto [ec, sock] = co_await acceptor_.async_accept(kUseTuple);
    if (stopping_ || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      spdlog::warn("net: accept failed: {}", ec.message());
      backoff.expires_after(kAcceptErrorBackoffMs);  // e.g. out of file descriptors
      co_await backoff.async_wait(kUseTuple);
      continue;
    }
    std::string reason;
    if (channels_.size() + sniffing_ >= config_.limits.max_connections)
      reason = "connection limit reached";
    else if (handshaking() + sniffing_ >= config_.limits.max_handshakes_in_flight)
      reason = "too many handshakes in flight";
    {
      std::lock_guard lk(stats_mu_);
      ++stats_.accepted;
      if (!reason.empty()) ++stats_.refused;
    }
    if (!reason.empty()) {
      std::error_code e2;
      std::string addr = endpoint_str(sock.remote_endpoint(e2));
      spdlog::warn("net: refused connection from {}: {}", addr, reason);
      if (config_.on_handshake_failed) config_.on_handshake_failed(addr, reason);
      sock.close(e2);
      continue;
    }
    // A relay's raw connection or a channel: the first bytes tell (net/nat/relay.cpp).
    nat_->accept(std::move(sock));
  }
}

std::shared_ptr<Channel> TcpTransport::open_channel(asio::ip::tcp::socket sock, bool inbound,
                                                    bool relayed,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    ConnectCallback done) {
  auto ch = std::make_shared<Channel>(io_, std::move(sock), inbound, options_, channel_host());
  if (relayed) ch->set_relayed();
  channels_.insert(ch);
  ++channel_count_;
  if (done) pending_connects_[ch.get()] = std::move(done);
  ch->start(deadline);
  return ch;
}

void TcpTransport::nat_hold_socket(bool held) {
  if (held) {
    ++sniffing_;
    ++channel_count_;
    return;
  }
  --sniffing_;
  // (stop() zeroes the count; a socket released after it must not wrap it around.)
  if (auto c = channel_count_.load(); c > 0) channel_count_ = c - 1;
}

void TcpTransport::connect(const std::string& addr, ConnectCallback done) {
  // A peer that cannot be dialled is asked to dial us instead, or reached through a relay.
  asio::post(*io_, [this, addr, done = std::move(done)]() mutable {
    nat_->connect(addr, std::move(done));
  });
}

void TcpTransport::dial_direct(const std::string& addr, ConnectCallback done) {
  asio::co_spawn(*io_, dial(addr, std::move(done)), rethrow);
}

asio::awaitable<void> TcpTransport::dial(std::string addr, ConnectCallback done) {
  auto refuse = [&](const std::string& reason) {
    if (const auto held = connect_warnings_.admit(addr, std::chrono::steady_clock::now())) {
      spdlog::warn("net: connect to {} failed: {}{}", addr, reason,
                   *held ? fmt::format(" ({} more failures since the last warning; repeats "
                                       "within {} s are logged at debug)",
                                       *held,
                                       std::chrono::duration_cast<std::chrono::seconds>(
                                           connect_warnings_.quiet())
                                           .count())
                         : std::string());
    } else {
      spdlog::debug("net: connect to {} failed: {}", addr, reason);
    }
    {
      std::lock_guard lk(stats_mu_);
      ++stats_.handshake_failures;
    }
    if (done) done(nullptr, CloseCause{CloseReason::Unspecified, reason});
  };
  if (stopping_) co_return refuse("transport stopped");
  if (channels_.size() >= config_.limits.max_connections)
    co_return refuse("connection limit reached");
  if (handshaking() >= config_.limits.max_handshakes_in_flight)
    co_return refuse("too many handshakes in flight");
  std::string host;
  std::uint16_t port = 0;
  if (!split_host_port(addr, host, port)) co_return refuse("bad address (expected host:port)");
  const auto deadline = std::chrono::steady_clock::now() + config_.limits.handshake_timeout;
  auto dialed = co_await connect_within(*io_, host, port, deadline);
  if (!dialed.sock) co_return refuse(dialed.error);
  if (stopping_) co_return refuse("transport stopped");
  open_channel(std::move(*dialed.sock), false, false, deadline, std::move(done));
}

void TcpTransport::channel_established(const std::shared_ptr<Channel>& ch) {
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.established;
  }
  spdlog::info("net: connected {} {} ({}, {})", ch->peer_id(), ch->remote_addr(),
               ch->inbound() ? "inbound" : "outbound", crypto::aead_name(ch->aead()));
  if (handler_) handler_->on_connection(ch, ch->inbound());
  nat_->on_established(ch);
  auto it = pending_connects_.find(ch.get());
  if (it != pending_connects_.end()) {
    auto cb = std::move(it->second);
    pending_connects_.erase(it);
    if (cb) cb(ch, {});
  }
}

void TcpTransport::channel_message(const std::shared_ptr<Channel>& ch, std::uint8_t type,
                                   Bytes&& payload) {
  if (type >= kDialBackTypeFirst && type <= kDialBackTypeLast) {
    nat_->on_message(ch, type, payload);
    return;
  }
  if (handler_) handler_->on_message(ch, type, std::move(payload));
}

void TcpTransport::channel_report_closed(const std::shared_ptr<Channel>& ch,
                                         const CloseCause& reason) {
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.closed;
    ++stats_.closed_by_reason[static_cast<std::size_t>(reason.reason)];
  }
  spdlog::info("net: connection {} {} closed [{}]: {}", ch->peer_id(), ch->remote_addr(),
               close_reason_name(reason.reason), reason);
  nat_->on_closed(ch, reason);
  if (handler_) handler_->on_closed(ch, reason);
}

CloseCause TcpTransport::shared_identity_reason(const std::shared_ptr<Channel>& ch) {
  // The clone's own listen address (its hello is signed): an inbound one's source port says
  // nothing.
  const std::string addr =
      ch->remote_listen_addr().empty() ? ch->remote_addr() : ch->remote_listen_addr();
  const std::string text = fmt::format(
      "another peer at {} uses this peer's identity key{}; give each peer its own --identity (or "
      "run each peer in its own folder)",
      addr, config_.identity_file.empty() ? "" : " (" + config_.identity_file + ")");
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.shared_identity;
  }
  if (shared_identity_told_.size() < kMaxSharedIdentityAddrs &&
      shared_identity_told_.insert(addr).second) {
    spdlog::error("net: {}", text);
    if (config_.on_shared_identity) config_.on_shared_identity(addr);
  } else {
    spdlog::debug("net: {}", text);
  }
  return CloseCause{CloseReason::SharedIdentity, text};
}

void TcpTransport::channel_gone(const std::shared_ptr<Channel>& ch, const CloseCause& why) {
  if (channels_.erase(ch)) --channel_count_;
  nat_->on_gone(ch, why);
  if (ch->established()) return;
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.handshake_failures;
  }
  // Another process with our key: an error with the fix, once per address, instead of the warning.
  const bool clone = why.reason == CloseReason::SharedIdentity;
  const CloseCause reason = clone ? shared_identity_reason(ch) : why;
  if (!clone)
    spdlog::warn("net: handshake with {}{} failed: {}", ch->remote_addr(),
                 ch->peer_id().empty() ? "" : " (" + ch->peer_id() + ")", reason);
  if (config_.on_handshake_failed) config_.on_handshake_failed(ch->remote_addr(), reason.text());
  auto it = pending_connects_.find(ch.get());
  if (it != pending_connects_.end()) {
    auto cb = std::move(it->second);
    pending_connects_.erase(it);
    if (cb) cb(nullptr, reason);
  }
}

TcpTransportStats TcpTransport::stats() const {
  TcpTransportStats s;
  {
    std::lock_guard lk(stats_mu_);
    s = stats_;
  }
  s.nat = nat_->stats();
  return s;
}

Millis TcpTransport::now() const {
  return std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - epoch_);
}

Scheduler::TimerId TcpTransport::schedule(Millis delay, std::function<void()> fn) {
  TimerId id = next_timer_++;
  auto arm = [this, id, delay, fn = std::move(fn)]() mutable {
    if (stopping_) return;
    auto t = std::make_unique<asio::steady_timer>(*io_, delay);
    auto* tp = t.get();
    timers_[id] = std::move(t);
    tp->async_wait([this, id, fn = std::move(fn)](std::error_code ec) {
      if (ec) return;
      auto it = timers_.find(id);
      if (it == timers_.end()) return;
      timers_.erase(it);
      fn();
    });
  };
  if (on_io_thread()) arm();
  else asio::post(*io_, std::move(arm));
  return id;
}

void TcpTransport::cancel(TimerId id) {
  auto do_cancel = [this, id] {
    auto it = timers_.find(id);
    if (it == timers_.end()) return;
    it->second->cancel();
    timers_.erase(it);
  };
  if (on_io_thread()) do_cancel();
  else asio::post(*io_, do_cancel);
}

void TcpTransport::post(std::function<void()> fn) { asio::post(*io_, std::move(fn)); }

}  // namespace gossiptrain::net
