// Catch-up (layouts in catch_up_messages.hpp):
//   fetcher                                        server
//   REQUEST(id, fingerprint, n_params)          ->
//                                               <- BUSY | REFUSE(code) | ACCEPT
//                                                  (its next step boundary copies the state)
//                                               <- HEADER(total bytes, fingerprint, counters)
//                                               <- CHUNK*  (the encoded state, in order)
//                                               <- END(CRC-32 of all the bytes)
//   closes the connection; on a failure first CANCEL(code) (server side: ABORT(code)).
// The fetcher dials a dedicated connection per attempt, so no stale message of a failed attempt
// can reach the next one. Every wait has a deadline; every size is checked against our own
// model's before anything is allocated; nothing is handed over until all of it is checked.
// This file: the serving side; catch_up_client.cpp the fetching side.
#include "gossip/catch_up/catch_up.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

#include "gossip/catch_up/catch_up_detail.hpp"
#include "gossip/dispatcher.hpp"

namespace gossiptrain::gossip {

using namespace catch_up_detail;
using net::Millis;


// ------------------------------------------------------------------------------------------------
// Serving side

CatchUpServer::CatchUpServer(CatchUpServerConfig cfg, net::Transport& transport,
                             Dispatcher& dispatcher)
    : CatchUpServer(std::move(cfg), transport) {
  dispatcher.add(kCatchUpServerFirst, kCatchUpServerLast, this);
}

CatchUpServer::CatchUpServer(CatchUpServerConfig cfg, net::Transport& transport)
    : cfg_(std::move(cfg)), sched_(transport.scheduler()) {
  if (cfg_.chunk_bytes < 1) throw std::invalid_argument("catch-up: chunk_bytes must be >= 1");
  if (!(cfg_.min_rate_bytes_per_s > 0))
    throw std::invalid_argument("catch-up: min_rate_bytes_per_s must be > 0");
}

CatchUpServer::~CatchUpServer() {
  alive_.reset();
  if (cur_) {
    if (cur_->deadline) sched_.cancel(cur_->deadline);
    if (cur_->retry) sched_.cancel(cur_->retry);
  }
}

template <typename Fn>
void CatchUpServer::post(Fn fn) {
  std::weak_ptr<bool> alive = alive_;
  sched_.post([alive, fn = std::move(fn)]() mutable {
    if (alive.lock()) fn();
  });
}

// The copy and the encoding cost the training thread one pass over the state per fetch served;
// the CRC of the End message is computed on the protocol thread as the chunks go out.
void CatchUpServer::between_steps(core::StepContext& ctx) {
  if (ctx.state) n_params_.store(ctx.n_params);
  std::uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    seq = std::exchange(want_seq_, 0);
  }
  if (!seq) return;
  if (!ctx.state) {  // accepted before: cannot happen unless the hook's caller changed
    post([this, seq] {
      if (cur_ && cur_->seq == seq) finish(false, "backend");
    });
    return;
  }
  try {
    const core::Checkpoint c = ctx.state->state();
    auto bytes = std::make_shared<const net::Bytes>(core::encode_checkpoint(c));
    CatchUpHeaderMsg h{0, bytes->size(), c.fingerprint, c.step, c.epoch, c.samples};
    spdlog::debug("catch-up: state taken at step {} ({} bytes)", c.step, bytes->size());
    post([this, seq, bytes, h] { state_ready(seq, bytes, h); });
  } catch (const std::exception& e) {
    spdlog::error("catch-up: cannot take the state to serve: {}", e.what());
    post([this, seq] {
      if (cur_ && cur_->seq == seq) finish(false, "backend");
    });
    throw;
  }
}

void CatchUpServer::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& b) {
  switch (type) {
    case wire(CatchUpType::Request): return on_request(c, b);
    case wire(CatchUpType::CancelFetch): return on_cancel(c, b);
    default: return violation(c, "unknown message type " + std::to_string(type));
  }
}

void CatchUpServer::on_request(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_request);
  if (!m) return violation(c, "malformed request");
  const std::size_t n = n_params_.load();
  std::optional<CatchUpCode> refuse;
  if (m->fingerprint != cfg_.fingerprint) refuse = CatchUpCode::Fingerprint;
  else if (m->resumed_only && !carries_run_.load()) refuse = CatchUpCode::Fresh;
  else if (n == 0) refuse = CatchUpCode::NotReady;
  else if (m->n_params != n) refuse = CatchUpCode::Size;
  if (refuse) {
    const auto level = *refuse == CatchUpCode::NotReady || *refuse == CatchUpCode::Fresh
                           ? spdlog::level::debug
                           : spdlog::level::warn;
    spdlog::log(level, "catch-up: refusing {}: {}", short_id(c->peer_id()),
                catch_up_code_name(*refuse));
    c->send(wire(CatchUpType::Refuse), encode_catch_up_code(m->id, *refuse));
    return;
  }
  if (cur_) {
    c->send(wire(CatchUpType::Busy), encode_id(m->id));
    return;
  }
  Serve s;
  s.seq = ++seq_;
  s.id = m->id;
  s.conn = c;
  s.peer = c->peer_id();
  s.started = sched_.now();
  cur_ = std::move(s);
  {
    std::lock_guard<std::mutex> lk(mu_);
    want_seq_ = cur_->seq;
  }
  spdlog::info("catch-up: serving our state to {}", short_id(cur_->peer));
  arm_deadline(cfg_.state_timeout, "timeout:state");
  // A full queue loses it: the fetcher's timeout retries.
  c->send(wire(CatchUpType::Accept), encode_id(m->id));
}

void CatchUpServer::on_cancel(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_code);
  if (!m) return violation(c, "malformed cancel");
  if (!cur_ || cur_->conn != c || cur_->id != m->id) return;  // over already: nothing to stop
  spdlog::warn("catch-up: {} gave up the fetch: {}", short_id(cur_->peer),
               catch_up_code_name(m->code));
  auto conn = cur_->conn;
  finish(false, "peer-cancel:" + std::string(catch_up_code_name(m->code)));
  conn->close(net::CloseReason::Cancelled, "catch-up, by the fetcher");
}

void CatchUpServer::state_ready(std::uint64_t seq, std::shared_ptr<const net::Bytes> state,
                                CatchUpHeaderMsg header) {
  if (!cur_ || cur_->seq != seq) return;  // ended meanwhile
  header.id = cur_->id;
  cur_->header = header;
  cur_->state = std::move(state);
  arm_deadline(transfer_deadline(cfg_.transfer_timeout_floor, cfg_.min_rate_bytes_per_s,
                                 cur_->state->size()),
               "timeout:transfer");
  pump();
}

// Queues what is due, in order: the header, the chunks (each cut once, kept when the bounded
// send queue refuses it), the end marker; then the serve is over.
void CatchUpServer::pump() {
  Serve& s = *cur_;
  s.retry = 0;
  if (!s.header_sent) {
    if (!s.conn->send(wire(CatchUpType::Header), encode_catch_up_header(s.header)))
      return retry_later();
    s.header_sent = true;
  }
  const net::Bytes& st = *s.state;
  while (s.sent < st.size()) {
    const std::size_t len = std::min(cfg_.chunk_bytes, st.size() - s.sent);
    if (!s.next_chunk) s.next_chunk = encode_chunk(s.id, s.sent, st.data() + s.sent, len);
    if (!s.conn->send(wire(CatchUpType::Chunk), s.next_chunk)) return retry_later();
    s.next_chunk.reset();
    s.crc = core::crc32_update(s.crc, st.data() + s.sent, len);
    s.sent += len;
  }
  if (!s.conn->send(wire(CatchUpType::End), encode_catch_up_end({s.id, s.crc})))
    return retry_later();
  finish(true, "");
}

void CatchUpServer::retry_later() {
  if (!cur_->conn->is_open()) return;  // on_closed ends the serve
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = cur_->seq;
  cur_->retry = sched_.schedule(cfg_.send_retry, [this, alive, seq] {
    if (alive.lock() && cur_ && cur_->seq == seq) pump();
  });
}

void CatchUpServer::arm_deadline(Millis d, const std::string& reason) {
  const std::uint64_t seq = cur_->seq;
  rearm(sched_, cur_->deadline, d, alive_, [this, seq, reason] {
    if (!cur_ || cur_->seq != seq) return;
    cur_->deadline = 0;
    auto conn = cur_->conn;
    spdlog::warn("catch-up: serving {} failed: {}", short_id(cur_->peer), reason);
    conn->send(wire(CatchUpType::Abort), encode_catch_up_code(cur_->id, CatchUpCode::Timeout));
    finish(false, reason);
    conn->close(net::CloseReason::Failed, "catch-up: " + reason);
  });
}

void CatchUpServer::finish(bool ok, const std::string& reason) {
  Serve& s = *cur_;
  if (s.deadline) sched_.cancel(s.deadline);
  if (s.retry) sched_.cancel(s.retry);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (want_seq_ == s.seq) want_seq_ = 0;
  }
  CatchUpServed ev;
  ev.peer = s.peer;
  ev.ok = ok;
  ev.reason = reason;
  ev.step = s.header.step;
  ev.bytes = s.state ? s.state->size() : 0;
  ev.ms = static_cast<double>((sched_.now() - s.started).count());
  if (ok) {
    served_ok_.fetch_add(1);
    spdlog::info("catch-up: sent our state at step {} ({} bytes) to {} in {} ms", ev.step,
                 ev.bytes, short_id(ev.peer), ev.ms);
  } else {
    spdlog::info("catch-up: serving {} failed: {}", short_id(ev.peer), reason);
  }
  cur_.reset();
  if (on_event_) on_event_(ev);
}

void CatchUpServer::violation(const net::ConnectionPtr& c, const std::string& what) {
  spdlog::warn("catch-up: protocol violation from {}: {}", short_id(c->peer_id()), what);
  if (cur_ && cur_->conn == c) finish(false, "protocol");
  c->close(net::CloseReason::ProtocolViolation, "catch-up: " + what);
}

void CatchUpServer::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  if (!cur_ || cur_->conn != c) return;
  spdlog::debug("catch-up: connection to {} closed: {}", short_id(cur_->peer), reason);
  finish(false, "closed");
}

}  // namespace gossiptrain::gossip
