// NatTraversal's relays (docs/nat.md): two peers that cannot dial each other (behind different
// NATs) talk through a third, reachable one. The relay only splices two raw TCP connections; the
// two endpoints run an ordinary channel through it (handshake, then AEAD frames), so the relay
// sees ciphertext only and can drop, delay or corrupt bytes but never read, forge or replay a
// message: the channel's authentication closes the connection with its reason, and the asker
// takes another relay next time.
//
//   A (asker)                       R (relay)                          B (target)
//   RelayAsk{n, B's address} ->     finds B's connection to it
//                                   RelayDial{n}  ->                   dials R: preamble(n, 1)
//   <- Result{n, ok}                                                   channel as responder
//   dials R: preamble(n, 0)         splices the two sockets
//   channel as initiator  <======== ciphertext, rate-bounded =========>
#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include "base/short_id.hpp"
#include "net/close_reason.hpp"
#include "net/nat/nat_detail.hpp"
#include "net/nat/nat_traversal.hpp"
#include "net/socket/address.hpp"
#include "net/socket/dial.hpp"

namespace gossiptrain::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::size_t kMaxRelayTries = 3;
constexpr std::size_t kMaxPendingRelay = 64;
constexpr std::size_t kMaxSplices = 32;
constexpr std::size_t kPipeChunk = 64 * 1024;
// A relay whose relayed connection failed (authentication, truncation, silence) is not asked again
// for this long.
constexpr std::chrono::seconds kBadRelayFor{60};

void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

using nat_detail::random_nonce;
using nat_detail::shared;
using base::short_id;

// A relayed channel that ended like this points at its relay (or the path through it), not at a
// normal close by either endpoint.
bool relay_suspect(const CloseCause& cause) {
  switch (cause.reason) {
    case CloseReason::ProtocolViolation:
    case CloseReason::Truncated:
    case CloseReason::Timeout:  // idle, or a handshake that never completed through it
    case CloseReason::HandshakeFailed:
    case CloseReason::IoError:
    case CloseReason::FrameError: return true;
    default: return false;
  }
}

}  // namespace

struct NatTraversal::Splice {
  std::string asker, target;  // peer ids
  std::shared_ptr<asio::ip::tcp::socket> side[2];
  TimerId timer = 0;
  int pipes = 0;
  bool started = false;
  void close() {
    std::error_code ec;
    for (auto& s : side)
      if (s) s->close(ec);
  }
};

void NatTraversal::close_splices() {
  for (auto& [n, sp] : splices_) sp->close();
  splices_.clear();
}

// ------------------------------------------------------------------------------------------------
// The asker

void NatTraversal::relay_connect(const std::string& addr, CloseCause error, ConnectCallback done) {
  const auto now = Clock::now();
  std::vector<std::weak_ptr<Channel>> cands;
  for (const auto& ch : host_.nat_channels()) {
    if (!ch->is_open() || ch->relayed() || ch->remote_listen_addr() == addr) continue;
    // A relay must be dialable: we dialled it ourselves (so we can dial it again).
    if (ch->inbound()) continue;
    auto bad = bad_relays_.find(ch->peer_id());
    if (bad != bad_relays_.end() && bad->second > now) continue;
    if (std::any_of(cands.begin(), cands.end(),
                    [&](const auto& w) { return w.lock()->peer_id() == ch->peer_id(); }))
      continue;
    cands.push_back(ch);
  }
  if (cands.empty() || pending_relay_.size() >= kMaxPendingRelay || host_.nat_stopping()) {
    if (done) done(nullptr, error);
    return;
  }
  std::shuffle(cands.begin(), cands.end(), std::mt19937_64(random_nonce()));
  if (cands.size() > kMaxRelayTries) cands.resize(kMaxRelayTries);
  const std::uint64_t nonce = random_nonce();
  auto& p = pending_relay_[nonce];
  p.addr = addr;
  p.done = std::move(done);
  p.candidates = std::move(cands);
  p.last_error = error.text();
  relay_try_next(nonce);
}

void NatTraversal::relay_try_next(std::uint64_t nonce) {
  auto it = pending_relay_.find(nonce);
  if (it == pending_relay_.end()) return;
  auto& p = it->second;
  sched().cancel(p.timer);
  while (!p.candidates.empty()) {
    auto relay = p.candidates.back().lock();
    p.candidates.pop_back();
    if (!relay || !relay->is_open()) continue;
    if (!relay->send(static_cast<std::uint8_t>(DialBackType::RelayAsk),
                     shared(encode(RelayAsk{nonce, p.addr}))))
      continue;
    p.relay_peer = relay->peer_id();
    p.relay_addr = relay->remote_listen_addr();
    p.timer = sched().schedule(limits_.handshake_timeout, [this, nonce] {
      auto it = pending_relay_.find(nonce);
      if (it == pending_relay_.end()) return;
      it->second.last_error = "relay " + short_id(it->second.relay_peer) + " did not answer";
      relay_try_next(nonce);
    });
    return;
  }
  auto done = std::move(p.done);
  const std::string err = "no relay could reach it (last: " + p.last_error + ")";
  pending_relay_.erase(it);
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.relay_failures;
  }
  if (done) done(nullptr, CloseCause{CloseReason::Unspecified, err});
}

void NatTraversal::relay_answer(std::uint64_t nonce, bool ok, const std::string& reason) {
  auto it = pending_relay_.find(nonce);
  if (it == pending_relay_.end()) return;
  if (!ok) {
    it->second.last_error = "relay " + short_id(it->second.relay_peer) + ": " + reason;
    return relay_try_next(nonce);
  }
  auto p = std::move(it->second);
  pending_relay_.erase(it);
  sched().cancel(p.timer);
  asio::co_spawn(io_, open_relayed(p.relay_addr, p.relay_peer, nonce, 0, std::move(p.done)),
                 rethrow);
}

// Both endpoints: a raw connection to the relay, the preamble, then an ordinary channel over it
// (side 0 initiates the handshake, side 1 responds).
asio::awaitable<void> NatTraversal::open_relayed(std::string relay_addr, std::string relay_peer,
                                                 std::uint64_t nonce, std::uint8_t side,
                                                 ConnectCallback done) {
  auto fail = [&](const std::string& why) {
    {
      std::lock_guard lk(stats_mu_);
      ++stats_.relay_failures;
    }
    spdlog::debug("net: relayed connection via {} failed: {}", short_id(relay_peer), why);
    if (done)
      done(nullptr, CloseCause{CloseReason::Unspecified,
                               "relayed connection via " + short_id(relay_peer) + ": " + why});
  };
  std::string host;
  std::uint16_t port = 0;
  if (host_.nat_stopping()) co_return fail("transport stopped");
  if (host_.nat_channels().size() >= limits_.max_connections)
    co_return fail("connection limit reached");
  if (!split_host_port(relay_addr, host, port)) co_return fail("bad relay address");
  const auto deadline = Clock::now() + limits_.handshake_timeout;
  // The preamble is written under the same deadline.
  auto dialed = co_await connect_within(io_, host, port, deadline, relay_preamble(nonce, side));
  if (!dialed.sock) co_return fail(dialed.error);
  if (host_.nat_stopping()) co_return fail("transport stopped");
  auto& sock = dialed.sock;
  // The asker's done waits for the handshake; the target's is told at once.
  auto ch = host_.nat_open_channel(std::move(*sock), side == 1, true, deadline,
                                   side == 0 ? std::move(done) : ConnectCallback{});
  relay_of_[ch.get()] = relay_peer;
  if (side == 0) {
    std::lock_guard lk(stats_mu_);
    ++stats_.relayed_connections;
  }
  if (side == 1 && done) done(ch, {});  // the target: connected to the relay (handshake follows)
}

void NatTraversal::relayed_closed(const std::shared_ptr<Channel>& ch, const CloseCause& reason) {
  auto it = relay_of_.find(ch.get());
  if (it == relay_of_.end() || !relay_suspect(reason)) return;
  bad_relays_[it->second] = Clock::now() + kBadRelayFor;
  if (bad_relays_.size() > 1024) bad_relays_.clear();
  spdlog::warn(
      "net: relayed connection with {} through relay {} failed ({}); that relay is "
      "avoided for {} s",
      ch->peer_id().empty() ? "?" : short_id(ch->peer_id()), short_id(it->second), reason,
      kBadRelayFor.count());
  relay_of_.erase(it);
}

// ------------------------------------------------------------------------------------------------
// The target

void NatTraversal::serve_relay_dial(const std::shared_ptr<Channel>& ch, std::uint64_t nonce) {
  const std::string relay = ch->peer_id();
  if (serving_[relay] >= 4 || serving_total_ >= 16) {
    if (serving_[relay] == 0) serving_.erase(relay);
    spdlog::debug("net: relay dial from {} refused: too many in flight", short_id(relay));
    return;
  }
  ++serving_[relay];
  ++serving_total_;
  // Counted in flight (with the dial-backs) until the raw connection to the relay is made.
  asio::co_spawn(io_,
                 open_relayed(ch->remote_listen_addr(), relay, nonce, 1,
                              [this, relay](ConnectionPtr, const CloseCause&) {
                                if (--serving_[relay] <= 0) serving_.erase(relay);
                                --serving_total_;
                              }),
                 rethrow);
}

// ------------------------------------------------------------------------------------------------
// The relay

void NatTraversal::serve_relay_ask(const std::shared_ptr<Channel>& ch, const RelayAsk& m) {
  auto refuse = [&](const std::string& why) {
    spdlog::debug("net: relay for {} to {} refused: {}", short_id(ch->peer_id()), m.target, why);
    ch->send(static_cast<std::uint8_t>(DialBackType::Result),
             shared(encode(DialBackResult{m.nonce, false, why})));
  };
  if (config_.relay_max_bytes_per_s <= 0) return refuse("relaying is off");
  if (host_.nat_stopping() || listen_addr().empty()) return refuse("not relaying");
  if (reachability() == Reachability::Unreachable) return refuse("cannot be dialled itself");
  if (splices_.size() >= kMaxSplices || splices_.count(m.nonce))
    return refuse("busy: too many relayed connections");
  // The target must be connected to us: only over that connection can we ask it to come.
  std::shared_ptr<Channel> to;
  for (const auto& c : host_.nat_channels())
    if (c->is_open() && !c->relayed() && c->remote_listen_addr() == m.target &&
        c->peer_id() != ch->peer_id())
      to = c;
  if (!to) return refuse("not connected to " + m.target);
  if (!to->send(static_cast<std::uint8_t>(DialBackType::RelayDial),
                shared(encode(RelayDial{m.nonce}))))
    return refuse("target connection busy");
  auto sp = std::make_shared<Splice>();
  sp->asker = ch->peer_id();
  sp->target = to->peer_id();
  const std::uint64_t nonce = m.nonce;
  sp->timer = sched().schedule(limits_.handshake_timeout * 2, [this, nonce] {
    auto it = splices_.find(nonce);
    if (it == splices_.end() || it->second->started) return;
    spdlog::debug("net: relay {}: both sides did not come in time", nonce);
    it->second->close();
    splices_.erase(it);
  });
  splices_[nonce] = sp;
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.relays_served;
  }
  ch->send(static_cast<std::uint8_t>(DialBackType::Result),
           shared(encode(DialBackResult{nonce, true, ""})));
}

void NatTraversal::accept(asio::ip::tcp::socket sock) {
  asio::co_spawn(io_, sniff(std::make_shared<asio::ip::tcp::socket>(std::move(sock))), rethrow);
}

// Every accepted socket: a relay preamble (magic "GTR1") or a channel's first handshake message.
// Anything else (silence, EOF, an error) goes to the channel too, which reports it as before.
asio::awaitable<void> NatTraversal::sniff(std::shared_ptr<asio::ip::tcp::socket> sock) {
  // Counted as a channel (channel_count(), the limits) until it becomes one or is closed.
  host_.nat_hold_socket(true);
  struct Done {
    NatHost& host;
    ~Done() { host.nat_hold_socket(false); }
  } done_guard{host_};
  const auto deadline = Clock::now() + limits_.handshake_timeout;
  // The deadline's handler may run after this frame is gone (expired in the same instant as the
  // last read, beyond sched().cancel()), and by then the socket may be a splice's: it holds the
  // state it shares by shared_ptr and acts only while the sniff is still guarded (cf.
  // connect_within).
  struct Guard {
    bool on = true, timed_out = false;
  };
  auto guard = std::make_shared<Guard>();
  asio::steady_timer timer(io_);
  timer.expires_at(deadline);
  timer.async_wait([sock, guard](std::error_code ec) {
    if (ec || !guard->on) return;
    guard->timed_out = true;
    std::error_code e2;
    sock->cancel(e2);
  });
  const auto unguard = [&] {
    guard->on = false;
    timer.cancel();
  };
  const bool& timed_out = guard->timed_out;
  std::array<std::uint8_t, kRelayPreambleBytes> pre{};
  bool relay = false;
  for (;;) {
    auto [wec] = co_await sock->async_wait(asio::socket_base::wait_read, kUseTuple);
    if (host_.nat_stopping()) co_return;
    if (wec || timed_out) break;
    std::error_code ec;
    const std::size_t n =
        sock->receive(asio::buffer(pre.data(), 4), asio::socket_base::message_peek, ec);
    if (ec || n == 0) break;
    if (std::memcmp(pre.data(), kRelayMagic, n) != 0) break;  // a channel
    if (n == 4) {
      relay = true;
      break;
    }
    asio::steady_timer wait(io_);  // a prefix of the magic: the rest is on its way
    wait.expires_after(std::chrono::milliseconds(2));
    co_await wait.async_wait(kUseTuple);
  }
  if (!relay) {
    unguard();
    if (host_.nat_stopping()) co_return;
    host_.nat_open_channel(std::move(*sock), true, false, deadline, {});
    co_return;
  }
  auto [rec, rn] = co_await asio::async_read(*sock, asio::buffer(pre), kUseTuple);
  unguard();
  std::error_code ec;
  if (rec || timed_out || host_.nat_stopping()) {
    sock->close(ec);
    co_return;
  }
  std::uint64_t nonce = 0;
  std::uint8_t side = 0;
  if (!parse_relay_preamble(pre.data(), nonce, side)) {
    spdlog::warn("net: malformed relay preamble; connection closed");
    sock->close(ec);
    co_return;
  }
  splice_arrived(nonce, side, sock);
}

void NatTraversal::splice_arrived(std::uint64_t nonce, std::uint8_t side,
                                  std::shared_ptr<asio::ip::tcp::socket> sock) {
  auto it = splices_.find(nonce);
  std::error_code ec;
  if (it == splices_.end() || it->second->side[side]) {
    spdlog::debug("net: relay connection for an unknown or taken slot; closed");
    sock->close(ec);
    return;
  }
  auto sp = it->second;
  sp->side[side] = std::move(sock);
  if (!sp->side[0] || !sp->side[1]) return;
  sp->started = true;
  sched().cancel(sp->timer);
  spdlog::debug("net: relaying between {} and {}", short_id(sp->asker), short_id(sp->target));
  for (int from = 0; from < 2; ++from) asio::co_spawn(io_, pipe(sp, from), rethrow);
}

asio::awaitable<void> NatTraversal::pipe(std::shared_ptr<Splice> sp, int from) {
  ++sp->pipes;
  std::vector<std::uint8_t> buf(kPipeChunk);
  asio::steady_timer pace(io_);
  auto& in = *sp->side[from];
  auto& out = *sp->side[1 - from];
  for (;;) {
    auto [rec, n] = co_await in.async_read_some(asio::buffer(buf), kUseTuple);
    if (rec || n == 0 || host_.nat_stopping()) break;
    if (config_.relay_tamper) {
      n = std::min(n, config_.relay_tamper(buf.data(), n));
      if (n == 0) continue;  // dropped: the endpoints' idle deadline ends the connection
    }
    // The bound on the relayed rate, all relayed connections together.
    const auto now = Clock::now();
    relay_next_free_ = std::max(relay_next_free_, now) +
                       std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                           double(n) / config_.relay_max_bytes_per_s));
    if (relay_next_free_ > now + std::chrono::milliseconds(1)) {
      pace.expires_at(relay_next_free_);
      co_await pace.async_wait(kUseTuple);
    }
    auto [wec, wn] = co_await asio::async_write(out, asio::buffer(buf.data(), n), kUseTuple);
    if (wec) break;
    std::lock_guard lk(stats_mu_);
    stats_.relayed_bytes += n;
  }
  // Either side gone: the other is closed too (its channel sees EOF, as with a direct one).
  sp->close();
  if (--sp->pipes == 0) {
    for (auto it = splices_.begin(); it != splices_.end(); ++it)
      if (it->second == sp) {
        splices_.erase(it);
        break;
      }
  }
}

}  // namespace gossiptrain::net
