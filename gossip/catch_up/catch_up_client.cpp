// Catch-up, the fetching side (the protocol and the serving side: catch_up.cpp).
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
// Fetching side

std::string to_string(const CatchUpFailureReason& r) {
  switch (r.kind) {
    case CatchUpFailure::Connect: return "connect";
    case CatchUpFailure::Closed: return "closed";
    case CatchUpFailure::Busy: return "busy";
    case CatchUpFailure::Refused: return "refused:" + std::string(catch_up_code_name(r.code));
    case CatchUpFailure::Protocol: return "protocol";
    case CatchUpFailure::PeerAbort: return "peer-abort:" + std::string(catch_up_code_name(r.code));
    case CatchUpFailure::TimeoutConnect: return "timeout:connect";
    case CatchUpFailure::TimeoutAnswer: return "timeout:answer";
    case CatchUpFailure::TimeoutState: return "timeout:state";
    case CatchUpFailure::TimeoutTransfer: return "timeout:transfer";
    case CatchUpFailure::InvalidFingerprint: return "invalid:fingerprint";
    case CatchUpFailure::InvalidLength: return "invalid:length";
    case CatchUpFailure::InvalidChecksum: return "invalid:checksum";
    case CatchUpFailure::InvalidDecode: return "invalid:decode";
    case CatchUpFailure::InvalidSize: return "invalid:size";
    case CatchUpFailure::InvalidCounters: return "invalid:counters";
    case CatchUpFailure::InvalidNonFinite: return "invalid:non-finite";
  }
  return "unknown";
}

CatchUpClient::CatchUpClient(net::Transport& transport, Dispatcher& dispatcher,
                             const PeerDirectory& peers)
    : CatchUpClient(transport, peers) {
  dispatcher.add(kCatchUpClientFirst, kCatchUpClientLast, this);
}

CatchUpClient::CatchUpClient(net::Transport& transport, const PeerDirectory& peers)
    : transport_(transport), sched_(transport.scheduler()), peers_(peers) {}

CatchUpClient::~CatchUpClient() {
  alive_.reset();
  if (at_ && at_->timer) sched_.cancel(at_->timer);
  if (deadline_) sched_.cancel(deadline_);
  if (retry_) sched_.cancel(retry_);
}

void CatchUpClient::start(CatchUpClientConfig cfg, DoneFn done) {
  if (done_) throw std::logic_error("catch-up: a fetch is already running");
  if (!done) throw std::invalid_argument("catch-up: start needs a done callback");
  if (cfg.n_params == 0 || !(cfg.min_rate_bytes_per_s > 0))
    throw std::invalid_argument("catch-up: bad fetch config");
  cfg_ = std::move(cfg);
  done_ = std::move(done);
  rng_ = base::ProtocolRng(cfg_.seed ? cfg_.seed : base::random_seed());
  started_ = sched_.now();
  excluded_.clear();
  busy_.clear();
  last_reason_.clear();
  attempts_ = 0;
  fresh_ = 0;
  std::weak_ptr<bool> alive = alive_;
  deadline_ = sched_.schedule(cfg_.deadline, [this, alive] {
    if (!alive.lock() || !done_) return;
    deadline_ = 0;
    finish(false, "deadline:" + (last_reason_.empty() ? std::string("none") : last_reason_));
  });
  // Through the scheduler, so that done never runs inside start().
  retry_ = sched_.schedule(Millis(0), [this, alive] {
    if (!alive.lock() || !done_) return;
    retry_ = 0;
    try_next();
  });
}

void CatchUpClient::cancel() {
  if (!done_) return;
  finish(false, "cancelled");
}

// Picks a live peer not asked yet (or busy last round), the first of cfg_.prefer that is one, else
// one at random; with none left, waits for busy ones or gives up.
void CatchUpClient::try_next() {
  std::vector<PeerRef> cands;
  for (auto& p : peers_.live_peers()) {
    if (p.id == transport_.local_id()) continue;
    if (!excluded_.count(p.id) && !busy_.count(p.id)) cands.push_back(std::move(p));
  }
  if (cands.empty()) {
    if (!busy_.empty()) {
      spdlog::debug("catch-up: every peer left to ask is busy; asking again in {} ms",
                    cfg_.busy_retry.count());
      std::weak_ptr<bool> alive = alive_;
      retry_ = sched_.schedule(cfg_.busy_retry, [this, alive] {
        if (!alive.lock() || !done_) return;
        retry_ = 0;
        busy_.clear();
        try_next();
      });
      return;
    }
    // Nobody at all, or everyone ruled out (refused, failed, no trained state): give up at once.
    finish(false, attempts_ == 0 ? "no-peer" : last_reason_);
    return;
  }
  std::size_t pick = cands.size();
  for (const auto& id : cfg_.prefer) {
    const auto it = std::find_if(cands.begin(), cands.end(), [&](const PeerRef& c) { return c.id == id; });
    if (it != cands.end()) {
      pick = std::size_t(it - cands.begin());
      break;
    }
  }
  if (pick == cands.size()) pick = rng_.below(cands.size());
  const PeerRef p = cands[pick];
  ++attempts_;
  Attempt a;
  a.seq = ++seq_;
  a.peer = p.id;
  at_ = std::move(a);
  arm_timer(cfg_.answer_timeout, CatchUpFailure::TimeoutConnect);
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = at_->seq;
  transport_.connect(
      p.addr, [this, alive, seq, id = p.id](net::ConnectionPtr c, const net::CloseCause& err) {
        if (!alive.lock()) return;
        if (!at_ || at_->seq != seq || at_->phase != Phase::Connecting) {
          if (c) c->close(net::CloseReason::NotNeeded, "catch-up connection");
          return;
        }
        if (!c) {
          spdlog::info("catch-up: cannot reach {}: {}", short_id(id), err);
          return attempt_failed({CatchUpFailure::Connect}, std::nullopt);
        }
        if (c->peer_id() != id) {
          c->close(net::CloseReason::UnexpectedPeer, "catch-up");
          return attempt_failed({CatchUpFailure::Connect}, std::nullopt);
        }
        ask(c);
      });
}

void CatchUpClient::ask(const net::ConnectionPtr& c) {
  Attempt& a = *at_;
  a.id = rng_.nonzero();
  a.conn = c;
  a.phase = Phase::Requested;
  arm_timer(cfg_.answer_timeout, CatchUpFailure::TimeoutAnswer);
  if (!c->send(wire(CatchUpType::Request),
               encode_catch_up_request(
                   {a.id, cfg_.fingerprint, cfg_.n_params, cfg_.resumed_only})))
    attempt_failed({CatchUpFailure::Closed}, std::nullopt);
}

// Busy peers are asked again in a later round; any other failure rules the peer out for this
// fetch. The attempt's connection is closed, after a Cancel when the server is still sending.
void CatchUpClient::attempt_failed(CatchUpFailureReason failure,
                                   std::optional<CatchUpCode> notify) {
  const std::string peer = at_->peer;
  const std::string reason = to_string(failure);
  const bool refused = failure.kind == CatchUpFailure::Refused;
  const bool not_ready = refused && failure.code == CatchUpCode::NotReady;
  const bool fresh = refused && failure.code == CatchUpCode::Fresh;
  if (failure.kind == CatchUpFailure::Busy) {
    busy_.insert(peer);
    spdlog::debug("catch-up: {} is busy", short_id(peer));
  } else if (not_ready && cfg_.resumed_only) {
    // It carries the run on (it did not say fresh) and is about to take its first step.
    busy_.insert(peer);
    spdlog::debug("catch-up: {} carries the run on but has not taken a step yet", short_id(peer));
  } else {
    excluded_.insert(peer);
    if (not_ready) spdlog::info("catch-up: {} has no trained state yet", short_id(peer));
    else if (fresh)  // a first start of a cohort hears this from up to max_fresh members
      spdlog::debug("catch-up: {} started from its own initial weights too", short_id(peer));
    else
      spdlog::warn("catch-up: fetching from {} failed: {}", short_id(peer), reason);
  }
  last_reason_ = not_ready ? "not-ready" : fresh ? "fresh" : reason;
  if (fresh && ++fresh_ >= cfg_.max_fresh) {
    end_attempt(reason);
    finish(false, "fresh");
    return;
  }
  if (notify && at_->conn && at_->conn->is_open())
    at_->conn->send(wire(CatchUpType::CancelFetch), encode_catch_up_code(at_->id, *notify));
  end_attempt(reason);
  try_next();
}

void CatchUpClient::end_attempt(const std::string& reason) {
  if (at_->timer) sched_.cancel(at_->timer);
  auto conn = at_->conn;
  at_.reset();  // first: the close below reports on_closed for a connection no longer ours
  if (conn) conn->close(net::CloseReason::Failed, "catch-up: " + reason);
}

void CatchUpClient::finish(bool ok, std::string reason, core::Checkpoint state) {
  if (deadline_) sched_.cancel(deadline_);
  if (retry_) sched_.cancel(retry_);
  deadline_ = retry_ = 0;
  CatchUpResult r;
  r.ok = ok;
  r.reason = std::move(reason);
  r.ms = static_cast<double>((sched_.now() - started_).count());
  r.attempts = attempts_;
  if (at_) {
    r.from = at_->peer;
    r.bytes = at_->data.size();
    end_attempt(ok ? "done" : r.reason);
  }
  r.state = std::move(state);
  auto done = std::move(done_);
  done_ = nullptr;
  done(std::move(r));
}

void CatchUpClient::arm_timer(Millis d, CatchUpFailure reason) {
  const std::uint64_t seq = at_->seq;
  rearm(sched_, at_->timer, d, alive_, [this, seq, reason] {
    if (!at_ || at_->seq != seq) return;
    at_->timer = 0;
    attempt_failed({reason}, CatchUpCode::Timeout);
  });
}

bool CatchUpClient::is_current(const net::ConnectionPtr& c, std::uint64_t id) const {
  return at_ && at_->conn == c && at_->id == id && id != 0;
}

// Anything that does not fit the fetch in flight: the connection is closed, and the attempt (if
// it was this connection's) fails.
void CatchUpClient::violation(const net::ConnectionPtr& c, const std::string& what) {
  spdlog::warn("catch-up: protocol violation from {}: {}", short_id(c->peer_id()), what);
  if (at_ && at_->conn == c)
    return attempt_failed({CatchUpFailure::Protocol}, CatchUpCode::Protocol);
  c->close(net::CloseReason::ProtocolViolation, "catch-up: " + what);
}

void CatchUpClient::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& b) {
  switch (type) {
    case wire(CatchUpType::Accept):
    case wire(CatchUpType::Busy):
    case wire(CatchUpType::Refuse): return on_answer(c, type, b);
    case wire(CatchUpType::Header): return on_header(c, b);
    case wire(CatchUpType::Chunk): return on_chunk(c, b);
    case wire(CatchUpType::End): return on_end(c, b);
    case wire(CatchUpType::Abort): return on_abort(c, b);
    default: return violation(c, "unknown message type " + std::to_string(type));
  }
}

void CatchUpClient::on_answer(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& b) {
  std::uint64_t id = 0;
  std::optional<CatchUpCode> code;
  if (type == wire(CatchUpType::Refuse)) {
    auto m = try_decode(b, decode_catch_up_code);
    if (!m) return violation(c, "malformed refuse");
    id = m->id;
    code = m->code;
  } else {
    auto m = try_decode(b, decode_id);
    if (!m) return violation(c, "malformed answer");
    id = m->exchange_id;
  }
  if (!is_current(c, id) || at_->phase != Phase::Requested) return violation(c, "unexpected answer");
  if (type == wire(CatchUpType::Busy)) return attempt_failed({CatchUpFailure::Busy}, std::nullopt);
  if (code) return attempt_failed({CatchUpFailure::Refused, *code}, std::nullopt);
  at_->phase = Phase::Accepted;
  arm_timer(cfg_.state_timeout, CatchUpFailure::TimeoutState);
}

std::uint64_t CatchUpClient::min_bytes() const {
  const std::uint64_t n = cfg_.n_params, k = cfg_.n_opt_state;
  return core::encoded_checkpoint_bytes(n, k, n * k, 0);
}

std::uint64_t CatchUpClient::max_bytes() const {
  const std::uint64_t n = cfg_.n_params, k = cfg_.n_opt_state;
  return core::encoded_checkpoint_bytes(n, k, n * k, cfg_.max_meta_bytes);
}

// The announced length is bounded by our own model's state size before anything is reserved.
void CatchUpClient::on_header(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_header);
  if (!m) return violation(c, "malformed header");
  if (!is_current(c, m->id) || at_->phase != Phase::Accepted) return violation(c, "unexpected header");
  if (m->fingerprint != cfg_.fingerprint) {
    spdlog::warn("catch-up: {} offers the state of another model", short_id(at_->peer));
    return attempt_failed({CatchUpFailure::InvalidFingerprint}, CatchUpCode::Fingerprint);
  }
  if (m->total_bytes < min_bytes() || m->total_bytes > max_bytes()) {
    spdlog::warn("catch-up: {} announces {} bytes; our model's state takes {} to {}",
                 short_id(at_->peer), m->total_bytes, min_bytes(), max_bytes());
    return attempt_failed({CatchUpFailure::InvalidLength}, CatchUpCode::Invalid);
  }
  at_->header = *m;
  at_->phase = Phase::Receiving;
  at_->data.reserve(static_cast<std::size_t>(m->total_bytes));
  arm_timer(
      transfer_deadline(cfg_.transfer_timeout_floor, cfg_.min_rate_bytes_per_s, m->total_bytes),
      CatchUpFailure::TimeoutTransfer);
  spdlog::info("catch-up: receiving the state at step {} ({} bytes) from {}", m->step,
               m->total_bytes, short_id(at_->peer));
}

void CatchUpClient::on_chunk(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto v = try_decode(b, decode_chunk);
  if (!v) return violation(c, "malformed chunk");
  if (!is_current(c, v->exchange_id) || at_->phase != Phase::Receiving)
    return violation(c, "unexpected chunk");
  Attempt& a = *at_;
  const std::uint64_t have = a.data.size();
  if (v->offset != have || v->size > a.header.total_bytes - have) {
    spdlog::warn("catch-up: chunk from {} at offset {} (+{}) does not fit {} bytes",
                 short_id(a.peer), v->offset, v->size, a.header.total_bytes);
    return attempt_failed({CatchUpFailure::InvalidLength}, CatchUpCode::Invalid);
  }
  const std::uint8_t* p = b.data() + kChunkHeaderBytes;
  a.crc = core::crc32_update(a.crc, p, v->size);
  a.data.insert(a.data.end(), p, p + v->size);
}

void CatchUpClient::on_end(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_end);
  if (!m) return violation(c, "malformed end");
  if (!is_current(c, m->id) || at_->phase != Phase::Receiving) return violation(c, "unexpected end");
  if (at_->data.size() != at_->header.total_bytes) {
    spdlog::warn("catch-up: {} ended after {} of {} bytes", short_id(at_->peer),
                 at_->data.size(), at_->header.total_bytes);
    return attempt_failed({CatchUpFailure::InvalidLength}, CatchUpCode::Invalid);
  }
  if (m->crc32 != at_->crc)
    return attempt_failed({CatchUpFailure::InvalidChecksum}, CatchUpCode::Invalid);
  CatchUpFailure reason{};
  auto state = validate(&reason);
  if (!state) return attempt_failed({reason}, CatchUpCode::Invalid);
  spdlog::info("catch-up: got the state at step {} from {}", state->step, short_id(at_->peer));
  finish(true, "", std::move(*state));
}

void CatchUpClient::on_abort(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_code);
  if (!m) return violation(c, "malformed abort");
  if (!is_current(c, m->id) || at_->phase == Phase::Requested)
    return violation(c, "unexpected abort");
  attempt_failed({CatchUpFailure::PeerAbort, m->code}, std::nullopt);
}

void CatchUpClient::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  if (!at_ || at_->conn != c) return;
  spdlog::debug("catch-up: connection to {} closed: {}", short_id(at_->peer), reason);
  attempt_failed({CatchUpFailure::Closed}, std::nullopt);
}

// The decoder checks the layout, every size against the bytes present, and the embedded
// checksum; then the state must be our model's, with the counters the header announced, and
// every value finite (a NaN would poison the swarm at our first exchange).
std::optional<core::Checkpoint> CatchUpClient::validate(CatchUpFailure* reason) const {
  const Attempt& a = *at_;
  core::Checkpoint st;
  try {
    st = core::decode_checkpoint(a.data.data(), a.data.size(), "state from " + short_id(a.peer));
  } catch (const core::CheckpointError& e) {
    spdlog::warn("catch-up: {}", e.what());
    *reason = CatchUpFailure::InvalidDecode;
    return std::nullopt;
  }
  bool sizes = st.params.size() == cfg_.n_params && st.opt_state.size() == cfg_.n_opt_state;
  for (const auto& v : st.opt_state) sizes = sizes && v.size() == cfg_.n_params;
  const auto& h = a.header;
  std::optional<CatchUpFailure> bad;
  if (st.fingerprint != cfg_.fingerprint) bad = CatchUpFailure::InvalidFingerprint;
  else if (!sizes) bad = CatchUpFailure::InvalidSize;
  else if (st.step != h.step || st.epoch != h.epoch || st.samples != h.samples)
    bad = CatchUpFailure::InvalidCounters;
  if (bad) {
    *reason = *bad;
    return std::nullopt;
  }
  auto finite = [](const std::vector<float>& v) {
    bool ok = true;
    for (float x : v) ok &= std::isfinite(x);  // no early exit: the loop vectorizes
    return ok;
  };
  bool ok = finite(st.params);
  for (const auto& v : st.opt_state) ok = ok && finite(v);
  if (!ok) {
    *reason = CatchUpFailure::InvalidNonFinite;
    return std::nullopt;
  }
  return st;
}

}  // namespace gossiptrain::gossip
