// The averaging exchange, what both sides do (the protocol: exchange_protocol.cpp): deadlines,
// the transfer of the snapshots, validation and the commit vote, the mix, failures and reports.
#include "gossip/exchange/exchange_protocol.hpp"

#include <algorithm>
#include "base/assert.hpp"
#include <cmath>
#include <limits>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "gossip/exchange/exchange_protocol_detail.hpp"

namespace gossiptrain::gossip {

using namespace exchange_detail;

// ------------------------------------------------------------------------------------------------
// Both sides

void ExchangeProtocol::arm_deadline(Millis d, ExchangeFailure what) {
  deadline_reason_ = what;
  ex_->deadline_at = port_.now() + d;
  port_.arm(Timer::Deadline, ex_->seq, d);
}

Millis ExchangeProtocol::silence_bound(const Exchange& e) const {
  Millis bound = std::max(cfg_.silence_floor, 4 * e.longest_gap);
  // A link measured slow before: the whole transfer at its rate may pass without a whole
  // message from the partner (its chunks queued behind ours), so that much more.
  const double rate = link_.rate(e.partner);
  if (rate > 0) {
    const double bytes = 2.0 * static_cast<double>(encoded_size(e.wire, port_.n_params()));
    bound += Millis(static_cast<std::int64_t>(1000.0 * bytes / rate));
  }
  return bound;
}

bool ExchangeProtocol::check_silence() {
  Exchange& e = *ex_;
  const Millis now = port_.now();
  const Millis silent_for = now - e.heard;
  const Millis bound = silence_bound(e);
  if (silent_for >= bound && e.suspected) {
    spdlog::info(
        "averager: exchange with {} given up: suspected by membership and silent for {} ms "
        "(bound {} ms)",
        short_id(e.partner), silent_for.count(), bound.count());
    fail({ExchangeFailure::PartnerSilent}, ExchangeCode::Timeout);
    return true;
  }
  if (silent_for >= bound && !e.told_silent) {
    e.told_silent = true;
    spdlog::debug("averager: nothing from {} for {} ms in a transfer: asking membership to probe it",
                  short_id(e.partner), silent_for.count());
    const std::uint64_t seq = e.seq;
    port_.silent(e.partner);
    if (!ex_ || ex_->seq != seq) return true;  // the port's answer ended it (e is gone then)
  }
  // Next: the bound (suspected, or not yet reported), else the transfer's own deadline.
  Millis at = e.deadline_at;
  if (e.suspected || !e.told_silent) at = std::min(at, e.heard + bound);
  port_.arm(Timer::Deadline, e.seq, std::max(Millis(1), at - now));
  return false;
}

void ExchangeProtocol::on_timer(Timer t, std::uint64_t seq) {
  if (t == Timer::Hold) return drop_held(true);  // our exchange took too long: BUSY after all
  if (!ex_ || ex_->seq != seq) return;
  if (t == Timer::Retry) {
    retry_armed_ = false;
    return pump_send();
  }
  if (ex_->phase == Phase::Connecting || ex_->phase == Phase::Requested)
    return try_failed({deadline_reason_}, true);
  // Armed early for the partner's silence (check_silence): the transfer's own deadline has not
  // come yet.
  if (cfg_.silence_floor > Millis(0) && port_.now() < ex_->deadline_at) {
    check_silence();
    return;
  }
  fail({deadline_reason_}, ExchangeCode::Timeout);
}

void ExchangeProtocol::begin_transfer() {
  Exchange& e = *ex_;
  const std::size_t bytes = encoded_size(e.wire, port_.n_params());
  e.check.emplace(e.wire, port_.n_params());
  // int4-rel decodes against our snapshot, at a step boundary (the slow link's wire, when it is
  // not the configured one).
  e.needs_norm = cfg_.needs_norm || e.wire == WireFormat::Int4Rel;
  e.fast_norm = e.needs_norm && cfg_.fast_norm && e.wire == cfg_.wire && e.wire == WireFormat::Fp32;
  e.transfer = port_.now();
  e.heard = e.transfer;
  ex_->sq = 0;
  const double both_ways =
      2.0 * static_cast<double>(bytes + (bytes / cfg_.chunk_bytes + 1) * kChunkHeaderBytes);
  const auto scaled =
      Millis(static_cast<std::int64_t>(1000.0 * both_ways / cfg_.min_rate_bytes_per_s));
  arm_deadline(cfg_.transfer_timeout_floor + scaled, ExchangeFailure::TimeoutTransfer);
  if (cfg_.silence_floor > Millis(0) && check_silence()) return;
  ex_->out.start_transfer(port_.now());
  pump_send();
}

void ExchangeProtocol::queue_control(std::uint8_t type, net::SharedBytes msg) {
  ex_->out.control(type, std::move(msg));
  pump_send();
}

// Hands the transport what is due on the exchange connection (send_pump.hpp); back-pressure or
// the rate cap: we come back after the wait the pump names.
void ExchangeProtocol::pump_send() {
  if (!ex_ || !ex_->conn) return;
  Exchange& e = *ex_;
  port_.cancel(Timer::Retry);
  retry_armed_ = false;
  SendPump::Options o;
  o.exchange_id = e.id;
  o.chunks = e.phase == Phase::Transferring;
  o.rate = port_.max_rate();
  o.chunk_bytes = cfg_.chunk_bytes;
  o.send_retry = cfg_.send_retry;
  const auto wait = e.out.pump(*e.conn, o, port_.now());
  if (e.out.all_sent()) stamp(e, &ExchangeTimes::own_sent);
  if (wait) {
    if (!e.conn->is_open()) return;  // on_closed ends the exchange
    retry_armed_ = true;
    return port_.arm(Timer::Retry, e.seq, *wait);
  }
  if (o.chunks) maybe_commit();
}

std::optional<FailureReason> ExchangeProtocol::check_chunk(Exchange& e, const ChunkView& v,
                                                           const net::Bytes& b) {
  const std::size_t expected = encoded_size(e.wire, port_.n_params());
  if (v.offset != e.received || v.size > expected - e.received) {
    spdlog::warn("averager: chunk from {} at offset {} (+{}) does not fit {} bytes",
                 short_id(e.partner), v.offset, v.size, expected);
    return FailureReason{ExchangeFailure::InvalidLength};
  }
  if (!is_blockwise(e.wire) && v.size % wire_value_bytes(e.wire) != 0) {
    spdlog::warn("averager: chunk from {} at offset {} holds a partial value ({} bytes)",
                 short_id(e.partner), v.offset, v.size);
    return FailureReason{ExchangeFailure::InvalidLength};
  }
  if (!e.check->feed(b.data() + kChunkHeaderBytes, v.size)) {
    spdlog::warn("averager: vector from {} refused: a value near offset {} is not finite",
                 short_id(e.partner), v.offset);
    return FailureReason{ExchangeFailure::InvalidNonFinite};
  }
  return std::nullopt;
}

void ExchangeProtocol::on_chunk(const net::ConnectionPtr& c, net::Bytes&& b) {
  const ChunkView v = decode_chunk(b);
  if (!is_current(c, v.exchange_id) || ex_->phase != Phase::Transferring || ex_->recv_done)
    return violation(c, "unexpected chunk");
  Exchange& e = *ex_;
  if (const auto bad = check_chunk(e, v, b)) return fail(*bad, ExchangeCode::Invalid);
  if (e.fast_norm)
    e.fast_norm =
        port_.add_sq_diff(e.out.own().get(), b.data() + kChunkHeaderBytes, v.offset, v.size, e.sq);
  e.received += v.size;
  e.bytes_received += b.size();
  e.payload_hash += payload_sample(b.data() + kChunkHeaderBytes, v.offset, v.size);
  if (e.received == encoded_size(e.wire, port_.n_params())) {
    spdlog::trace("averager: #{} payload received", e.seq);
    e.recv_done = true;
    stamp(e, &ExchangeTimes::received);
    // Before the vote, which judges the vector (RobustBound::heard_payload).
    port_.heard_payload(e.partner, e.payload_hash + std::uint64_t(e.wire));
  }
  // Handed over as received (no copy here); the training thread uploads the pieces in order at
  // its next step boundary.
  port_.deliver(e.seq, std::move(b), e.recv_done, e.recv_done && e.needs_norm && !e.fast_norm,
                e.partner, e.wire);
  if (e.recv_done) vote_after_chunk(e);
}

// Every value is checked: vote now, unless the norm bounds need the training thread's snapshot.
void ExchangeProtocol::vote_after_chunk(Exchange& e) {
  if (!e.needs_norm) return validated(e.seq, Verdict{});
  if (!e.fast_norm) return port_.request_boundary();
  auto own = [&] { return std::sqrt(port_.own_sq_norm(*e.out.own())); };
  validated(e.seq, port_.judge(e.partner, std::sqrt(e.sq), own));
}

void ExchangeProtocol::validated(std::uint64_t seq, const Verdict& v) {
  if (!ex_ || ex_->seq != seq || ex_->phase != Phase::Transferring) return;
  if (v.refused) {
    const std::string reason = to_string(*v.refused);
    spdlog::warn("averager: vector from {} refused: {} (||r - s|| = {:.4g}, tau = {:.4g})",
                 short_id(ex_->partner), reason, v.norm, v.tau);
    const ExchangeCode code = *v.refused == ExchangeFailure::Anomalous      ? ExchangeCode::Anomalous
                              : *v.refused == ExchangeFailure::InvalidRange ? ExchangeCode::Range
                                                                            : ExchangeCode::Invalid;
    return fail({*v.refused}, code, v.bans);
  }
  ex_->local_valid = true;
  stamp(*ex_, &ExchangeTimes::voted);
  ex_->local_tau = v.tau;
  ex_->local_norm = v.norm;
  // Then maybe commits.
  queue_control(kValid, encode_valid({ex_->id, v.tau, v.tau > 0 ? v.norm : 0.0}));
}

void ExchangeProtocol::on_valid(const net::ConnectionPtr& c, const net::Bytes& b) {
  const ValidMsg m = decode_valid(b);
  if (!is_current(c, m.exchange_id) || ex_->phase != Phase::Transferring || ex_->peer_valid)
    return violation(c, "unexpected valid");
  // The partner cannot have validated a vector we have not finished sending.
  if (!ex_->out.all_sent()) return violation(c, "valid before our payload");
  ex_->peer_valid = true;
  stamp(*ex_, &ExchangeTimes::peer_voted);
  ex_->peer_tau = m.tau;
  ex_->peer_norm = m.norm;
  spdlog::trace("averager: #{} partner's vote received", ex_->seq);
  maybe_commit();
}

// The clipping factor from both votes, the same on both sides (min and max commute), so that the
// exchange still conserves the sum: c = min(1, min(tau_a, tau_b) / max(norm_a, norm_b)). A side
// that imposes no bound (tau 0) takes the other's.
void ExchangeProtocol::agree_clip(Exchange& e) const {
  double tau = std::numeric_limits<double>::infinity();
  if (e.local_tau > 0) tau = std::min(tau, e.local_tau);
  if (e.peer_tau > 0) tau = std::min(tau, e.peer_tau);
  if (std::isfinite(tau)) {
    e.tau = tau;
    // Both the same on both sides: a side without a bound sent no norm and counts none.
    e.diff_norm = std::max(e.local_tau > 0 ? e.local_norm : 0.0, e.peer_norm);
    e.clip = e.diff_norm > tau ? tau / e.diff_norm : 1.0;
    // Honest drift: both sides clipped the other (each found the other far, as two honest peers
    // that drifted apart do, while a stale or one-sided vector finds every peer equally far and
    // clips nobody): the factor stays at suspect_min_clip or above, so the pair keeps closing the
    // gap instead of mixing nothing for good. A function of both votes: the same on both sides.
    const bool mutual =
        e.local_tau > 0 && e.peer_tau > 0 && e.local_tau < e.diff_norm && e.peer_tau < e.diff_norm;
    if (mutual && e.clip < cfg_.robust.suspect_min_clip) e.clip = cfg_.robust.suspect_min_clip;
  } else if (e.needs_norm) {
    e.diff_norm = e.local_norm;
  }
}

// Both votes are in: the mix is handed to the training thread, and this peer is free for the
// next exchange while it waits for the step boundary that applies it.
void ExchangeProtocol::maybe_commit() {
  if (!ex_ || ex_->phase != Phase::Transferring) return;
  Exchange& e = *ex_;
  // Our vote must have been handed to the transport before we act on theirs.
  if (!e.local_valid || !e.out.control_empty() || !e.peer_valid || !e.out.all_sent()) return;
  port_.cancel(Timer::Deadline);
  port_.cancel(Timer::Retry);
  retry_armed_ = false;
  if (committed_)  // the boundary that applies a mix comes before any later snapshot
    throw std::logic_error("averager: a second exchange committed before the first was applied");
  stamp(e, &ExchangeTimes::committed);
  const double ms = static_cast<double>((port_.now() - e.transfer).count());
  transfer_ms_ = transfer_ms_ < 0 ? ms : 0.8 * transfer_ms_ + 0.2 * ms;
  agree_clip(e);
  measure_link(e);
  // The schedule's round served, on both sides (unless our member list changed meanwhile: the
  // count restarted in the new one).
  if (e.round >= 0 && view().hash == e.view) next_round(e.round);
  port_.commit(e.seq, {static_cast<float>(e.w * e.clip), e.diff_norm, e.partner, e.wire});
  spdlog::trace("averager: #{} committed", e.seq);
  committed_ = std::move(ex_);
  ex_.reset();
  port_.request_boundary();  // the mix waits for a step boundary
  // Every chunk of ours has reached the partner (it voted): let go of them, so that the snapshot
  // taken right after the mix can reuse their buffers instead of allocating fresh ones.
  committed_->out.release_own();
  serve_held();  // a request held meanwhile is ours now (its snapshot follows the mix)
}

void ExchangeProtocol::measure_link(const Exchange& e) {
  const std::uint64_t bytes = e.out.bytes_sent() + e.bytes_received;
  const double ms = double((port_.now() - e.transfer).count());
  if (link_.record(e.partner, e.wire, bytes, ms, port_.now()))
    spdlog::info(
        "averager: the link to {} is slow ({:.2f} MB/s both ways, under {:.2f}): "
        "exchanges with it go in {}",
        short_id(e.partner), link_.rate(e.partner) / 1e6, cfg_.link.slow_bytes_per_s / 1e6,
        wire_name(*cfg_.link.slow_wire));
}

void ExchangeProtocol::applied(std::uint64_t seq) {
  if (!committed_ || committed_->seq != seq) return;
  stamp(*committed_, &ExchangeTimes::applied);
  report(*committed_, std::nullopt);
  committed_.reset();
}

void ExchangeProtocol::backend_failed(std::uint64_t seq) {
  if (ex_ && ex_->seq == seq) fail({ExchangeFailure::Backend}, ExchangeCode::Shutdown);
}

void ExchangeProtocol::on_abort(const net::ConnectionPtr& c, const net::Bytes& b) {
  const CodeMsg m = decode_code(b);
  if (committed_ && committed_->conn == c && committed_->id == m.exchange_id) {
    // Inherent commit window: our vote reached them too late. We apply; they do not.
    spdlog::warn("averager: {} aborted after we committed (peer-abort:{})",
                 short_id(committed_->partner), code_name(m.code));
    return;
  }
  if (!is_current(c, m.exchange_id)) return violation(c, "unexpected abort");
  if (ex_->phase == Phase::Transferring)
    return fail({ExchangeFailure::PeerAbort, m.code}, std::nullopt);
  violation(c, "abort before accept");
}

void ExchangeProtocol::partner_lost(const std::string& peer) {
  if (!ex_ || ex_->partner != peer) return;
  spdlog::info("averager: exchange with {} given up: membership declared it gone",
               short_id(peer));
  if (ex_->phase == Phase::Transferring)
    return fail({ExchangeFailure::PartnerLost}, ExchangeCode::Timeout);
  try_failed({ExchangeFailure::PartnerLost}, true);
}

void ExchangeProtocol::partner_suspected(const std::string& peer, bool suspected) {
  if (!ex_ || ex_->partner != peer) return;
  if (ex_->suspected == suspected) return;  // (membership tells of other changes too)
  ex_->suspected = suspected;
  if (cfg_.silence_floor > Millis(0) && ex_->phase == Phase::Transferring) check_silence();
}

void ExchangeProtocol::fail(FailureReason reason, std::optional<ExchangeCode> notify, bool bans) {
  if (!ex_) return;
  Exchange& e = *ex_;
  const std::string why = to_string(reason);
  if (e.phase == Phase::Transferring && e.conn && e.conn->is_open()) {
    if (notify) e.conn->send(kAbort, encode_code(e.id, *notify));
    port_.forget_pooled(e.partner);
    e.conn->close(net::CloseReason::Failed, "exchange: " + why);
  }
  port_.cancel(Timer::Deadline);
  port_.cancel(Timer::Retry);
  retry_armed_ = false;
  const std::string partner = e.partner;
  const std::uint64_t seq = e.seq;
  port_.release(seq, false);
  // The transfer stalled (a partition, a host gone): the next exchanges ask others first. Or the
  // link is too slow for this wire: what it moved meanwhile measures it.
  if (reason.kind == ExchangeFailure::TimeoutTransfer ||
      reason.kind == ExchangeFailure::PartnerLost ||
      reason.kind == ExchangeFailure::PartnerSilent) {
    choice_.unreachable(partner, port_.now());
    measure_link(e);
  }
  report(e, reason);
  ex_.reset();
  // We refused the partner's vector: counts towards banning it (Verdict::bans).
  if (is_vector_refusal(reason.kind) && bans) note_refusal(partner, why);
  serve_held();
}

// A ban: we neither ask the partner nor answer it, and our exchange connection to it is closed.
void ExchangeProtocol::note_refusal(const std::string& partner, const std::string& reason) {
  const auto ban = bans_.note_refusal(partner, reason, port_.now());
  if (!ban) return;
  port_.count(ExchangePort::Counter::Bans);
  spdlog::warn("averager: banning {} for {} s (ban {}): {} refusals of its vector, last {}",
               short_id(partner), ban->duration.count() / 1000.0, ban->count, cfg_.robust.ban_after,
               reason);
  port_.close_pooled(partner, "exchange partner banned");
  port_.ban_started(*ban);
}

void ExchangeProtocol::report(Exchange& e, std::optional<FailureReason> failure) {
  const bool ok = !failure;
  ExchangeEvent ev;
  ev.partner = e.partner;
  ev.role = e.role;
  ev.ok = ok;
  if (failure) ev.failure = *failure;
  ev.exchange_id = e.id;
  ev.bytes_sent = e.out.bytes_sent();
  ev.bytes_received = e.bytes_received;
  ev.ms = static_cast<double>((port_.now() - e.started).count());
  // How long this partner kept us busy, for the partner choice: a finished exchange, or one that
  // failed once its transfer had begun (a quick BUSY or refusal says nothing about the link).
  if (ok || e.phase == Phase::Transferring)
    choice_.record(e.partner, double((port_.now() - e.asked).count()), port_.now());
  ev.w = ok ? e.w : 0.0f;
  ev.diff_norm = ok ? e.diff_norm : -1;
  ev.tau = ok ? e.tau : 0;
  ev.clip = ok ? e.clip : 1;
  ev.partner_progress = e.partner_progress;
  ev.partner_step = e.partner_step;
  ev.wire = e.wire;
  ev.round = ok ? e.round : -1;
  ev.times = e.times;
  if (e.role == ExchangeRole::Initiator && !e.partner.empty()) port_.idle_close_pooled(e.partner);
  if (ok)
    spdlog::debug("averager: exchange with {} done as {} in {} ms, w={}", short_id(ev.partner),
                  role_name(ev.role), ev.ms, ev.w);
  else if (failure->kind == ExchangeFailure::Busy)  // routine when many peers gossip at once
    spdlog::debug("averager: every peer asked was busy (last {})", short_id(ev.partner));
  else
    spdlog::info("averager: exchange with {} failed as {}: {}", short_id(ev.partner),
                 role_name(ev.role), ev.reason());
  port_.finished(ev);
}

bool ExchangeProtocol::is_current(const net::ConnectionPtr& c, std::uint64_t id) const {
  return ex_ && ex_->conn == c && ex_->id == id && id != 0;
}

void ExchangeProtocol::violation(const net::ConnectionPtr& c, const std::string& what) {
  spdlog::warn("averager: protocol violation from {}: {}", short_id(c->peer_id()), what);
  if (ex_ && ex_->conn == c) {
    if (ex_->phase == Phase::Transferring)
      return fail({ExchangeFailure::Protocol}, ExchangeCode::Protocol);
    if (ex_->phase == Phase::Requested) return try_failed({ExchangeFailure::Protocol}, true);
  }
  port_.forget_pooled(c);
  c->close(net::CloseReason::ProtocolViolation, "exchange: " + what);
}

void ExchangeProtocol::on_message(const net::ConnectionPtr& c, std::uint8_t type,
                                  net::Bytes&& payload) {
  if (ex_ && ex_->conn == c && ex_->phase == Phase::Transferring) {
    const Millis now = port_.now();
    ex_->longest_gap = std::max(ex_->longest_gap, now - ex_->heard);
    ex_->heard = now;
  }
  try {
    switch (type) {
      case kReq: return on_request(c, payload);
      case kAcc: return on_accept(c, payload);
      case kBusy:
      case kRef: return on_busy_or_refuse(c, type, payload);
      case kChunk: return on_chunk(c, std::move(payload));
      case kValid: return on_valid(c, payload);
      case kAbort: return on_abort(c, payload);
      default: return violation(c, "unknown message type " + std::to_string(type));
    }
  } catch (const base::DecodeError& e) {
    spdlog::warn("averager: malformed {} from {}: {}", exchange_type_name(type),
                 short_id(c->peer_id()), e.what());
    violation(c, "malformed " + std::string(exchange_type_name(type)));
  }
}

void ExchangeProtocol::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  port_.forget_pooled(c);
  if (held_ && held_->conn == c) drop_held(false);
  if (!ex_ || ex_->conn != c) return;
  spdlog::debug("averager: exchange connection to {} closed: {}", short_id(ex_->partner), reason);
  if (ex_->phase == Phase::Requested || ex_->phase == Phase::Connecting)
    try_failed({ExchangeFailure::Closed}, false);
  else fail({ExchangeFailure::Closed}, std::nullopt);
}

}  // namespace gossiptrain::gossip
