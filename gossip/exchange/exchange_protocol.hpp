// The averaging exchange's protocol state machine (docs/exchange.md, "One exchange, file by
// file"), pure in the way net/secure/handshake.hpp is: messages, dial results, deadlines and the training
// thread's verdicts in; actions out through ExchangePort (arm a deadline, dial, hand a chunk to the
// training thread, commit a mix, report). No threads, no sockets, no timers of its own: the
// connections are net::Connection interfaces, and tests drive it with fakes of both.
//
//   initiator                                  responder
//   REQUEST(id, fingerprint, n, wire, samples) ->
//                                              <- BUSY | REFUSE(code) | ACCEPT(id, samples)
//   CHUNK* (own snapshot, as soon as ACCEPT)    <- CHUNK* (as soon as its training thread made one)
//   VALID (all of r received + validated)       <- VALID
// Each side applies x += w (r - s) once it has validated r AND holds the other's VALID (a two-vote
// commit); anything else (close, timeout, Abort, bad data) ends the exchange with nothing applied.
// The one window left, inherent to any commit over a lossy link: a side whose VALID is lost after
// it committed applies alone; the other side then reports "closed" or "timeout".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "gossip/exchange/answer_deadline.hpp"
#include "gossip/exchange/ban_list.hpp"
#include "gossip/exchange/exchange_failure.hpp"
#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/exchange/link_wire.hpp"
#include "gossip/exchange/partner_choice.hpp"
#include "gossip/exchange/partner_schedule.hpp"
#include "gossip/exchange/send_pump.hpp"
#include "gossip/exchange/wire_check.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

enum class ExchangeRole { Initiator, Responder };
std::string_view role_name(ExchangeRole r);  // "initiator" | "responder"

// One finished exchange, successful or not (the `exchange` metric line).
// An exchange whose clip c is below this mixed too little to count as averaging (1% of the plain
// weight): the summary, the live table and the exchange health count it apart from ok.
inline constexpr double kAveragingClip = 0.01;

// Where an exchange's time went, for gossip-bench rate (wall clock, not the scheduler's: an
// exchange of a small model takes well under the millisecond the scheduler's clock counts).
// Microseconds from the exchange's start (initiator: the training thread's request reached the
// protocol thread; responder: the REQUEST came in); -1: not reached.
struct ExchangeTimes {
  double requested = -1;   // initiator: its last REQUEST was queued
  double accepted = -1;    // initiator: ACCEPT in (after every dial, BUSY answer and round trip)
  double own_sent = -1;    // our last chunk handed to the transport
  double received = -1;    // the partner's last chunk in (and checked)
  double voted = -1;       // our VALID queued (after the norm vote, when one applies)
  double peer_voted = -1;  // the partner's VALID in
  double committed = -1;   // both votes in: the mix handed to the training thread
  double applied = -1;     // the mix applied at a step boundary (the event's end)
  int busy = 0;            // BUSY answers to this exchange's requests (initiator)
  int tries = 0;           // partners asked (initiator)
};

struct ExchangeEvent {
  std::string partner;  // peer id of the other side
  ExchangeRole role = ExchangeRole::Initiator;
  bool ok = false;
  FailureReason failure;  // why it failed (meaningful only when !ok)
  // The metrics token: "" when ok; else to_string(failure), see exchange_failure.hpp.
  std::string reason() const { return ok ? std::string() : to_string(failure); }
  std::uint64_t exchange_id = 0;
  std::uint64_t bytes_sent = 0;      // payload chunk bytes (headers included) sent
  std::uint64_t bytes_received = 0;  // and received
  double ms = 0.0;  // initiator: from asking for the exchange (first peer tried); responder: from
                    // the REQUEST; to the mix applied (at the step boundary after the
                    // commit) or the failure
  float w = 0.0f;   // mixing weight applied (0 when nothing was applied)
  double diff_norm = -1;  // ||r - s|| both sides agreed on (-1: not measured)
  double tau = 0;         // the clipping bound both applied, min of theirs (0: none)
  double clip = 1;        // c in x += w c (r - s)
  // The weight the partner's vector really got, w c: what "averaging" means (an exchange below
  // kAveragingClip of the plain weight is counted as not averaging).
  double effective_w() const { return double(w) * clip; }
  double partner_progress = -1;    // its fraction of training done, as it said (-1: not known)
  std::int64_t partner_step = -1;  // its optimizer steps, as it said (-1: not known)
  WireFormat wire = WireFormat::Fp32;  // the wire it ran in (link_wire.hpp)
  // --partner-choice hypercube: the schedule round this exchange served (-1: a plain exchange).
  std::int64_t round = -1;
  ExchangeTimes times;  // where its time went (gossip-bench rate)
};

// The training thread's (or the fast path's) verdict on the partner's vector.
struct Verdict {
  std::optional<ExchangeFailure> refused;  // InvalidNorm or Anomalous; none when accepted
  double norm = 0, tau = 0;                // 0 when not measured
  bool bans = true;  // the refusal counts towards banning the partner (RobustBound::Judgement)
};

struct ExchangeConfig {
  std::uint64_t fingerprint = 0;
  WireFormat wire = WireFormat::Fp32;
  // The wire of the end of training (AveragerConfig::finish_wire): a request in it, or a refusal
  // of ours for the wire, tells the port that partners have moved on (finish_wire_seen).
  std::optional<WireFormat> finish_wire;
  // A compressed wire with the partners whose link is measured slow (link_wire.hpp); never with
  // a finish wire.
  LinkWireConfig link;
  bool weight_by_samples = false;
  int max_tries = 3;
  PartnerChoiceConfig choice;
  RobustConfig robust;      // the ban settings
  bool needs_norm = false;  // a norm bound applies: the vote waits for ||r - s||
  bool fast_norm = false;   // ||r - s|| summed here as the chunks arrive (fp32)
  // (An exchange in int4-rel, the slow link's wire, always waits for the training thread's vote:
  // its vector decodes against our snapshot.)
  // The dial and answer deadlines: fitted to the answers measured (answer_deadline.hpp), never
  // below the floor nor above answer_timeout (also the deadline before a first answer).
  net::Millis answer_timeout{5000};
  net::Millis answer_timeout_floor{1000};
  net::Millis transfer_timeout_floor{10000};
  // A partner from which nothing has come in a transfer for this long (or 4 times the longest gap
  // between its messages so far in the exchange, plus the whole transfer's time at its link's
  // measured rate, if longer) is reported to membership, which probes it at once; if membership
  // suspects it, the transfer ends (partner-silent) instead of holding us until membership
  // declares it dead. 0: only at the deadline or on a death.
  net::Millis silence_floor{1000};
  double min_rate_bytes_per_s = 20e6;
  std::size_t chunk_bytes = (1u << 20) - kChunkHeaderBytes;
  net::Millis send_retry{1};
  // A request that finds us busy in the transfer of another exchange is held (one at a time) and
  // answered when that exchange ends, instead of BUSY at once, as long as our transfers take at
  // most half of this (their moving average); BUSY when it has not ended within hold_max. A
  // requester answered BUSY tries another partner or waits for its next --gossip-every steps;
  // with steps well under a millisecond that is many steps, and with many peers most partners
  // are busy. 0: never held.
  net::Millis hold_max{20};
  std::uint64_t seed = 1;
};

// What the protocol asks of its environment (the averager: transport, scheduler, training-thread
// handoff). Every call is on the protocol thread.
class ExchangePort {
 public:
  enum class Timer { Deadline, Retry, Hold };
  virtual ~ExchangePort() = default;
  virtual net::Millis now() const = 0;
  // A fine clock for ExchangeTimes only (never for a decision): microseconds, any origin.
  virtual double clock_us() const;
  // A live peer not to ask now (a lingering peer does not ask partners known to be training).
  virtual bool avoid(const std::string&) const { return false; }
  // Nothing has come from partner in a transfer for its silence bound: membership may probe it
  // now rather than in its turn (a suspicion then ends the transfer). Once per exchange.
  virtual void silent(const std::string&) {}
  // Calls on_timer(seq, t) after d unless cancelled or armed again (one of each kind at a time).
  virtual void arm(Timer t, std::uint64_t seq, net::Millis d) = 0;
  virtual void cancel(Timer t) = 0;
  // Dials p; the result comes back through on_dialled(seq, p.id, ...).
  virtual void dial(std::uint64_t seq, const PeerRef& p) = 0;
  // The dedicated exchange connections we dialled (exchange_conns.hpp).
  virtual net::ConnectionPtr pooled(const std::string& peer) = 0;
  virtual bool has_pooled(const std::string& peer) = 0;
  virtual void pool(const std::string& peer, net::ConnectionPtr c) = 0;
  virtual void touch_pooled(const std::string& peer) = 0;
  virtual void forget_pooled(const std::string& peer) = 0;
  virtual void forget_pooled(const net::ConnectionPtr& c) = 0;
  virtual void close_pooled(const std::string& peer, const std::string& reason) = 0;
  virtual void idle_close_pooled(const std::string& peer) = 0;
  // The training thread's side. n_params: 0 before its first step boundary.
  virtual std::size_t n_params() const = 0;
  virtual std::int64_t own_samples() const = 0;
  // Our fraction of training done, in [0, 1], or -1 when not known; told to every partner.
  virtual double own_progress() const = 0;
  // Optimizer steps we have done; told to every partner. heard_step: a partner told its own (in
  // its REQUEST or ACCEPT), before its vector is judged.
  virtual std::int64_t own_step() const = 0;
  virtual void heard_step(const std::string& partner, std::int64_t step) = 0;
  virtual double max_rate() const = 0;
  // Claims the exchange for a request in wire w: its seq, with our snapshot when one stands ready
  // in w (else one is taken at the next step boundary); nullopt when busy.
  virtual std::optional<std::uint64_t> claim(ChunkSetPtr& own, WireFormat w) = 0;
  // Exchange seq runs in wire w after all (its partner's link): a snapshot in w is taken at the
  // next step boundary (snapshot_ready), one in another wire is not used.
  virtual void want_snapshot(std::uint64_t seq, WireFormat w) = 0;
  // The exchange seq ended unapplied (no_peer: it never started), or was committed: the mix
  // w c (r - s) waits for the next step boundary.
  virtual void release(std::uint64_t seq, bool no_peer) = 0;
  struct Commit {
    float w = 0.5f;    // the clipping factor included
    double norm = -1;     // agreed ||r - s|| (-1: not measured)
    std::string partner;  // whose vector it is (B keeps one figure per partner)
    WireFormat wire = WireFormat::Fp32;  // the exchange's
  };
  virtual void commit(std::uint64_t seq, const Commit& c) = 0;
  // Hands one of the partner's chunks to the training thread; norm_vote: it is the last one and
  // the training thread must measure ||r - s|| for our vote (then validated() comes back).
  virtual void deliver(std::uint64_t seq, net::Bytes&& chunk, bool complete, bool norm_vote,
                       const std::string& partner, WireFormat wire) = 0;
  virtual void request_boundary() = 0;
  // The norm bounds on a measured ||r - s|| (own_norm gives ||s|| when needed).
  virtual Verdict judge(const std::string& partner, double norm,
                        const std::function<double()>& own_norm) = 0;
  // Fast norm: ||r - s||^2 of chunk data against our snapshot (false: not cut that far yet),
  // ||s||^2.
  virtual bool add_sq_diff(const ChunkSet* own, const std::uint8_t* r, std::size_t offset,
                           std::size_t size, double& sq) = 0;
  virtual double own_sq_norm(const ChunkSet& own) = 0;
  // The partner's whole payload was received; hash: payload_sample over it (with its wire).
  virtual void heard_payload(const std::string& partner, std::uint64_t hash) {
    (void)partner, (void)hash;
  }
  // Results.
  virtual void finished(const ExchangeEvent& ev) = 0;
  virtual void ban_started(const BanEvent& b) = 0;
  enum class Counter { BusySent, RefusedSent, Bans, Held };
  virtual void count(Counter c) = 0;
  // A partner exchanges in the finish wire while we still use the first one: switch soon.
  virtual void finish_wire_seen() {}
};

class ExchangeProtocol {
 public:
  ExchangeProtocol(ExchangeConfig cfg, ExchangePort& port, const PeerDirectory& peers,
                   std::string local_id);

  // The training thread claimed exchange seq as initiator (samples: our shard size).
  void start(std::uint64_t seq, std::int64_t samples);
  // One exchange message (types 0x40-0x5F); a malformed one is a protocol violation.
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload);
  void on_dialled(std::uint64_t seq, const std::string& peer, net::ConnectionPtr c,
                  const net::CloseCause& err);
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason);
  void on_timer(ExchangePort::Timer t, std::uint64_t seq);
  // The training thread's progress: the snapshot of seq exists (chunks still being cut), more of
  // its chunks are cut, its verdict on the partner's vector, the committed mix applied.
  void snapshot_ready(std::uint64_t seq, ChunkSetPtr own);
  void chunks_ready(std::uint64_t seq);
  void validated(std::uint64_t seq, const Verdict& v);
  void applied(std::uint64_t seq);
  // Membership declared peer dead or gone: an exchange with it in flight fails now instead of at
  // its deadline (a partition held a transfer for its whole 10 s floor while the peer trained
  // without averaging and drifted from its side; docs/robustness.md).
  void partner_lost(const std::string& peer);
  // Membership suspects peer (suspected), or takes it for alive again: a transfer with it that
  // has been silent for its silence bound (ExchangeConfig::silence_floor) ends now, or when it
  // has been; a partner heard from meanwhile keeps its transfer (a slow link, probes delayed
  // behind it).
  void partner_suspected(const std::string& peer, bool suspected);
  // The training thread failed during exchange seq (a backend error).
  void backend_failed(std::uint64_t seq);
  // From now on exchanges run in wire w (the finish wire; no exchange is in flight).
  void set_wire(WireFormat w);

  bool banned(const std::string& peer) const { return bans_.banned(peer, port_.now()); }
  bool in_flight() const { return ex_.has_value(); }
  // The exchange in flight runs on c.
  bool in_flight_on(const net::ConnectionPtr& c) const { return ex_ && ex_->conn == c; }
  bool committed() const { return committed_.has_value(); }
  // The per-partner wires (tests, logs).
  const LinkWire& link_wire() const { return link_; }

 private:
  enum class Phase { Connecting, Requested, Transferring };
  struct Exchange {
    std::uint64_t seq = 0;  // local number, matches the training-thread handoff
    std::uint64_t id = 0;   // exchange id on the wire
    ExchangeRole role = ExchangeRole::Initiator;
    Phase phase = Phase::Connecting;
    std::string partner;
    net::ConnectionPtr conn;
    net::Millis started{0};
    net::Millis asked{0};      // the current partner was asked (responder: its request came in)
    net::Millis requested{0};  // our REQUEST to it was sent (the answer time starts)
    net::Millis transfer{0};   // the transfer began (ACCEPT sent or received)
    WireFormat wire = WireFormat::Fp32;  // this exchange's (link_wire.hpp)
    bool needs_norm = false;   // the vote waits for ||r - s|| (or int4-rel's decoding)
    SendPump out;              // control messages and our snapshot's chunks
    std::size_t received = 0;  // payload bytes of the partner's vector received
    std::optional<WireChecker> check;  // its values, checked as they arrive
    bool recv_done = false, local_valid = false, peer_valid = false;
    double local_tau = 0, local_norm = 0, peer_tau = 0, peer_norm = 0;  // from the votes
    double diff_norm = -1, tau = 0, clip = 1;  // agreed at commit
    // fp32: ||r - s||^2 summed here as the chunks arrive, so the vote needs no step
    // boundary; false (the training thread measures) once a chunk came in before our own
    // snapshot covered it.
    bool fast_norm = false;
    double sq = 0;
    // A sample of the partner's payload bytes (payload_sample): the same sample as its last
    // vector's says it sent that vector again (RobustBound::heard_payload).
    std::uint64_t payload_hash = 0;
    std::int64_t n_self = 0, n_other = 0;
    double partner_progress = -1;  // from its REQUEST or ACCEPT
    std::int64_t partner_step = -1;
    float w = 0.5f;
    std::uint64_t bytes_received = 0;
    // Silence in the transfer: when we last heard from the partner on the exchange connection
    // (the transfer's start before that), the longest gap between two of its messages, whether
    // membership suspects it, and the transfer deadline's time (the silence check re-arms the
    // deadline timer earlier and must not lose it).
    net::Millis heard{0}, longest_gap{0}, deadline_at{0};
    bool suspected = false;
    bool told_silent = false;  // port_.silent(partner) called
    int tries = 0;
    // The schedule (--partner-choice hypercube): the round this exchange serves (-1: plain, at
    // weight w), the partner it is scheduled with, the member list's hash, the step's weight.
    std::int64_t round = -1;
    PeerRef sched;
    std::uint64_t view = 0;
    double sched_w = 0.5;
    std::set<std::string> excluded;  // asked this round: busy, refused or unreachable
    std::optional<FailureReason> last_reason;
    double t0_us = 0;     // port_.clock_us() at started
    ExchangeTimes times;  // from t0_us
  };
  // Sets a phase's time (the first time it is reached).
  void stamp(Exchange& e, double ExchangeTimes::*field) const;

  // Initiator.
  static constexpr std::size_t kMaxCandidates = 32;
  std::vector<PeerRef> candidates(const Exchange& e, bool skip_backed_off);
  void try_next_peer();
  void ask(const net::ConnectionPtr& c);
  void try_failed(FailureReason reason, bool close_conn);
  void answered(const Exchange& e);
  void on_accept(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_busy_or_refuse(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& b);
  // Responder.
  void on_request(const net::ConnectionPtr& c, const net::Bytes& b);
  // The answer to a request (may_hold: a busy answer may be held instead, see hold_max).
  void answer_request(const net::ConnectionPtr& c, const RequestMsg& m, bool may_hold);
  bool can_hold(const net::ConnectionPtr& c) const;
  // The exchange in flight ended: the held request is answered now (BUSY or ACCEPT).
  void serve_held();
  void drop_held(bool busy);
  std::optional<ExchangeCode> incompatible(const RequestMsg& m) const;
  bool in_transition(WireFormat theirs) const;
  void refuse(const net::ConnectionPtr& c, const RequestMsg& m, ExchangeCode code);
  void send_busy(const net::ConnectionPtr& c, std::uint64_t exchange_id);
  bool should_yield(const net::ConnectionPtr& c, const RequestMsg& m) const;
  void yield_to(const net::ConnectionPtr& c, const RequestMsg& m, std::optional<double> sw,
                bool same_view);
  void respond(const net::ConnectionPtr& c, const RequestMsg& m, std::uint64_t seq,
               ChunkSetPtr own, std::optional<double> sw, bool same_view);
  // Both.
  void begin_transfer();
  void queue_control(std::uint8_t type, net::SharedBytes msg);
  void pump_send();
  void on_chunk(const net::ConnectionPtr& c, net::Bytes&& b);
  std::optional<FailureReason> check_chunk(Exchange& e, const ChunkView& v, const net::Bytes& b);
  void vote_after_chunk(Exchange& e);
  void on_valid(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_abort(const net::ConnectionPtr& c, const net::Bytes& b);
  void maybe_commit();
  void agree_clip(Exchange& e) const;
  // Ends the exchange in flight without applying anything; sends Abort(code) when notify.
  // bans: a refusal of the partner's vector counts towards banning it (Verdict::bans).
  void fail(FailureReason reason, std::optional<ExchangeCode> notify, bool bans = true);
  void note_refusal(const std::string& partner, const std::string& reason);
  void report(Exchange& e, std::optional<FailureReason> failure);  // none: a success
  // A message that does not fit the protocol state: the connection is closed with a reason.
  void violation(const net::ConnectionPtr& c, const std::string& what);
  bool is_current(const net::ConnectionPtr& c, std::uint64_t id) const;
  void arm_deadline(net::Millis d, ExchangeFailure what);
  // How long a partner may be silent in a transfer before it is reported to membership, or, once
  // suspected, before the transfer ends (silence_floor, or more: ExchangeConfig).
  net::Millis silence_bound(const Exchange& e) const;
  // The transfer's silence: a suspected partner silent for its bound ends it (true); an
  // unsuspected one is reported to the port (membership probes it now). Else the deadline timer
  // is armed for the next such moment, or for the transfer's own deadline if sooner.
  bool check_silence();
  // The exchange in flight runs in wire w: our snapshot must be in it.
  void use_wire(Exchange& e, WireFormat w);
  // The transfer of e (bytes both ways so far) measures its partner's link.
  void measure_link(const Exchange& e);
  float weight(std::int64_t n_self, std::int64_t n_other) const;
  // The schedule (partner_schedule.hpp). plan: the initiator's partner for round_ (rounds without
  // one are skipped; a round waited on past the bound too, then e is left plain). scheduled: the
  // responder's answer to m (the weight when it is the scheduled exchange, else nullopt) and
  // whether m's sender is ahead of us (then we answer BUSY). next_round: round r was served or
  // skipped.
  void plan(Exchange& e);
  std::optional<double> scheduled(const RequestMsg& m, const std::string& from, bool& ahead,
                                  bool& same_view);
  void next_round(std::int64_t r);
  void restart_wait(const Exchange& e);
  void take_round(Exchange& e, const RequestMsg& m, std::optional<double> sw, bool same_view);

  ExchangeConfig cfg_;
  const WireFormat first_wire_;  // cfg_.wire until set_wire
  ExchangePort& port_;
  const PeerDirectory& peers_;
  std::string local_id_;
  std::optional<Exchange> ex_;
  // Committed, its mix not yet applied by the training thread (at most one: the next exchange
  // can only commit after a snapshot, and every step boundary applies a pending mix first). The
  // peer is free for the next exchange meanwhile.
  std::optional<Exchange> committed_;
  ExchangeFailure deadline_reason_ = ExchangeFailure::TimeoutAnswer;  // of the armed deadline
  bool retry_armed_ = false;  // a send retry is pending (chunks_ready waits for it)
  base::ProtocolRng rng_;
  PartnerChoice choice_;  // weights partners by their recent exchange durations
  LinkWire link_;         // the wire of each partner
  AnswerDeadline deadlines_;  // the dial and answer deadlines, fitted to the answers measured
  BanList bans_;
  // The schedule's member list (every member known, PeerDirectory::member_ids), re-derived only
  // when the directory's members_version changes (a directory that keeps none: when the live
  // count changes and at least every 5 s): copying and sorting thousands of members at every
  // exchange is what made the sim slow before (docs/results/sim.md). A new list resets round_.
  const ScheduleView& view();
  std::optional<ScheduleView> view_;
  std::uint64_t view_version_ = 0;
  std::size_t view_count_ = 0;
  net::Millis view_at_{0};
  std::int64_t round_ = 0;      // schedule rounds served or skipped in view_'s member list
  net::Millis round_since_{-1};  // when round_ was first asked for (-1: not yet)
  int round_waits_ = 1;  // round_'s wait, in waits: 1 + the rounds skipped at once before it
  // Times round_'s wait started again because its partner answered without serving it.
  static constexpr int kMaxWaitRestarts = 16;
  int round_restarts_ = 0;
  // Churn: whether the number of listed members not live (dead or left) changed within the last
  // kChurnWaits round waits. Then a busy scheduled partner sends the exchange to a drawn one.
  // Members joining do not count (the list grows with the live count): a quiet swarm's passes
  // stay exact, and so do they with a member long dead.
  bool churning();
  static constexpr double kChurnWaits = 5;
  std::optional<std::size_t> gone_;
  net::Millis churn_at_{-1};
  // The time between the starts of our exchanges (a moving average, ms; -1: none yet): the wait
  // for a round's partner is at least 4 of them (a partner behind needs a few exchange times).
  double start_gap_ms_ = -1;
  net::Millis last_start_{-1};
  struct Withdrawn {
    net::ConnectionPtr conn;
    std::uint64_t id = 0;
  } withdrawn_;  // our request given up for a crossing one; its BUSY answer is expected
  // A request held while our exchange transfers (hold_max), and the moving average of our
  // transfers' durations, ms (ACCEPT to commit; -1: none yet).
  struct Held {
    net::ConnectionPtr conn;
    RequestMsg m;
  };
  std::optional<Held> held_;
  double transfer_ms_ = -1;
};

}  // namespace gossiptrain::gossip
