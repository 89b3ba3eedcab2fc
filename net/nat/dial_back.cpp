// NatTraversal's dial-backs (docs/nat.md): reverse connections to peers that cannot be dialled,
// and the reachability self-check. Both rest on one request, "dial me back", which a peer only
// ever answers by dialling the address the requester advertised in its authenticated handshake
// (never an address named in the request: no peer can be used to scan or flood a third party),
// within per-requester and total bounds on dial-backs in flight.
//
// Reverse connections: connect(addr) to a peer that cannot be dialled at addr (it said so, or a
// direct dial failed) while that peer holds a connection to us (it dialled us: membership, an
// exchange) sends Request{Reverse, nonce} on that connection; the peer dials us and sends
// Hello{nonce} first on the new connection, which connect() then hands to its caller as if it had
// dialled it. The gossip layers see an ordinary connection of their own.
#include <spdlog/spdlog.h>

#include "base/short_id.hpp"
#include "net/nat/nat_detail.hpp"
#include "net/nat/nat_traversal.hpp"

namespace gossiptrain::net {
namespace {

using Clock = std::chrono::steady_clock;

// How long an address whose direct dial failed is dialled in reverse (while its peer is
// connected to us) before a direct dial is tried again.
constexpr std::chrono::seconds kUndialableFor{120};
// A peer that said itself it cannot be dialled (its self-check) is believed much longer: a direct
// dial to a private address across a NAT costs the whole connect deadline before the reversal.
constexpr std::chrono::seconds kAnnouncedUndialableFor{3600};
constexpr std::size_t kMaxUndialable = 4096;
constexpr std::size_t kMaxPendingReverse = 64;
constexpr int kMaxServingPerPeer = 4;
constexpr int kMaxServingTotal = 16;
constexpr std::chrono::seconds kCheckServeEvery{10};  // one check per requester per 10 s
constexpr std::size_t kMaxCheckServed = 1024;
constexpr int kMaxCheckAttempts = 3;

using nat_detail::random_nonce;
using nat_detail::shared;
using base::short_id;

}  // namespace

// ------------------------------------------------------------------------------------------------
// connect(): direct, or reversed

void NatTraversal::connect(const std::string& addr, ConnectCallback done) {
  if (!host_.nat_stopping() && known_undialable(addr)) {
    if (auto via = channel_advertising(addr)) return reverse_connect(via, std::move(done));
  }
  host_.nat_dial_direct(
      addr, [this, addr, done = std::move(done)](ConnectionPtr c, const CloseCause& err) {
        if (c || host_.nat_stopping()) {
          if (done) done(std::move(c), err);
          return;
        }
        auto via = channel_advertising(addr);
        if (!via) return relay_connect(addr, err, done);  // relay.cpp
        // It dialled us, we cannot dial it: behind a NAT or a firewall. Ask it to dial us.
        if (undialable_.size() >= kMaxUndialable) undialable_.clear();
        undialable_[addr] = Clock::now() + kUndialableFor;
        spdlog::info("net: {} cannot be dialled at {} ({}); asking it to dial us instead",
                     short_id(via->peer_id()), addr, err);
        reverse_connect(via, done);
      });
}

bool NatTraversal::known_undialable(const std::string& addr) {
  auto it = undialable_.find(addr);
  if (it == undialable_.end()) return false;
  if (it->second < Clock::now()) {
    undialable_.erase(it);
    return false;
  }
  return true;
}

std::shared_ptr<Channel> NatTraversal::channel_advertising(const std::string& addr) const {
  std::shared_ptr<Channel> best;
  for (const auto& ch : host_.nat_channels()) {
    if (!ch->is_open() || ch->relayed() || ch->remote_listen_addr() != addr ||
        ch->peer_id() == local_id())
      continue;
    if (!best || (ch->inbound() && !best->inbound())) best = ch;
  }
  return best;
}

void NatTraversal::reverse_connect(const std::shared_ptr<Channel>& via, ConnectCallback done) {
  auto fail = [&](const std::string& why) {
    std::lock_guard lk(stats_mu_);
    ++stats_.reverse_failures;
    return why;
  };
  if (pending_reverse_.size() >= kMaxPendingReverse) {
    if (done)
      done(nullptr,
           CloseCause{CloseReason::Unspecified, fail("reverse connection: too many in flight")});
    return;
  }
  const std::uint64_t nonce = random_nonce();
  if (!via->send(static_cast<std::uint8_t>(DialBackType::Request),
                 shared(encode(DialBackRequest{DialBackPurpose::Reverse, nonce})))) {
    if (done)
      done(nullptr, CloseCause{CloseReason::Unspecified,
                               fail("reverse connection: request not sent (connection busy)")});
    return;
  }
  auto& p = pending_reverse_[nonce];
  p.peer = via->peer_id();
  p.done = std::move(done);
  // The peer dials within its own handshake deadline; a second of slack for the request's trip.
  p.timer = sched().schedule(limits_.handshake_timeout + std::chrono::seconds(1), [this, nonce] {
    finish_reverse(nonce, nullptr, "reverse connection: no dial-back within the deadline");
  });
}

void NatTraversal::finish_reverse(std::uint64_t nonce, ConnectionPtr c, const std::string& err) {
  auto it = pending_reverse_.find(nonce);
  if (it == pending_reverse_.end()) return;
  auto p = std::move(it->second);
  pending_reverse_.erase(it);
  sched().cancel(p.timer);
  {
    std::lock_guard lk(stats_mu_);
    ++(c ? stats_.reverse_connections : stats_.reverse_failures);
  }
  if (!c) spdlog::debug("net: reverse connection from {} failed: {}", short_id(p.peer), err);
  if (p.done) p.done(std::move(c), CloseCause{CloseReason::Unspecified, err});
}

// ------------------------------------------------------------------------------------------------
// Messages

void NatTraversal::on_message(const std::shared_ptr<Channel>& ch, std::uint8_t type,
                              const Bytes& payload) {
  try {
    switch (static_cast<DialBackType>(type)) {
      case DialBackType::Request: {
        const auto m = decode_dial_back_request(payload);
        serve_dial_back(ch, m.purpose, m.nonce);
        return;
      }
      case DialBackType::Result: {
        const auto m = decode_dial_back_result(payload);
        if (pending_relay_.count(m.nonce)) {
          relay_answer(m.nonce, m.ok, m.reason);  // relay.cpp
        } else if (m.nonce == check_nonce_ && check_nonce_ != 0) {
          check_nonce_ = 0;
          self_check_result(ch->peer_id(), m.ok, m.reason);
        } else if (pending_reverse_.count(m.nonce) &&
                   pending_reverse_[m.nonce].peer == ch->peer_id() && !m.ok) {
          finish_reverse(m.nonce, nullptr, "reverse connection refused: " + m.reason);
        }
        // Anything else answers a request that already timed out: nothing to do.
        return;
      }
      case DialBackType::Hello: {
        const auto m = decode_dial_back_hello(payload);
        auto it = pending_reverse_.find(m.nonce);
        if (!ch->inbound() || it == pending_reverse_.end() || it->second.peer != ch->peer_id()) {
          spdlog::debug("net: dial-back hello from {} answers no request of ours",
                        short_id(ch->peer_id()));
          ch->close(CloseReason::NotNeeded, "reverse connection not expected (late or unknown)");
          return;
        }
        finish_reverse(m.nonce, ch, "");
        return;
      }
      case DialBackType::RelayAsk: {
        serve_relay_ask(ch, decode_relay_ask(payload));
        return;
      }
      case DialBackType::RelayDial: {
        serve_relay_dial(ch, decode_relay_dial(payload).nonce);
        return;
      }
      case DialBackType::Reachability: {
        const auto m = decode_reachability(payload);
        const auto& addr = ch->remote_listen_addr();
        if (m.dialable) {
          undialable_.erase(addr);
        } else {
          if (undialable_.size() >= kMaxUndialable) undialable_.clear();
          undialable_[addr] = Clock::now() + kAnnouncedUndialableFor;
        }
        return;
      }
    }
  } catch (const base::DecodeError& e) {
    spdlog::warn("net: malformed {} from {}: {}", dial_back_type_name(type),
                 short_id(ch->peer_id()), e.what());
    ch->close(CloseReason::Malformed, dial_back_type_name(type));
    return;
  }
  spdlog::warn("net: unknown transport message type {} from {}", int(type),
               short_id(ch->peer_id()));
  ch->close(CloseReason::UnknownType, "type " + std::to_string(type));
}

void NatTraversal::serve_dial_back(const std::shared_ptr<Channel>& ch, DialBackPurpose purpose,
                                   std::uint64_t nonce) {
  const std::string peer = ch->peer_id();
  // Only ever the address the requester advertised in its authenticated handshake.
  const std::string addr = ch->remote_listen_addr();
  auto refuse = [&](const std::string& why) {
    {
      std::lock_guard lk(stats_mu_);
      ++stats_.dial_backs_refused;
    }
    spdlog::debug("net: dial-back for {} refused: {}", short_id(peer), why);
    ch->send(static_cast<std::uint8_t>(DialBackType::Result),
             shared(encode(DialBackResult{nonce, false, why})));
  };
  if (host_.nat_stopping()) return refuse("busy: shutting down");
  if (addr.empty() || addr == advertised_addr()) return refuse("no address to dial back");
  if (purpose == DialBackPurpose::Check) {
    const auto now = Clock::now();
    auto it = last_check_served_.find(peer);
    if (it != last_check_served_.end() && now - it->second < kCheckServeEvery)
      return refuse("busy: one check per 10 s");
    if (last_check_served_.size() >= kMaxCheckServed) last_check_served_.clear();
    last_check_served_[peer] = now;
  }
  if (serving_[peer] >= kMaxServingPerPeer || serving_total_ >= kMaxServingTotal) {
    if (serving_[peer] == 0) serving_.erase(peer);
    return refuse("busy: too many dial-backs in flight");
  }
  ++serving_[peer];
  ++serving_total_;
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.dial_backs_served;
  }
  std::weak_ptr<Channel> wch = ch;
  host_.nat_dial_direct(addr, [this, wch, peer, purpose, nonce](ConnectionPtr c,
                                                                const CloseCause& err) {
    if (--serving_[peer] <= 0) serving_.erase(peer);
    --serving_total_;
    std::string why = err.text();
    if (c && c->peer_id() != peer) {
      why = "reached another peer at that address";
      c->close(CloseReason::UnexpectedPeer, "dial-back reached another peer");
      c.reset();
    }
    auto reply = [&](bool ok) {
      if (auto ch = wch.lock(); ch && ch->is_open())
        ch->send(static_cast<std::uint8_t>(DialBackType::Result),
                 shared(encode(DialBackResult{nonce, ok, ok ? "" : why})));
    };
    if (!c) return reply(false);
    if (purpose == DialBackPurpose::Check) {
      reply(true);
      c->close(CloseReason::Shutdown, "reachability check done");
      return;
    }
    c->send(static_cast<std::uint8_t>(DialBackType::Hello), shared(encode(DialBackHello{nonce})));
  });
}

// ------------------------------------------------------------------------------------------------
// Reachability self-check

void NatTraversal::on_established(const std::shared_ptr<Channel>& ch) {
  if (check_done_) send_reachability(ch);
  if (config_.reachability_check && !ch->inbound() && !check_done_ && check_nonce_ == 0 &&
      !listen_addr().empty() && check_attempts_ < kMaxCheckAttempts)
    start_self_check(ch);
}

void NatTraversal::start_self_check(const std::shared_ptr<Channel>& ch) {
  const std::uint64_t nonce = random_nonce();
  if (!ch->send(static_cast<std::uint8_t>(DialBackType::Request),
                shared(encode(DialBackRequest{DialBackPurpose::Check, nonce}))))
    return;
  ++check_attempts_;
  check_nonce_ = nonce;
  sched().schedule(limits_.handshake_timeout * 2 + std::chrono::seconds(1), [this, nonce] {
    if (check_nonce_ != nonce) return;
    check_nonce_ = 0;  // no answer: the next outbound connection asks again
    if (check_attempts_ >= kMaxCheckAttempts && !check_done_)
      spdlog::info(
          "net: reachability self-check: no answer from {} peers; whether others can "
          "dial us at {} is unknown (docs/nat.md)",
          check_attempts_, advertised_addr());
  });
}

void NatTraversal::self_check_result(const std::string& checker, bool ok,
                                     const std::string& reason) {
  if (!ok && reason.rfind("busy", 0) == 0) return;  // inconclusive: the next connection asks
  check_done_ = true;
  reachability_ = static_cast<int>(ok ? Reachability::Reachable : Reachability::Unreachable);
  if (ok) {
    spdlog::info(
        "net: reachability self-check: peers can dial us at {} (peer {} dialled us "
        "back); nothing to do",
        advertised_addr(), short_id(checker));
  } else {
    spdlog::info(
        "net: reachability self-check: peers cannot dial us at {} (peer {}'s dial-back "
        "failed: {}). Nothing to do: peers reach us over the connections we open, or through "
        "a relay (docs/nat.md). To be dialled directly instead, forward a public port to "
        "{} and run with --advertise PUBLIC_IP:PORT",
        advertised_addr(), short_id(checker), reason, listen_addr());
  }
  for (const auto& c : host_.nat_channels())
    if (c->is_open()) send_reachability(c);
}

void NatTraversal::send_reachability(const std::shared_ptr<Channel>& ch) {
  ch->send(static_cast<std::uint8_t>(DialBackType::Reachability),
           shared(encode(ReachabilityMsg{reachability() == Reachability::Reachable})));
}

}  // namespace gossiptrain::net
