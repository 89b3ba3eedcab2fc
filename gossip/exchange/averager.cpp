// The averaging exchange's two threads (protocol in exchange_protocol.hpp). The training thread's
// between_steps takes the snapshot a new or accepted exchange needs, takes the partner's chunks
// received so far into the buffers (snapshot_buffers.hpp), measures ||r - s|| when a norm bound
// asks for it, and applies a committed mix; the protocol thread runs ExchangeProtocol with this
// averager as its port: timers (deadline.hpp), dialling and the connection pool
// (exchange_conns.hpp), the mutex-guarded handoff below, statistics and events.
//
// Cost on the training thread, per exchange: the snapshot (params -> chunk messages, streamed to
// the protocol thread as they fill, then params -> s unless in direct mode), the partner's chunks
// uploaded (and decoded) at each step boundary while they arrive (direct mode: kept as received),
// and the mix. The protocol thread never copies payload bytes: chunks go out as cut and come in as
// received, and received ones go back to the transport's buffer pool once used (recycle()).
#include "gossip/exchange/averager.hpp"

#include <cmath>
#include <stdexcept>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "base/short_id.hpp"
#include "gossip/dispatcher.hpp"
#include "net/buffer_pool.hpp"

namespace gossiptrain::gossip {

namespace {
using base::short_id;
// While a snapshot is being cut into chunks, the sender is woken every this many chunks.
constexpr std::size_t kChunksPerWakeup = 8;

// The slow link's wire, where it applies: the configured wire is fp32 and does not change.
std::optional<WireFormat> slow_link_wire(const AveragerConfig& c) {
  if (c.wire != WireFormat::Fp32 || c.finish_wire) return std::nullopt;
  return c.slow_link_wire;
}

ExchangeConfig exchange_config(const AveragerConfig& c) {
  ExchangeConfig e;
  e.fingerprint = c.fingerprint;
  e.wire = c.wire;
  e.finish_wire = c.finish_wire;
  e.link = c.link;
  e.link.slow_wire = slow_link_wire(c);
  e.weight_by_samples = c.weight_by_samples;
  e.max_tries = c.max_tries;
  e.choice = c.choice;
  e.robust = c.robust;
  // int4-rel's vector is decoded against our snapshot at a step boundary: the vote waits for it.
  const bool relative = c.wire == WireFormat::Int4Rel || c.finish_wire == WireFormat::Int4Rel;
  e.needs_norm = c.max_diff_norm > 0 || c.robust.mix == MixMode::Clipped || relative;
  // Our fp32 chunk messages hold exactly the floats we sent, on either path and any backend: the
  // protocol thread measures ||r - s|| as the chunks arrive, and the vote waits for no step
  // boundary (on a GPU one per exchange saved, with steps well under a millisecond).
  e.fast_norm = c.wire == WireFormat::Fp32;
  e.answer_timeout = c.answer_timeout;
  e.transfer_timeout_floor = c.transfer_timeout_floor;
  e.silence_floor = c.silence_floor;
  e.min_rate_bytes_per_s = c.min_rate_bytes_per_s;
  e.chunk_bytes = c.chunk_bytes;
  e.send_retry = c.send_retry;
  e.hold_max = c.hold_max;
  e.seed = c.seed ? c.seed : base::random_seed();
  return e;
}

// Direct mode: values element-wise on the wire (not the blockwise int8, int4, int2, whose block
// scales come first).
bool direct_mode(const AveragerConfig& c, const kernels::Backend& be) {
  return c.direct && be.host_memory() && !is_blockwise(c.wire) && !c.error_feedback &&
         !c.finish_wire;
}

}  // namespace

void check_config(const AveragerConfig& c) {
  if (c.gossip_every < 1) throw std::invalid_argument("averager: gossip_every must be >= 1");
  if (c.max_tries < 1) throw std::invalid_argument("averager: max_tries must be >= 1");
  if (c.chunk_bytes < 1) throw std::invalid_argument("averager: chunk_bytes must be >= 1");
  if (!(c.min_rate_bytes_per_s > 0))
    throw std::invalid_argument("averager: min_rate_bytes_per_s must be > 0");
  if (!(c.max_diff_norm >= 0)) throw std::invalid_argument("averager: max_diff_norm < 0");
  if (!(c.settle_distance >= 0)) throw std::invalid_argument("averager: settle_distance < 0");
  // Three levels a value: the residual is as large as the values it rides on and grows with them
  // (docs/communication.md, "Low-bit wires").
  if (c.error_feedback && c.wire == WireFormat::Int2)
    throw std::invalid_argument(
        "averager: wire int2 with error feedback diverges (docs/communication.md): use int4, or "
        "int2 without error feedback");
  if (c.error_feedback && c.finish_wire == WireFormat::Int2)
    throw std::invalid_argument(
        "averager: finish wire int2 with error feedback diverges (docs/communication.md)");
  if (c.slow_link_wire == WireFormat::Int2)
    throw std::invalid_argument(
        "averager: slow link wire int2 (always with error feedback) diverges");
  if (c.slow_link_wire && !(c.link.slow_bytes_per_s > 0 && c.link.alpha > 0 && c.link.alpha <= 1))
    throw std::invalid_argument("averager: bad slow link settings");
  if (c.finish_wire && !(c.finish_from > 0 && c.finish_from <= 1))
    throw std::invalid_argument("averager: finish_from must be in (0, 1]");
}

Averager::Averager(AveragerConfig cfg, net::Transport& transport, Dispatcher& dispatcher,
                   const PeerDirectory& peers, kernels::Backend& backend)
    : Averager(std::move(cfg), transport, peers, backend) {
  dispatcher.add(kExchangeTypeFirst, kExchangeTypeLast, this);
}

Averager::Averager(AveragerConfig cfg, net::Transport& transport, const PeerDirectory& peers,
                   kernels::Backend& backend)
    : cfg_(std::move(cfg)),
      transport_(transport),
      sched_(transport.scheduler()),
      be_(backend),
      direct_(direct_mode(cfg_, backend)),
      protocol_(exchange_config(cfg_), *this, peers, transport.local_id()),
      conns_(sched_, cfg_.idle_close,
             [this](const net::ConnectionPtr& c) { return protocol_.in_flight_on(c); }),
      bound_(cfg_.robust),
      fault_(cfg_.fault, backend),
      eager_rng_(cfg_.seed ? ~cfg_.seed : base::random_seed()),
      peers_(peers) {
  check_config(cfg_);
  set_max_rate(cfg_.max_rate_bytes_per_s);
  if (cfg_.chunk_bytes % 4 != 0)
    throw std::invalid_argument("averager: chunk_bytes must be a multiple of 4");
  buffers_ = make_buffers(direct_, cfg_.wire);
  // Error feedback always: the wire rounds, and on skewed data the residual is what carries a
  // peer's small changes across (docs/communication.md, "Low-bit wires").
  if (const auto w = slow_link_wire(cfg_))
    slow_buffers_ = SnapshotBuffers::make(
        false, *w, cfg_.chunk_bytes, be_, [this](net::Bytes&& b) { recycle(std::move(b)); }, true);
  next_initiate_step_ = cfg_.gossip_every;
}

Averager::~Averager() { alive_.reset(); }

void Averager::partner_lost(const std::string& peer) {
  post([this, peer] { protocol_.partner_lost(peer); });
}

void Averager::partner_suspected(const std::string& peer, bool suspected) {
  post([this, peer, suspected] { protocol_.partner_suspected(peer, suspected); });
}

void Averager::set_max_rate(double bytes_per_s) {
  const bool ok = bytes_per_s == 0 || bytes_per_s >= cfg_.min_rate_bytes_per_s;
  if (!std::isfinite(bytes_per_s) || !ok)
    throw std::invalid_argument("averager: the send rate cap must be 0 (none) or at least " +
                                std::to_string(cfg_.min_rate_bytes_per_s) + " bytes/s");
  max_rate_.store(bytes_per_s);
}

AveragerStats Averager::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

bool Averager::in_exchange() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_ || committed_unreported_;
}

template <typename Fn>
void Averager::post(Fn fn) {
  std::weak_ptr<bool> alive = alive_;
  sched_.post([alive, fn = std::move(fn)]() mutable {
    if (alive.lock()) fn();
  });
}

std::unique_ptr<SnapshotBuffers> Averager::make_buffers(bool direct, WireFormat wire) {
  return SnapshotBuffers::make(
      direct, wire, cfg_.chunk_bytes, be_, [this](net::Bytes&& b) { recycle(std::move(b)); },
      cfg_.error_feedback);
}

SnapshotBuffers& Averager::buffers(WireFormat w) {
  if (slow_buffers_ && w != cfg_.wire) return *slow_buffers_;
  return *buffers_;
}

void Averager::recycle(net::Bytes&& b) { transport_.buffers().recycle(std::move(b)); }

void Averager::recycle_all(ChunkList& chunks) {
  for (auto& c : chunks) recycle(std::move(c));
  chunks.clear();
}

// ------------------------------------------------------------------------------------------------
// Training thread

void Averager::ensure_buffers(core::StepContext& ctx) {
  if (&ctx.backend != &be_)
    throw std::logic_error("averager: between_steps called with another backend");
  if (n_params_.load() == ctx.n_params) return;
  if (n_params_.load() != 0)
    throw std::logic_error("averager: the parameter count changed between steps");
  n_params_.store(ctx.n_params);
  buffers_->allocate(ctx.n_params);
  // Where our norm starts, for the warm-up's refusals (RobustBound::set_initial_norm): read once,
  // at the first step boundary of a run that starts from its beginning.
  if (cfg_.robust.mix == MixMode::Clipped && ctx.step < cfg_.robust.gap_min_steps)
    bound_.set_initial_norm(std::sqrt(buffers_->sq_norm(ctx.params, ctx.n_params)));
  if (slow_buffers_) slow_buffers_->allocate(ctx.n_params);
  if (!pending_residual_.empty()) buffers_->set_residual(std::exchange(pending_residual_, {}));
  if (slow_buffers_ && !pending_slow_residual_.empty())
    slow_buffers_->set_residual(std::exchange(pending_slow_residual_, {}));
}

void Averager::set_slow_residual(std::vector<float> e) {
  if (!slow_buffers_) return;
  if (n_params_.load() == 0) pending_slow_residual_ = std::move(e);
  else slow_buffers_->set_residual(e);
}

void Averager::set_residual(std::vector<float> e) {
  if (n_params_.load() == 0) pending_residual_ = std::move(e);
  else buffers_->set_residual(e);
}

// Our snapshot, handed to the protocol thread for exchange seq as its chunks fill, so streaming
// starts after the first few chunks instead of after the whole copy (seq 0: a standing snapshot,
// published by the caller once whole). The parameters cannot change meanwhile: this is the
// training thread. What we send: our parameters, or a faulty peer's corruption of them.
ChunkSetPtr Averager::snapshot(core::StepContext& ctx, std::uint64_t seq, WireFormat wire) {
  const float* x = fault_.active() ? fault_.source(ctx.params, ctx.n_params) : ctx.params;
  std::size_t total = 0;
  auto begun = [&](const ChunkSetPtr& own) {
    total = own->chunks.size();
    if (seq) post([this, seq, own] { protocol_.snapshot_ready(seq, own); });
  };
  auto filled = [&](std::size_t k) {
    if (seq && (k % kChunksPerWakeup == 0 || k == total))
      post([this, seq] { protocol_.chunks_ready(seq); });
  };
  ChunkSetPtr own = buffers(wire).snapshot(x, ctx.n_params, begun, filled);
  if (seq) spdlog::trace("averager: #{} snapshot taken ({} bytes)", seq, own->payload_bytes);
  else spdlog::trace("averager: standing snapshot taken at step {}", ctx.step);
  return own;
}

// The bounds on a measured ||r - s||: the optional fixed one, and with clipped mixing the
// adaptive one (RobustBound: tau, and the refusals as anomalous). A faulty peer never refuses: it
// is there to be refused by others. (Training thread, or the protocol thread's fast norm.)
Verdict Averager::judge_at(const std::string& partner, double norm,
                           const std::function<double()>& own_norm, net::Millis at) {
  Verdict v;
  v.norm = norm;
  if (cfg_.max_diff_norm > 0 && !(v.norm <= cfg_.max_diff_norm))
    v.refused = ExchangeFailure::InvalidNorm;
  if (cfg_.robust.mix != MixMode::Clipped) return v;
  const RobustBound::Judgement j = bound_.judge(partner, norm, own_norm, at);
  v.tau = j.tau;
  if (j.suspect)
    spdlog::info(
        "averager: ||r - s|| = {:.4g} from {} is far {} ({} in a row): clipped to {:.4g}{}", norm,
        short_id(partner),
        j.gap      ? "with a progress gap"
        : j.odd    ? "as every partner so far (the warm-up; we may be the odd one out)"
        : j.replay ? "persistently, sending the same vector again (a replay)"
                   : "persistently",
        j.streak, j.tau,
        j.floored ? " (the floor)" : "");
  if (!j.why.empty() && !fault_.active()) {
    if (!v.refused) {
      v.refused = ExchangeFailure::Anomalous;
      v.bans = j.bans;
    }
    spdlog::info(
        "averager: ||r - s|| = {:.4g} from {} is anomalous ({}): tau {:.4g}, ratio {:.3g}, "
        "partner's typical ratio {:.3g}",
        norm, short_id(partner), j.why, j.tau, j.ratio, j.typical);
  }
  return v;
}

Averager::StepWork Averager::take_work(const core::StepContext& ctx) {
  StepWork w;
  std::lock_guard<std::mutex> lk(mu_);
  w.mix.swap(pending_);
  w.seq = seq_;
  if (active_) {
    w.in.swap(incoming_);
    w.in_wire = incoming_wire_;
    w.norm_vote = incoming_complete_ && incoming_norm_;
    if (w.norm_vote) {
      w.partner = incoming_partner_;
      w.at = incoming_at_;
    }
    incoming_complete_ = incoming_norm_ = false;
    w.snapshot = std::exchange(want_snapshot_, false);
    w.snapshot_wire = want_wire_;
  }
  bool may_start = ctx.step >= next_initiate_step_;
  // Lingering: past the run's last step (not merely between steps, as while waiting for a cohort).
  const bool lingering = ctx.training_done && ctx.total_steps > 0 && ctx.step >= ctx.total_steps;
  if (!lingering && done_) {
    done_ = false;
    lingering_.store(false);
  }
  if (ctx.training_done) may_start = false;
  if (lingering) {
    if (!done_) {  // what was met while training says nothing about the finished models
      done_ = true;
      lingering_.store(cfg_.settle_distance > 0);
      met_.clear();
    }
    const net::Millis gap = settled_locked() ? cfg_.settle_probe : cfg_.settle_gap;
    may_start = cfg_.settle_distance > 0 && sched_.now() >= last_done_start_ + gap;
    if (may_start && !active_) last_done_start_ = sched_.now();
  }
  // Waiting for an exchange: ask again once the pause after the last failed one is over.
  if (eager_ && !may_start && !ctx.training_done && !pending_ && !committed_unreported_)
    may_start = sched_.now() >= released_at_ + eager_pause_;
  if (!active_ && may_start) {
    active_ = true;
    w.seq = ++seq_;
    w.initiate = true;
    w.snapshot_wire = on_finish_wire_ ? *cfg_.finish_wire : cfg_.wire;
    standing_.reset();  // s is about to be overwritten
  }
  // Idle: keep a snapshot ready, so a partner's request is answered without waiting for a step
  // boundary. It stays valid (nothing applied since) as training goes on, merely older: the mix
  // x += w (r - s) keeps our progress since s. Refreshed every gossip_every steps, and after
  // every exchange (which consumes or invalidates it).
  if (!active_ && (!standing_ || ctx.step >= standing_step_ + cfg_.gossip_every)) {
    w.refresh = true;
    standing_.reset();  // withdrawn while s is overwritten; requests meanwhile wait for it
  }
  return w;
}

// A committed mix first: the snapshot of the next exchange must contain it, and the buffers are
// free for the next exchange once it is applied.
void Averager::apply_mix(core::StepContext& ctx, PendingMix& mix) {
  SnapshotBuffers& b = buffers(mix.c.wire);
  b.switch_to(mix.seq);
  b.receive(mix.rest);
  if (!b.finish())  // decoded at the vote already
    throw std::logic_error("averager: a committed vector does not decode");
  // A faulty peer mixes nothing into itself (its s is the corrupted vector it sent).
  if (!fault_.active())
    b.for_each_float_span([&](std::size_t first, const float* r, const float* s, std::size_t n) {
      be_.mix(ctx.params + first, r, s, n, mix.c.w);
    });
  if (cfg_.robust.mix == MixMode::Clipped && mix.c.norm >= 0)
    bound_.accepted(mix.c.partner, mix.c.norm);
  b.release();  // direct mode's messages (none on the copy path)
  spdlog::trace("averager: #{} mixed with w={}", mix.seq, mix.c.w);
  post([this, s = mix.seq] { protocol_.applied(s); });
}

// The request goes out while we take the snapshot: it overlaps the round trip and the
// responder's own snapshot instead of preceding them.
void Averager::begin_exchange(core::StepContext& ctx, std::uint64_t seq) {
  next_initiate_step_ = ctx.step + cfg_.gossip_every;
  // The next eager retry's pause: 5 to 25 ms, random so that two waiting peers that asked each
  // other at once (both answered BUSY) do not ask again at once.
  eager_pause_ = net::Millis(5 + eager_rng_.below(21));
  const std::int64_t samples = ctx.shard_size;
  post([this, seq, samples] { protocol_.start(seq, samples); });
}

void Averager::maybe_switch_wire(core::StepContext& ctx) {
  if (!cfg_.finish_wire || on_finish_wire_) return;
  const double p = core::progress_of(ctx);
  const bool seen = finish_seen_.load();
  if (!seen && !(p >= 0 && p >= cfg_.finish_from)) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (active_ || pending_ || committed_unreported_) return;  // at the next idle boundary
    active_ = true;  // until the protocol has the new wire: no exchange starts, requests get BUSY
    standing_.reset();
  }
  std::vector<float> e = buffers_->residual();
  buffers_ = make_buffers(false, *cfg_.finish_wire);
  buffers_->allocate(ctx.n_params);
  if (!e.empty()) buffers_->set_residual(e);
  on_finish_wire_ = true;
  spdlog::info("averager: exchanges move to the {} wire at step {} ({})",
               wire_name(*cfg_.finish_wire), ctx.step,
               seen ? "a partner is on it" : "--finish-from reached");
  post([this, w = *cfg_.finish_wire] {
    protocol_.set_wire(w);
    std::lock_guard<std::mutex> lk(mu_);
    active_ = false;
  });
}

void Averager::refresh_standing(core::StepContext& ctx) {
  ChunkSetPtr own = snapshot(ctx, 0, cfg_.wire);
  std::lock_guard<std::mutex> lk(mu_);
  if (active_ && want_snapshot_ && want_wire_ == own->wire) {  // a request came in meanwhile
    want_snapshot_ = false;
    post([this, s = seq_, own] {
      protocol_.snapshot_ready(s, own);
      protocol_.chunks_ready(s);
    });
  } else if (!active_) {
    standing_ = std::move(own);
    standing_step_ = ctx.step;
  }
}

// Only the norm bounds and int4-rel's decoding need the training thread's vote; finiteness was
// checked on arrival.
void Averager::vote_norm(core::StepContext&, const StepWork& w) {
  SnapshotBuffers& b = buffers(w.in_wire);
  if (!b.finish()) {
    spdlog::info("averager: #{} the vector of {} does not decode against ours (int4-rel): steps "
                 "widened",
                 w.seq, short_id(w.partner));
    b.widen();
    Verdict v;
    v.refused = ExchangeFailure::InvalidRange;
    post([this, seq = w.seq, v] { protocol_.validated(seq, v); });
    return;
  }
  b.observe();
  auto own = [&] { return std::sqrt(b.own_sq_norm()); };
  const Verdict v = judge_at(w.partner, std::sqrt(b.sq_diff()), own, w.at);
  spdlog::trace("averager: #{} ||r - s|| = {} (tau {}): {}", w.seq, v.norm, v.tau,
                v.refused ? to_string(*v.refused) : "ok");
  post([this, seq = w.seq, v] { protocol_.validated(seq, v); });
}

void Averager::between_steps(core::StepContext& ctx) {
  // Let the other runnable threads of this machine (our protocol thread first of all) have the CPU
  // now: on an oversubscribed machine (many peers on few cores) a partner's exchange otherwise
  // waits a whole scheduler slice for our next step boundary. Costs nothing on an idle core.
  if (cfg_.yield_between_steps) std::this_thread::yield();
  ensure_buffers(ctx);
  own_samples_.store(ctx.shard_size);
  own_progress_.store(core::progress_of(ctx));
  own_step_.store(ctx.step);
  bound_.set_own_step(ctx.step);
  StepWork w = take_work(ctx);
  if (widen_.exchange(false)) {  // our int4-rel vector did not decode at a partner
    buffers_->widen_all();
    if (slow_buffers_) slow_buffers_->widen_all();
  }
  std::uint64_t failing = w.mix ? w.mix->seq : w.seq;
  try {
    if (w.mix) apply_mix(ctx, *w.mix);
    failing = w.seq;
    if (w.initiate) begin_exchange(ctx, w.seq);
    // Before the norm check: it compares against this exchange's snapshot.
    if (w.snapshot || w.initiate) snapshot(ctx, w.seq, w.snapshot_wire);
    if (w.refresh) refresh_standing(ctx);
    buffers(w.in_wire).switch_to(w.seq);
    if (!w.in.empty()) buffers(w.in_wire).receive(w.in);
    if (w.norm_vote) vote_norm(ctx, w);
    maybe_switch_wire(ctx);
  } catch (const std::exception& e) {
    // A backend failure is not the network's fault: end the exchange cleanly, then let the
    // training loop see the error.
    spdlog::error("averager: failure during an exchange: {}", e.what());
    post([this, failing] { protocol_.backend_failed(failing); });
    throw;
  }
}

// ------------------------------------------------------------------------------------------------
// ExchangePort (protocol thread)

void Averager::arm(Timer t, std::uint64_t seq, net::Millis d) {
  std::weak_ptr<bool> alive = alive_;
  timer(t).arm(sched_, d, [this, alive, t, seq] {
    if (!alive.lock()) return;
    timer(t).fired();
    protocol_.on_timer(t, seq);
  });
}

void Averager::dial(std::uint64_t seq, const PeerRef& p) {
  std::weak_ptr<bool> alive = alive_;
  transport_.connect(
      p.addr, [this, alive, seq, id = p.id](net::ConnectionPtr c, const net::CloseCause& err) {
        if (alive.lock()) protocol_.on_dialled(seq, id, std::move(c), err);
      });
}

std::optional<std::uint64_t> Averager::claim(ChunkSetPtr& own, WireFormat w) {
  std::lock_guard<std::mutex> lk(mu_);
  if (active_) return std::nullopt;
  active_ = true;
  if (standing_ && standing_->wire == w) {
    own.swap(standing_);  // streamed at once
  } else {                // taken at the next step boundary
    want_snapshot_ = true;
    want_wire_ = w;
    // A standing snapshot in the other wire would be stale once this exchange's mix is applied.
    standing_.reset();
  }
  return ++seq_;
}

void Averager::want_snapshot(std::uint64_t seq, WireFormat w) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (seq_ != seq) return;
    want_snapshot_ = true;
    want_wire_ = w;
  }
  request_boundary();
}

void Averager::release(std::uint64_t, bool no_peer) {
  std::lock_guard<std::mutex> lk(mu_);
  active_ = false;
  released_at_ = sched_.now();
  if (no_peer) {
    ++stats_.no_peer;
    return;
  }
  want_snapshot_ = false;
  recycle_all(incoming_);
  incoming_complete_ = incoming_norm_ = false;
}

void Averager::commit(std::uint64_t seq, const Commit& c) {
  std::lock_guard<std::mutex> lk(mu_);
  if (seq_ != seq) throw std::logic_error("averager: committing an exchange not in flight");
  pending_ = PendingMix{seq, c, std::move(incoming_)};
  incoming_.clear();
  incoming_complete_ = incoming_norm_ = false;
  want_snapshot_ = false;
  active_ = false;
  committed_unreported_ = true;
}

void Averager::deliver(std::uint64_t seq, net::Bytes&& chunk, bool complete, bool norm_vote,
                       const std::string& partner, WireFormat wire) {
  std::lock_guard<std::mutex> lk(mu_);
  if (seq_ != seq) return;
  incoming_.push_back(std::move(chunk));
  incoming_wire_ = wire;
  incoming_complete_ = complete;
  incoming_norm_ = norm_vote;
  if (norm_vote) {
    incoming_partner_ = partner;
    incoming_at_ = sched_.now();
  }
}

void Averager::finished(const ExchangeEvent& ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ev.ok) {
      ++stats_.ok;
      if (ev.clip >= kAveragingClip) ++stats_.averaging;
      stats_.weight_sum += ev.effective_w();
    } else {
      ++stats_.failed;
      ++stats_.failed_by_reason[ev.reason()];
      // The partner could not decode our int4-rel vector: widen the range.
      if (ev.failure.kind == ExchangeFailure::PeerAbort && ev.failure.code == ExchangeCode::Range)
        widen_.store(true);
    }
    stats_.bytes_sent += ev.bytes_sent;
    stats_.bytes_received += ev.bytes_received;
  }
  if (on_event_) on_event_(ev);
  if (ev.partner_progress >= 0) {
    if (heard_.size() >= kMaxMet && !heard_.count(ev.partner)) heard_.clear();
    heard_[ev.partner] = {ev.partner_progress, sched_.now()};
  }
  if (!ev.ok) return;
  std::lock_guard<std::mutex> lk(mu_);
  committed_unreported_ = false;
  if (done_ && cfg_.settle_distance > 0 && ev.diff_norm >= 0) {
    // Moved: what we measured of the others before is stale, meet them again.
    if (ev.effective_w() * ev.diff_norm > cfg_.settle_distance / 2 || met_.size() >= kMaxMet)
      met_.clear();
    else
      // A partner known to be training is not waited for: it moves on anyway, and finished peers
      // would pull a slow one from every side.
      met_[ev.partner] = Met{ev.diff_norm, !(ev.partner_progress >= 0 && ev.partner_progress < 1)};
  }
}

// Lingering, this peer does not ask a partner that still trains: the finished models are averaged
// with each other, and a peer that trains on (on its own labels, with skewed shards) pulls only
// those it asks itself (docs/lifecycle.md, "Lingering").
bool Averager::avoid(const std::string& partner) const {
  if (!lingering_.load()) return false;
  const auto it = heard_.find(partner);
  return it != heard_.end() && it->second.first < 1.0 &&
         sched_.now() < it->second.second + kHeardFresh;
}

bool Averager::settled_locked() const {
  for (const auto& [id, m] : met_)
    if (m.partner_done && m.distance > cfg_.settle_distance) return false;
  const std::size_t want =
      std::min(std::size_t(std::max(cfg_.settle_partners, 0)), peers_.live_count());
  return met_.size() >= want;
}

void Averager::ban_started(const BanEvent& b) {
  std::weak_ptr<bool> alive = alive_;
  sched_.schedule(b.duration, [this, alive, partner = b.partner] {
    if (alive.lock() && !banned(partner))
      spdlog::info("averager: ban of {} lifted", short_id(partner));
  });
  if (on_ban_) on_ban_(b);
}

void Averager::count(Counter c) {
  std::lock_guard<std::mutex> lk(mu_);
  if (c == Counter::BusySent) ++stats_.busy_sent;
  else if (c == Counter::RefusedSent) ++stats_.refused_sent;
  else if (c == Counter::Held) ++stats_.held;
  else ++stats_.bans;
}

// ------------------------------------------------------------------------------------------------
// TransportHandler

void Averager::on_connection(const net::ConnectionPtr&, bool) {}

void Averager::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) {
  protocol_.on_message(c, type, std::move(payload));
}

void Averager::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  protocol_.on_closed(c, reason);
}

}  // namespace gossiptrain::gossip
