// SWIM membership, the messages: connections, decoding and handling of ping, ping-req, ack and
// sync, and sending on pooled links (memberlist net.go).
#include "gossip/membership/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::gossip {

namespace {
net::SharedBytes share(net::Bytes b) { return std::make_shared<const net::Bytes>(std::move(b)); }
}  // namespace

// ---------------------------------------------------------------------------------------------
// Messages

void Membership::on_connection(const net::ConnectionPtr&, bool) {
  // Nothing: a connection becomes ours when we dial it or a membership message arrives on it, so
  // other protocols' connections sharing the transport are never used or closed by us.
}

void Membership::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  owned_.erase(c.get());
  auto it = links_.find(c->peer_id());
  if (it != links_.end() && it->second.conn == c) {
    it->second.conn.reset();
    spdlog::debug("membership {}: connection to {} closed: {}", self_id_, c->peer_id(), reason);
    forget_link_if_idle(c->peer_id());
  }
}

void Membership::adopt(const net::ConnectionPtr& c, bool dialed) {
  if (dialed) {
    owned_[c.get()] = Owned{c, sched_.now(), ++owned_order_};
    next_idle_check_ = std::min(next_idle_check_, sched_.now() + cfg_.idle_connection_timeout);
  }
  Link& l = links_[c->peer_id()];
  if (dialed || !l.conn || !l.conn->is_open()) l.conn = c;
}

void Membership::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) {
  if (!running_) return;
  if (c->peer_id() == self_id_) {
    c->close(net::CloseReason::Self);
    return;
  }
  auto o = owned_.find(c.get());
  if (o != owned_.end()) {
    o->second.last_used = sched_.now();
  } else {
    adopt(c, false);
  }
  try {
    handle(c, type, payload);
  } catch (const DecodeError& e) {
    spdlog::warn("membership {}: malformed message 0x{:02x} from {} ({}): {}", self_id_, type,
                 c->peer_id(), c->remote_addr(), e.what());
    c->close(net::CloseReason::Malformed, std::string("membership message: ") + e.what());
  }
}

void Membership::handle(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& payload) {
  switch (static_cast<MembershipType>(type)) {
    case MembershipType::Ping: handle_ping(c, decode_ping(payload)); break;
    case MembershipType::Ack: handle_ack(c, decode_ack(payload)); break;
    case MembershipType::PingReq: handle_ping_req(c, decode_ping_req(payload)); break;
    case MembershipType::Sync: handle_sync(c, decode_sync(payload), false); break;
    case MembershipType::SyncReply: handle_sync(c, decode_sync(payload), true); break;
    case MembershipType::Gossip: apply_all(c, decode_gossip(payload).updates); break;
    default: throw DecodeError("unknown membership message type");
  }
}

void Membership::handle_ping(const net::ConnectionPtr& c, PingMsg m) {
  if (m.target_id != self_id_) {
    // Meant for whoever had this address before us; answering would vouch for them.
    spdlog::debug("membership {}: ping for {} ignored", self_id_, m.target_id);
    return;
  }
  apply_all(c, m.updates);
  heard_word(c, m.self);
  send_on(c, MembershipType::Ack,
          encode(AckMsg{m.seq, take_broadcasts(cfg_.max_piggyback), own_word()}));
}

void Membership::handle_ping_req(const net::ConnectionPtr& c, PingReqMsg m) {
  apply_all(c, m.updates);
  heard_word(c, m.self);
  if (m.target_id == self_id_) {
    send_on(c, MembershipType::Ack,
            encode(AckMsg{m.seq, take_broadcasts(cfg_.max_piggyback), own_word()}));
    return;
  }
  if (!net::dialable_addr(m.target_addr)) {
    spdlog::debug("membership {}: ping-req for {} at unroutable {} ignored", self_id_, m.target_id,
                  m.target_addr);
    return;
  }
  const std::uint32_t seq = next_seq_++;
  const std::uint32_t their_seq = m.seq;
  const std::string requester = c->peer_id();
  const std::string target = m.target_id;
  expect_ack(
      seq, cfg_.probe_timeout,
      [this, c, their_seq, requester] {
        net::Bytes ack =
            encode(AckMsg{their_seq, take_broadcasts(cfg_.max_piggyback), own_word()});
        if (c->is_open()) {
          send_on(c, MembershipType::Ack, std::move(ack));
        } else if (const Row* r = table_->find(requester)) {
          send_to(requester, table_->addr_str(*r), MembershipType::Ack, std::move(ack));
        }
      },
      [this, target] { drop_link(target); });
  send_to(m.target_id, m.target_addr, MembershipType::Ping,
          encode(PingMsg{seq, m.target_id, take_broadcasts(cfg_.max_piggyback), own_word()}));
}

void Membership::handle_ack(const net::ConnectionPtr& c, AckMsg m) {
  apply_all(c, m.updates);
  heard_word(c, m.self);
  auto it = acks_.find(m.seq);
  if (it == acks_.end()) return;  // late, or answered already
  sched_.cancel(it->second.timer);
  auto fn = std::move(it->second.on_ack);
  acks_.erase(it);
  fn();
}

void Membership::handle_sync(const net::ConnectionPtr& c, SyncMsg m, bool reply) {
  // Merge first, then answer: a member that finds itself dead in our list refutes before it
  // replies, so the reply already carries its new incarnation (partition healing).
  merge_remote(m.members);
  if (!reply) {
    send_on(c, MembershipType::SyncReply, encode(SyncMsg{m.seq, m.join, full_state()}));
    return;
  }
  if (m.join && join_in_progress_ && m.seq >= join_seq_lo_ && !join_answered_) {
    join_answered_ = true;
    if (!joined_) {
      spdlog::info("membership {}: joined through {} ({} members known)", self_id_, c->peer_id(),
                   table_->size());
    } else {
      spdlog::info("membership {}: re-joined through {}", self_id_, c->peer_id());
    }
    joined_ = true;
  }
}

void Membership::expect_ack(std::uint32_t seq, Millis timeout, std::function<void()> on_ack,
                            std::function<void()> on_timeout) {
  AckWait w;
  w.on_ack = std::move(on_ack);
  w.timer = later(timeout, [this, seq, on_timeout = std::move(on_timeout)] {
    if (acks_.erase(seq) && on_timeout) on_timeout();
  });
  acks_[seq] = std::move(w);
}

void Membership::drop_link(const std::string& id) {
  // A connection that carried a ping but no ack may be dead without knowing it (the peer crashed
  // or restarted behind it): the next message dials afresh. We close it only if we dialed it.
  auto it = links_.find(id);
  if (it == links_.end() || !it->second.conn) return;
  net::ConnectionPtr c = std::move(it->second.conn);
  it->second.conn.reset();
  forget_link_if_idle(id);
  if (owned_.erase(c.get())) c->close(net::CloseReason::NoAnswer, "no ack");
}

void Membership::forget_link_if_idle(const std::string& id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  const Link& l = it->second;
  if (!l.conn && !l.dialing && l.pending.empty()) links_.erase(it);
}

void Membership::send_on(const net::ConnectionPtr& c, MembershipType type, net::Bytes payload) {
  if (!c->send(wire(type), share(std::move(payload)))) {
    spdlog::debug("membership {}: send to {} refused (closed or queue full)", self_id_,
                  c->peer_id());
  }
}

void Membership::send_to(const std::string& id, const std::string& addr, MembershipType type,
                         net::Bytes payload) {
  Link& l = links_[id];
  if (l.conn && l.conn->is_open()) {
    send_on(l.conn, type, std::move(payload));
    return;
  }
  if (l.pending.size() < cfg_.max_pending_per_peer)
    l.pending.emplace_back(wire(type), share(std::move(payload)));
  if (l.dialing) return;
  l.dialing = true;
  std::weak_ptr<bool> w = token_;
  // Over a reliable transport an undeliverable ping is simply a missed ack: the probe timers run
  // on regardless of how the dial ends.
  transport_.connect(addr, [this, w, id](net::ConnectionPtr c, const net::CloseCause& err) {
    if (w.expired()) {
      if (c) c->close(net::CloseReason::Shutdown, "membership stopped");
      return;
    }
    Link& l = links_[id];
    l.dialing = false;
    auto pending = std::move(l.pending);
    l.pending.clear();
    if (!c) {
      spdlog::debug("membership {}: dial {} failed: {}", self_id_, id, err);
      forget_link_if_idle(id);
      return;
    }
    if (c->peer_id() != id) {
      spdlog::warn("membership {}: dialled {} but reached {}", self_id_, id, c->peer_id());
      c->close(net::CloseReason::UnexpectedPeer, "membership");
      forget_link_if_idle(id);
      return;
    }
    adopt(c, true);
    for (auto& [type, bytes] : pending) {
      if (!c->send(type, bytes)) break;
    }
  });
}

}  // namespace gossiptrain::gossip
