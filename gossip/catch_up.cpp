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
#include "gossip/catch_up.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

#include "gossip/dispatcher.hpp"

namespace gossiptrain::gossip {

namespace {
using net::Millis;
std::string short_id(const std::string& id) { return id.substr(0, 8); }

// Decodes b with decode; a malformed message (base::DecodeError) is logged and gives nullopt, and
// the caller closes the connection as a protocol violation.
template <typename Decode>
auto try_decode(const net::Bytes& b, Decode decode) -> std::optional<decltype(decode(b))> {
  try {
    return decode(b);
  } catch (const base::DecodeError& e) {
    spdlog::warn("catch-up: malformed message ({} bytes): {}", b.size(), e.what());
    return std::nullopt;
  }
}

// (Re)arms a timer: cancels the one it holds, then runs fn after d unless the owner is gone.
template <typename Fn>
void rearm(net::Scheduler& sched, net::Scheduler::TimerId& timer, Millis d,
           std::weak_ptr<bool> alive, Fn fn) {
  if (timer) sched.cancel(timer);
  timer = sched.schedule(d, [alive = std::move(alive), fn = std::move(fn)]() mutable {
    if (alive.lock()) fn();
  });
}

// Deadline of a transfer of `bytes`: a floor plus the time at the slowest rate we accept.
Millis transfer_deadline(Millis floor, double min_rate, std::uint64_t bytes) {
  return floor + Millis(static_cast<std::int64_t>(1000.0 * static_cast<double>(bytes) / min_rate));
}
}  // namespace

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
  else if (n == 0) refuse = CatchUpCode::NotReady;
  else if (m->n_params != n) refuse = CatchUpCode::Size;
  if (refuse) {
    const auto level = *refuse == CatchUpCode::NotReady ? spdlog::level::debug : spdlog::level::warn;
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
  conn->close("catch-up cancelled by the fetcher");
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
    conn->close("catch-up: " + reason);
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
  c->close("catch-up protocol violation: " + what);
}

void CatchUpServer::on_closed(const net::ConnectionPtr& c, const std::string& reason) {
  if (!cur_ || cur_->conn != c) return;
  spdlog::debug("catch-up: connection to {} closed: {}", short_id(cur_->peer), reason);
  finish(false, "closed");
}

// ------------------------------------------------------------------------------------------------
// Fetching side

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

// Picks a random live peer not asked yet (or busy last round); with none left, waits for busy ones
// or gives up.
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
  const PeerRef p = cands[rng_.below(cands.size())];
  ++attempts_;
  Attempt a;
  a.seq = ++seq_;
  a.peer = p.id;
  at_ = std::move(a);
  arm_timer(cfg_.answer_timeout, "timeout:connect");
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = at_->seq;
  transport_.connect(p.addr, [this, alive, seq, id = p.id](net::ConnectionPtr c,
                                                           const std::string& err) {
    if (!alive.lock()) return;
    if (!at_ || at_->seq != seq || at_->phase != Phase::Connecting) {
      if (c) c->close("catch-up connection no longer needed");
      return;
    }
    if (!c) {
      spdlog::info("catch-up: cannot reach {}: {}", short_id(id), err);
      return attempt_failed("connect", std::nullopt);
    }
    if (c->peer_id() != id) {
      c->close("catch-up: unexpected peer id");
      return attempt_failed("connect", std::nullopt);
    }
    ask(c);
  });
}

void CatchUpClient::ask(const net::ConnectionPtr& c) {
  Attempt& a = *at_;
  a.id = rng_.nonzero();
  a.conn = c;
  a.phase = Phase::Requested;
  arm_timer(cfg_.answer_timeout, "timeout:answer");
  if (!c->send(wire(CatchUpType::Request),
               encode_catch_up_request({a.id, cfg_.fingerprint, cfg_.n_params})))
    attempt_failed("closed", std::nullopt);
}

// Busy peers are asked again in a later round; any other failure rules the peer out for this
// fetch. The attempt's connection is closed, after a Cancel when the server is still sending.
void CatchUpClient::attempt_failed(const std::string& reason, std::optional<CatchUpCode> notify) {
  const std::string peer = at_->peer;
  if (reason == "busy") {
    busy_.insert(peer);
    spdlog::debug("catch-up: {} is busy", short_id(peer));
  } else {
    excluded_.insert(peer);
    if (reason == "refused:not-ready")
      spdlog::info("catch-up: {} has no trained state yet", short_id(peer));
    else
      spdlog::warn("catch-up: fetching from {} failed: {}", short_id(peer), reason);
  }
  last_reason_ = reason == "refused:not-ready" ? "not-ready" : reason;
  if (notify && at_->conn && at_->conn->is_open())
    at_->conn->send(wire(CatchUpType::CancelFetch), encode_catch_up_code(at_->id, *notify));
  end_attempt(reason);
  try_next();
}

void CatchUpClient::end_attempt(const std::string& reason) {
  if (at_->timer) sched_.cancel(at_->timer);
  auto conn = at_->conn;
  at_.reset();  // first: the close below reports on_closed for a connection no longer ours
  if (conn) conn->close("catch-up: " + reason);
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

void CatchUpClient::arm_timer(Millis d, const std::string& reason) {
  const std::uint64_t seq = at_->seq;
  rearm(sched_, at_->timer, d, alive_, [this, seq, reason] {
    if (!at_ || at_->seq != seq) return;
    at_->timer = 0;
    attempt_failed(reason, CatchUpCode::Timeout);
  });
}

bool CatchUpClient::is_current(const net::ConnectionPtr& c, std::uint64_t id) const {
  return at_ && at_->conn == c && at_->id == id && id != 0;
}

// Anything that does not fit the fetch in flight: the connection is closed, and the attempt (if
// it was this connection's) fails.
void CatchUpClient::violation(const net::ConnectionPtr& c, const std::string& what) {
  spdlog::warn("catch-up: protocol violation from {}: {}", short_id(c->peer_id()), what);
  if (at_ && at_->conn == c) return attempt_failed("protocol", CatchUpCode::Protocol);
  c->close("catch-up protocol violation: " + what);
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
  if (type == wire(CatchUpType::Busy)) return attempt_failed("busy", std::nullopt);
  if (code) return attempt_failed("refused:" + std::string(catch_up_code_name(*code)), std::nullopt);
  at_->phase = Phase::Accepted;
  arm_timer(cfg_.state_timeout, "timeout:state");
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
    return attempt_failed("invalid:fingerprint", CatchUpCode::Fingerprint);
  }
  if (m->total_bytes < min_bytes() || m->total_bytes > max_bytes()) {
    spdlog::warn("catch-up: {} announces {} bytes; our model's state takes {} to {}",
                 short_id(at_->peer), m->total_bytes, min_bytes(), max_bytes());
    return attempt_failed("invalid:length", CatchUpCode::Invalid);
  }
  at_->header = *m;
  at_->phase = Phase::Receiving;
  at_->data.reserve(static_cast<std::size_t>(m->total_bytes));
  arm_timer(transfer_deadline(cfg_.transfer_timeout_floor, cfg_.min_rate_bytes_per_s,
                              m->total_bytes),
            "timeout:transfer");
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
    return attempt_failed("invalid:length", CatchUpCode::Invalid);
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
    return attempt_failed("invalid:length", CatchUpCode::Invalid);
  }
  if (m->crc32 != at_->crc) return attempt_failed("invalid:checksum", CatchUpCode::Invalid);
  std::string reason;
  auto state = validate(&reason);
  if (!state) return attempt_failed(reason, CatchUpCode::Invalid);
  spdlog::info("catch-up: got the state at step {} from {}", state->step, short_id(at_->peer));
  finish(true, "", std::move(*state));
}

void CatchUpClient::on_abort(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = try_decode(b, decode_catch_up_code);
  if (!m) return violation(c, "malformed abort");
  if (!is_current(c, m->id) || at_->phase == Phase::Requested)
    return violation(c, "unexpected abort");
  attempt_failed("peer-abort:" + std::string(catch_up_code_name(m->code)), std::nullopt);
}

void CatchUpClient::on_closed(const net::ConnectionPtr& c, const std::string& reason) {
  if (!at_ || at_->conn != c) return;
  spdlog::debug("catch-up: connection to {} closed: {}", short_id(at_->peer), reason);
  attempt_failed("closed", std::nullopt);
}

// The decoder checks the layout, every size against the bytes present, and the embedded
// checksum; then the state must be our model's, with the counters the header announced, and
// every value finite (a NaN would poison the swarm at our first exchange).
std::optional<core::Checkpoint> CatchUpClient::validate(std::string* reason) const {
  const Attempt& a = *at_;
  core::Checkpoint st;
  try {
    st = core::decode_checkpoint(a.data.data(), a.data.size(), "state from " + short_id(a.peer));
  } catch (const core::CheckpointError& e) {
    spdlog::warn("catch-up: {}", e.what());
    *reason = "invalid:decode";
    return std::nullopt;
  }
  bool sizes = st.params.size() == cfg_.n_params && st.opt_state.size() == cfg_.n_opt_state;
  for (const auto& v : st.opt_state) sizes = sizes && v.size() == cfg_.n_params;
  const auto& h = a.header;
  if (st.fingerprint != cfg_.fingerprint) *reason = "invalid:fingerprint";
  else if (!sizes) *reason = "invalid:size";
  else if (st.step != h.step || st.epoch != h.epoch || st.samples != h.samples)
    *reason = "invalid:counters";
  if (!reason->empty()) return std::nullopt;
  auto finite = [](const std::vector<float>& v) {
    bool ok = true;
    for (float x : v) ok &= std::isfinite(x);  // no early exit: the loop vectorizes
    return ok;
  };
  bool ok = finite(st.params);
  for (const auto& v : st.opt_state) ok = ok && finite(v);
  if (!ok) {
    *reason = "invalid:non-finite";
    return std::nullopt;
  }
  return st;
}

}  // namespace gossiptrain::gossip
