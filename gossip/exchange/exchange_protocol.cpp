// The averaging exchange's protocol state machine (see exchange_protocol.hpp). Connections: the
// initiator dials a dedicated connection per partner for exchanges (the port's pool), the
// responder answers on the connection the REQUEST came in on. A failed exchange closes its
// connection so no stale chunk can ever reach a later exchange.
//
// Validation: every value of the partner's vector is checked on the wire bytes as each chunk
// arrives (WireChecker), and we vote as soon as the last one is in, so an exchange waits on the
// training thread only twice: for the responder's snapshot and for the mix. Only the optional norm
// bound, which needs our snapshot on the device, is checked at a step boundary (fp32: here).
// This file: the initiator and the responder; exchange_transfer.cpp: the transfer, the vote,
// the commit and the failures, on both sides.
#include "gossip/exchange/exchange_protocol.hpp"

#include <algorithm>
#include "base/assert.hpp"
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "gossip/exchange/exchange_protocol_detail.hpp"
#include "gossip/exchange/partner_schedule.hpp"

namespace gossiptrain::gossip {

using namespace exchange_detail;


double ExchangePort::clock_us() const {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ExchangeProtocol::stamp(Exchange& e, double ExchangeTimes::*field) const {
  if (e.times.*field < 0) e.times.*field = port_.clock_us() - e.t0_us;
}

std::string_view role_name(ExchangeRole r) {
  return r == ExchangeRole::Initiator ? "initiator" : "responder";
}

ExchangeProtocol::ExchangeProtocol(ExchangeConfig cfg, ExchangePort& port,
                                   const PeerDirectory& peers, std::string local_id)
    : cfg_(std::move(cfg)),
      first_wire_(cfg_.wire),
      port_(port),
      peers_(peers),
      local_id_(std::move(local_id)),
      rng_(cfg_.seed),
      choice_(cfg_.choice),
      link_(cfg_.link, cfg_.wire),
      deadlines_(cfg_.answer_timeout_floor, cfg_.answer_timeout),
      bans_(cfg_.robust) {}

float ExchangeProtocol::weight(std::int64_t n_self, std::int64_t n_other) const {
  if (!cfg_.weight_by_samples || n_self < 0 || n_other < 0 || n_self + n_other <= 0) return 0.5f;
  return static_cast<float>(static_cast<double>(n_other) /
                            (static_cast<double>(n_self) + static_cast<double>(n_other)));
}

// ------------------------------------------------------------------------------------------------
// Initiator

void ExchangeProtocol::start(std::uint64_t seq, std::int64_t samples) {
  GT_ASSERT(!ex_ && "an exchange was claimed while another was in flight");
  Exchange e;
  e.seq = seq;
  e.role = ExchangeRole::Initiator;
  e.wire = cfg_.wire;  // the snapshot the training thread is taking
  e.n_self = samples;
  e.started = port_.now();
  e.t0_us = port_.clock_us();
  ex_ = std::move(e);
  if (cfg_.choice.scheduled()) {
    const Millis now = port_.now();
    if (last_start_ >= Millis(0)) {
      const double gap = double((now - last_start_).count());
      start_gap_ms_ = start_gap_ms_ < 0 ? gap : 0.8 * start_gap_ms_ + 0.2 * gap;
    }
    last_start_ = now;
    plan(*ex_);
  }
  try_next_peer();
}

// ------------------------------------------------------------------------------------------------
// The partner schedule (--partner-choice hypercube; partner_schedule.hpp, docs/exchange.md,
// "Partner schedule"). Each peer counts the schedule rounds it has served or skipped (round_); the
// round's step comes from the sorted live members, which both sides must hold alike (the request
// carries their hash). A round is served by one exchange between its two partners at the same
// round count, whoever asks first; a partner behind on the schedule answers BUSY and is asked again
// at the next exchange; after schedule_wait_ms the round is skipped and that exchange goes to a
// drawn partner at the plain weight (which keeps the sum), as does any exchange the two sides do
// not agree is the scheduled one.

const ScheduleView& ExchangeProtocol::view() {
  const Millis now = port_.now();
  const std::uint64_t version = peers_.members_version();
  const std::size_t count = version ? 0 : peers_.live_count();
  if (!view_ || version != view_version_ ||
      (!version && (count != view_count_ || now - view_at_ >= Millis(5000)))) {
    const std::uint64_t before = view_ ? view_->hash : 0;
    view_ = make_view(peers_.member_ids(), local_id_);
    view_version_ = version;
    view_count_ = count;
    view_at_ = now;
    // Another member list, another schedule: its pass starts at round 0. Every peer does the
    // same when its list changes, so once the lists agree every count starts the pass together
    // (the counts of the old list, carried on, were out of step for a whole pass).
    if (view_->hash != before) {
      round_ = 0;
      round_since_ = Millis(-1);
      round_restarts_ = 0;
    }
  }
  return *view_;
}

// The scheduled partner of e answered but did not serve the round (busy or behind on the
// schedule, or its member list is not ours yet): it is there and coming, so the round's wait
// starts again, at most kMaxWaitRestarts times (the bound: a partner stuck for good ends in a
// drawn one). A partner behind by k rounds needs about k of its exchange times: with the wait
// running from our first ask, the peers that took the last list early skipped their rounds
// with the late ones, and the pass was broken (docs/results/sim.md, "Partner schedule").
void ExchangeProtocol::restart_wait(const Exchange& e) {
  if (e.round != round_ || round_restarts_ >= kMaxWaitRestarts) return;
  ++round_restarts_;
  round_since_ = port_.now();
}

void ExchangeProtocol::next_round(std::int64_t r) {
  if (r + 1 > round_) {
    round_ = r + 1;
    round_since_ = Millis(-1);  // the wait starts when the round is first asked for
    round_restarts_ = 0;
  }
}

bool ExchangeProtocol::churning() {
  const std::size_t n = view_ ? static_cast<std::size_t>(view_->n()) : 0;
  const std::size_t live = peers_.live_count();
  const std::size_t gone = live + 1 < n ? n - 1 - live : 0;
  const Millis now = port_.now();
  if (!gone_ || *gone_ != gone) {
    if (gone_) churn_at_ = now;  // the first reading is no change
    gone_ = gone;
  }
  return churn_at_ >= Millis(0) &&
         double((now - churn_at_).count()) < kChurnWaits * cfg_.choice.schedule_wait_ms;
}

void ExchangeProtocol::plan(Exchange& e) {
  e.round = -1;
  const ScheduleView& v = view();
  churning();  // tracks the members gone at every exchange
  const int len = schedule_length(v.n());
  if (len == 0 || v.rank < 0) return;
  const Millis now = port_.now();
  int skipped = 0;  // rounds skipped at once just now: our partner has them to serve still
  for (int skips = 0; skips <= len; ++skips) {
    const ScheduleStep st = schedule_step(v.n(), v.rank, static_cast<int>(round_ % len));
    const std::string* partner = st.partner >= 0 ? &v.ids[std::size_t(st.partner)] : nullptr;
    // No partner this round, or one not live (dead or left: the list keeps it) or that we would
    // not ask: the round is skipped at once.
    std::optional<PeerRef> ref;
    if (partner) ref = peers_.live_peer(*partner);
    if (!ref || banned(*partner) || choice_.backed_off(*partner, now)) {
      if (partner)
        spdlog::debug("averager: schedule round {} skipped at once: {} is {}", round_,
                      short_id(*partner), !ref ? "not live" : banned(*partner) ? "banned" : "backed off");
      next_round(round_);
      ++skipped;
      continue;
    }
    if (round_since_ < Millis(0)) {
      round_since_ = now;
      round_waits_ = 1 + skipped;
    }
    // One wait for each round the partner may still have to serve before this one: an extra rank
    // of n = p + q skips the log2(p) core rounds at once and waits for its partner to run them.
    const double wait =
        round_waits_ * std::max(cfg_.choice.schedule_wait_ms, 4 * start_gap_ms_);
    if (now - round_since_ > Millis(static_cast<Millis::rep>(std::llround(wait)))) {
      spdlog::debug("averager: schedule round {} skipped: {} did not take part in time", round_,
                    short_id(*partner));
      next_round(round_);
      return;  // this exchange: a drawn partner
    }
    e.round = round_;
    e.sched = std::move(*ref);
    e.view = v.hash;
    e.sched_w = st.w;
    return;
  }
}

std::optional<double> ExchangeProtocol::scheduled(const RequestMsg& m, const std::string& from,
                                                  bool& ahead, bool& same_view) {
  ahead = same_view = false;
  if (!cfg_.choice.scheduled() || m.round < 0) return std::nullopt;
  const ScheduleView& v = view();
  const int len = schedule_length(v.n());
  if (len == 0 || v.rank < 0 || v.hash != m.view) return std::nullopt;
  same_view = true;
  // A requester ahead of us is answered BUSY, however far ahead: one part of the swarm may run
  // a pass or more ahead of another (a pair's round waits only for the two blocks it joins),
  // and a jump would break the pass for every partner of the rounds jumped over. A peer that
  // restarted catches up at its own next exchange, from its partner's ACCEPT.
  if (m.round > round_) {
    ahead = true;  // we still have rounds to serve first: it asks again soon
    return std::nullopt;
  }
  if (m.round < round_) {  // it is behind: plain, and it catches up from our ACCEPT
    spdlog::debug("averager: schedule: {} asked for round {}, we are at {}", short_id(from), m.round,
                  round_);
    return std::nullopt;
  }
  const ScheduleStep st = schedule_step(v.n(), v.rank, static_cast<int>(round_ % len));
  if (st.partner < 0 || v.ids[std::size_t(st.partner)] != from) return std::nullopt;
  return st.w;
}

// The responder's side of an exchange: the schedule's weight when both agree it is the scheduled
// one, else the plain weight; the ACCEPT tells the initiator which.
void ExchangeProtocol::take_round(Exchange& e, const RequestMsg& m, std::optional<double> sw,
                                  bool same_view) {
  e.round = sw ? m.round : -1;
  e.view = m.view;
  e.w = sw ? static_cast<float>(*sw) : weight(e.n_self, e.n_other);
  AcceptMsg a{m.exchange_id, e.n_self, port_.own_progress(), port_.own_step()};
  // Our count means something to the requester only in the same member list (it catches up).
  if (cfg_.choice.scheduled() && same_view) {
    a.round = round_;
    a.scheduled = sw.has_value();
  }
  e.out.control(kAcc, encode_accept(a));
}

// Every live peer not excluded from this exchange nor banned; in a swarm larger than
// 2 * kMaxCandidates, a uniform sample of at most kMaxCandidates of them (a partial shuffle), so
// starting an exchange costs O(1) rather than O(n) checks. The weighted pick among a random
// sample spreads exchanges as the pick among all does. skip_backed_off: leave out the partners
// the partner choice backs off (unreachable lately) and those membership suspects (at a split,
// the other side's peers are suspected within a probe period or two, while dialling each of them
// in turn cost a connect or answer deadline apiece and left a side's peers training apart).
std::vector<PeerRef> ExchangeProtocol::candidates(const Exchange& e, bool skip_backed_off) {
  const Millis now = port_.now();
  auto ok = [&](const PeerRef& p) {
    return p.id != local_id_ && !e.excluded.count(p.id) && !banned(p.id) && !port_.avoid(p.id) &&
           !(skip_backed_off && (choice_.backed_off(p.id, now) || peers_.suspected(p.id)));
  };
  std::vector<PeerRef> cands;
  if (peers_.live_count() > 2 * kMaxCandidates) {
    for (auto& p : peers_.live_sample(4 * kMaxCandidates, rng_)) {
      if (ok(p)) cands.push_back(std::move(p));
      if (cands.size() == kMaxCandidates) return cands;
    }
    if (!cands.empty()) return cands;
  }
  for (auto& p : peers_.live_peers())
    if (ok(p)) cands.push_back(std::move(p));
  return cands;
}

void ExchangeProtocol::try_next_peer() {
  Exchange& e = *ex_;
  if (e.tries >= cfg_.max_tries) return fail(e.last_reason.value_or(FailureReason{}), {});
  // Partners that did not answer lately are asked only when nobody else is left to ask.
  std::vector<PeerRef> cands = candidates(e, true);
  if (cands.empty()) cands = candidates(e, false);
  if (cands.empty()) {
    if (e.tries > 0) return fail(e.last_reason.value_or(FailureReason{}), {});
    // Nothing to ask (alone, or membership not there yet): not an exchange, no event.
    spdlog::debug("averager: no live peer to average with");
    const std::uint64_t seq = e.seq;
    ex_.reset();
    port_.release(seq, true);
    return;
  }
  PeerRef p;
  if (e.round >= 0 && e.tries == 0 && !e.excluded.count(e.sched.id))
    p = e.sched;
  else
    p = cands[choice_.pick(cands, rng_)];
  ++e.tries;
  e.times.tries = e.tries;
  e.partner = p.id;
  use_wire(e, link_.wire_for(p.id, port_.now()));
  e.asked = port_.now();
  e.phase = Phase::Connecting;
  e.conn = nullptr;
  e.id = 0;
  e.out.clear_control();
  if (auto c = port_.pooled(p.id)) return ask(c);
  arm_deadline(deadlines_.connect(), ExchangeFailure::TimeoutConnect);
  port_.dial(e.seq, p);
}

void ExchangeProtocol::on_dialled(std::uint64_t seq, const std::string& peer, net::ConnectionPtr c,
                                  const net::CloseCause& err) {
  if (!ex_ || ex_->seq != seq || ex_->phase != Phase::Connecting || ex_->partner != peer) {
    // We yielded or gave up meanwhile: keep a good connection for later exchanges.
    if (c && c->is_open() && c->peer_id() == peer && !port_.has_pooled(peer)) {
      port_.pool(peer, c);
      port_.idle_close_pooled(peer);
    } else if (c) {
      c->close(net::CloseReason::NotNeeded, "exchange connection");
    }
    return;
  }
  if (!c) {
    spdlog::debug("averager: connect to {} failed: {}", short_id(peer), err);
    return try_failed({ExchangeFailure::Connect}, false);
  }
  if (c->peer_id() != peer) {
    c->close(net::CloseReason::UnexpectedPeer, "exchange");
    return try_failed({ExchangeFailure::Connect}, false);
  }
  port_.pool(peer, c);
  ask(c);
}

void ExchangeProtocol::ask(const net::ConnectionPtr& c) {
  Exchange& e = *ex_;
  e.conn = c;
  e.phase = Phase::Requested;
  e.id = rng_.nonzero();
  port_.touch_pooled(e.partner);
  RequestMsg m;
  m.exchange_id = e.id;
  m.fingerprint = cfg_.fingerprint;
  m.n_params = port_.n_params();
  m.wire = e.wire;
  m.weighted = cfg_.weight_by_samples;
  m.samples = e.n_self;
  m.progress = port_.own_progress();
  m.step = port_.own_step();
  if (e.round >= 0 && e.partner == e.sched.id) {
    m.round = e.round;
    m.view = e.view;
  }
  e.requested = port_.now();
  e.times.requested = port_.clock_us() - e.t0_us;
  arm_deadline(deadlines_.answer(), ExchangeFailure::TimeoutAnswer);
  queue_control(kReq, encode_request(m));
}

// The current peer did not take part (busy, refused, unreachable, silent): ask another one.
void ExchangeProtocol::try_failed(FailureReason reason, bool close_conn) {
  Exchange& e = *ex_;
  port_.cancel(Timer::Deadline);
  e.excluded.insert(e.partner);
  e.last_reason = reason;
  // A partner that did not answer in time costs us that time, like a slow exchange.
  if (is_timeout(reason.kind))
    choice_.record(e.partner, double((port_.now() - e.asked).count()), port_.now());
  // It did not answer at all: the next exchanges ask others first (partner_choice.hpp).
  if (is_unanswered(reason.kind)) choice_.unreachable(e.partner, port_.now());
  if (close_conn && e.conn) {
    // A late answer on this connection must not be mistaken for a new exchange's.
    port_.forget_pooled(e.partner);
    e.conn->close(net::CloseReason::Failed, "exchange: " + to_string(reason));
  }
  e.conn = nullptr;
  // The scheduled partner did not take part (busy, behind, gone): it is asked again at our next
  // exchange, until the round's wait runs out (plan).
  if (e.round >= 0 && e.partner == e.sched.id) {
    if (reason.kind == ExchangeFailure::Busy) restart_wait(e);
    // In training (exact_passes false: the vectors move between rounds) and under churn (a
    // member died or came back lately) the passes are not exact anyway, and an exchange our
    // scheduled partner turned down (busy, or no answer) is one lost: it goes to a drawn partner
    // instead (docs/results/sim.md, "Partner schedule": 128 peers with crashes reached 1e-6 in
    // 34.6 rounds instead of never, as peers stalled behind partners that waited on a dead one).
    if (cfg_.choice.exact_passes && !churning()) return fail(reason, {});
    e.excluded.insert(e.partner);
  }
  try_next_peer();
}

void ExchangeProtocol::on_accept(const net::ConnectionPtr& c, const net::Bytes& b) {
  const AcceptMsg m = decode_accept(b);
  if (!is_current(c, m.exchange_id) || ex_->role != ExchangeRole::Initiator ||
      ex_->phase != Phase::Requested)
    return violation(c, "unexpected accept");
  Exchange& e = *ex_;
  answered(e);
  stamp(e, &ExchangeTimes::accepted);
  e.n_other = m.samples;
  e.partner_progress = m.progress;
  e.partner_step = m.step;
  port_.heard_step(e.partner, m.step);
  if (e.round >= 0 && e.partner == e.sched.id && m.scheduled && m.round == e.round) {
    e.w = static_cast<float>(e.sched_w);
  } else {
    // Not the scheduled exchange: plain. A partner ahead of us on the schedule: we catch up.
    // Our scheduled partner with another member list (no count in its answer): the lists are
    // still converging, which is no sign that it will not take part: the round's wait restarts.
    if (e.round >= 0 && e.partner == e.sched.id && m.round < 0) restart_wait(e);
    e.round = -1;
    e.w = weight(e.n_self, e.n_other);
    // A partner ahead of us skipped this round: it is lost, we go on to our next one. Jumping
    // to its count would skip our rounds with other partners too, and each of them would then
    // find us ahead and skip in turn (one late skip spread over the whole pass). A partner a
    // whole schedule or more ahead: we restarted, or took the list late: we catch up with it.
    if (cfg_.choice.scheduled() && m.round > round_) {
      const int len = schedule_length(view().n());
      const std::int64_t to = m.round >= round_ + len ? m.round - 1 : round_;
      spdlog::debug("averager: schedule: partner at round {}, we move on from {} to {}", m.round,
                    round_, to + 1);
      next_round(to);
    }
  }
  e.phase = Phase::Transferring;
  spdlog::trace("averager: #{} accepted by {}", e.seq, short_id(e.partner));
  begin_transfer();
}

void ExchangeProtocol::on_busy_or_refuse(const net::ConnectionPtr& c, std::uint8_t type,
                                         const net::Bytes& b) {
  std::uint64_t id = 0;
  FailureReason reason{ExchangeFailure::Busy};
  if (type == kBusy) {
    id = decode_id(b).exchange_id;
  } else {
    const CodeMsg m = decode_code(b);
    id = m.exchange_id;
    reason = {ExchangeFailure::Refused, m.code};
  }
  if (c == withdrawn_.conn && id == withdrawn_.id) {
    withdrawn_ = {};
    return;
  }
  if (!is_current(c, id) || ex_->role != ExchangeRole::Initiator || ex_->phase != Phase::Requested)
    return violation(c, "unexpected busy/refuse");
  answered(*ex_);
  if (type == kBusy) ++ex_->times.busy;
  if (type == kRef && reason.code == ExchangeCode::Wire && cfg_.finish_wire &&
      cfg_.wire != *cfg_.finish_wire) {
    // The partner is on the finish wire already (in_transition): so should we be.
    port_.finish_wire_seen();
  } else if (type == kRef && reason.code == ExchangeCode::Wire && ex_->wire != cfg_.wire) {
    // It does not take the slow link's wire: the configured one with it from now on.
    spdlog::info("averager: peer {} does not take the {} wire: {} with it", short_id(ex_->partner),
                 wire_name(ex_->wire), wire_name(cfg_.wire));
    link_.refused(ex_->partner);
  } else if (type == kRef) {
    spdlog::warn("averager: peer {} refused to average: {}", short_id(ex_->partner),
                 to_string(reason));
  }
  try_failed(reason, false);
}

// The partner answered our REQUEST (any answer): the answer time fits the deadlines, and the
// partner is reachable.
void ExchangeProtocol::answered(const Exchange& e) {
  deadlines_.record(double((port_.now() - e.requested).count()));
  choice_.answered(e.partner);
}

// ------------------------------------------------------------------------------------------------
// Responder

// A request in the other of our two wires (the first and the finish one): the two peers are on
// either side of the switch to the finish wire.
bool ExchangeProtocol::in_transition(WireFormat theirs) const {
  return cfg_.finish_wire && theirs != cfg_.wire &&
         (theirs == *cfg_.finish_wire || theirs == first_wire_);
}

void ExchangeProtocol::set_wire(WireFormat w) {
  GT_ASSERT(!ex_);
  cfg_.wire = w;
  link_.set_wire(w);
}

std::optional<ExchangeCode> ExchangeProtocol::incompatible(const RequestMsg& m) const {
  const std::size_t n = port_.n_params();
  if (n == 0) return std::nullopt;
  if (m.fingerprint != cfg_.fingerprint) return ExchangeCode::Fingerprint;
  if (m.n_params != n) return ExchangeCode::Size;
  // The slow link's wire too (link_wire.hpp); on_request tells the finish wire apart.
  if (!link_.takes(m.wire)) return ExchangeCode::Wire;
  if (m.weighted != cfg_.weight_by_samples) return ExchangeCode::Weighting;
  return std::nullopt;
}

void ExchangeProtocol::refuse(const net::ConnectionPtr& c, const RequestMsg& m, ExchangeCode code) {
  // A banned requester, or one still on the first wire once we moved to the finish wire (the
  // refusal tells it to move too): expected, so not a warning.
  if (code == ExchangeCode::Banned || (code == ExchangeCode::Wire && in_transition(m.wire)))
    spdlog::debug("averager: refusing exchange from {}: {}", short_id(c->peer_id()),
                  code_name(code));
  else
    spdlog::warn("averager: refusing exchange from {}: {} mismatch", short_id(c->peer_id()),
                 code_name(code));
  port_.count(ExchangePort::Counter::RefusedSent);
  c->send(kRef, encode_code(m.exchange_id, code));
}

void ExchangeProtocol::on_request(const net::ConnectionPtr& c, const net::Bytes& b) {
  const RequestMsg m = decode_request(b);
  choice_.answered(c->peer_id());  // it reaches us: no reason to back off from it
  answer_request(c, m, true);
}

void ExchangeProtocol::answer_request(const net::ConnectionPtr& c, const RequestMsg& m,
                                      bool may_hold) {
  const std::optional<ExchangeCode> bad = incompatible(m);
  if (bad == ExchangeCode::Wire && in_transition(m.wire) && m.wire == cfg_.finish_wire) {
    // A requester already on the finish wire: we switch at our next idle step boundary, and
    // answer BUSY meanwhile. (One still on the first wire after we switched is refused below,
    // which tells it to switch.)
    port_.finish_wire_seen();
    return send_busy(c, m.exchange_id);
  }
  if (!bad && banned(c->peer_id())) return refuse(c, m, ExchangeCode::Banned);
  if (bad) return refuse(c, m, *bad);
  bool ahead = false, same_view = false;
  const std::optional<double> sw = scheduled(m, c->peer_id(), ahead, same_view);
  if (ahead) return send_busy(c, m.exchange_id);
  if (ex_ && should_yield(c, m)) return yield_to(c, m, sw, same_view);
  ChunkSetPtr own;
  // Before our first step boundary we have no parameters to offer: as good as busy.
  std::optional<std::uint64_t> seq;
  if (port_.n_params() != 0) seq = port_.claim(own, m.wire);
  if (!seq && may_hold && can_hold(c)) {
    held_ = Held{c, m};
    port_.count(ExchangePort::Counter::Held);
    port_.arm(Timer::Hold, 0, cfg_.hold_max);
    return;
  }
  if (!seq) return send_busy(c, m.exchange_id);
  respond(c, m, *seq, std::move(own), sw, same_view);
}

// Held only behind an exchange in its transfer: that one ends without waiting for any other
// peer's answer, so holds never wait on each other in a circle. And only where transfers are
// short: a requester held for a 100 MB transfer had better ask someone else.
bool ExchangeProtocol::can_hold(const net::ConnectionPtr& c) const {
  return cfg_.hold_max > Millis(0) && !held_ && ex_ && ex_->phase == Phase::Transferring &&
         ex_->conn != c && transfer_ms_ >= 0 &&
         transfer_ms_ <= 0.5 * static_cast<double>(cfg_.hold_max.count()) && port_.n_params() != 0;
}

void ExchangeProtocol::serve_held() {
  if (!held_ || ex_) return;
  const Held h = std::move(*held_);
  held_.reset();
  port_.cancel(Timer::Hold);
  if (h.conn->is_open()) answer_request(h.conn, h.m, false);
}

void ExchangeProtocol::drop_held(bool busy) {
  if (!held_) return;
  if (busy && held_->conn->is_open()) send_busy(held_->conn, held_->m.exchange_id);
  held_.reset();
  port_.cancel(Timer::Hold);
}

void ExchangeProtocol::send_busy(const net::ConnectionPtr& c, std::uint64_t exchange_id) {
  port_.count(ExchangePort::Counter::BusySent);
  c->send(kBusy, encode_id(exchange_id));
}

void ExchangeProtocol::respond(const net::ConnectionPtr& c, const RequestMsg& m, std::uint64_t seq,
                               ChunkSetPtr own, std::optional<double> sw, bool same_view) {
  if (!own) port_.request_boundary();  // the snapshot waits for a step boundary
  GT_ASSERT(!ex_);
  Exchange e;
  e.seq = seq;
  e.id = m.exchange_id;
  e.role = ExchangeRole::Responder;
  e.phase = Phase::Transferring;
  e.partner = c->peer_id();
  e.conn = c;
  e.started = e.asked = port_.now();
  e.t0_us = port_.clock_us();
  e.times.accepted = 0;
  e.n_self = port_.own_samples();
  e.n_other = m.samples;
  e.partner_progress = m.progress;
  e.partner_step = m.step;
  port_.heard_step(e.partner, m.step);
  e.wire = m.wire;
  e.out.set_own(std::move(own));
  ex_ = std::move(e);
  take_round(*ex_, m, sw, same_view);
  begin_transfer();
}

// An initiator that has not been answered yet may become the responder of an incoming request
// instead, with the snapshot it takes anyway: always while still dialling (nothing sent yet),
// and when two peers ask each other at once (crossing requests), the lower exchange id wins on both
// sides. Without this, two peers stepping in lockstep would answer each other BUSY forever.
bool ExchangeProtocol::should_yield(const net::ConnectionPtr& c, const RequestMsg& m) const {
  if (ex_->role != ExchangeRole::Initiator) return false;
  if (ex_->phase == Phase::Connecting) return true;
  return ex_->phase == Phase::Requested && ex_->partner == c->peer_id() && m.exchange_id < ex_->id;
}

void ExchangeProtocol::yield_to(const net::ConnectionPtr& c, const RequestMsg& m,
                                std::optional<double> sw, bool same_view) {
  Exchange& e = *ex_;
  port_.cancel(Timer::Deadline);
  // The partner answers our withdrawn request with BUSY (it applies the same rule): ignore it.
  if (e.phase == Phase::Requested) withdrawn_ = {e.conn, e.id};
  spdlog::debug("averager: yielding our request to {} for {}'s", short_id(e.partner),
                short_id(c->peer_id()));
  e.role = ExchangeRole::Responder;
  e.phase = Phase::Transferring;
  e.id = m.exchange_id;
  e.partner = c->peer_id();
  e.conn = c;
  e.started = e.asked = port_.now();
  e.t0_us = port_.clock_us();
  e.times = {};
  e.times.accepted = 0;
  e.n_other = m.samples;
  e.partner_progress = m.progress;
  e.partner_step = m.step;
  port_.heard_step(e.partner, m.step);
  use_wire(e, m.wire);
  e.tries = 0;
  e.excluded.clear();
  e.last_reason.reset();
  e.out.clear_control();
  take_round(e, m, sw, same_view);
  begin_transfer();
}

// The initiator's snapshot is taken in the configured wire as it asks (and a responder's standing
// one is); a partner on a slow link needs one in its wire, taken at the next step boundary. Only
// a snapshot in the exchange's wire is ever sent.
void ExchangeProtocol::use_wire(Exchange& e, WireFormat w) {
  const bool had = e.wire == w;
  e.wire = w;
  const ChunkSetPtr& own = e.out.own();
  if (own && own->wire == w) return;
  if (own) e.out.set_own(nullptr);
  if (own || !had || w != cfg_.wire) port_.want_snapshot(e.seq, w);
}

void ExchangeProtocol::snapshot_ready(std::uint64_t seq, ChunkSetPtr own) {
  if (!ex_ || ex_->seq != seq) return;  // ended meanwhile (e.g. no peer to ask)
  if (own->wire != ex_->wire) return;  // the wire changed with the partner (use_wire)
  ex_->out.set_own(std::move(own));
  pump_send();  // no-op until accepted
}

void ExchangeProtocol::chunks_ready(std::uint64_t seq) {
  if (ex_ && ex_->seq == seq && !retry_armed_) pump_send();
}

}  // namespace gossiptrain::gossip

