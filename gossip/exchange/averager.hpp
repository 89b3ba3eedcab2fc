// The pairwise push-pull averaging exchange (docs/exchange.md, "The averaging exchange, in detail"): a
// StepHook on the training thread plus a TransportHandler on the protocol thread, meeting through a
// small mutex-guarded handoff so training never waits for the network. The protocol itself is
// ExchangeProtocol (exchange_protocol.hpp); the averager is its port: timers, dialling, the
// connection pool, and the handoff to the training thread's buffers (snapshot_buffers.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/rng.hpp"
#include "core/step_hook.hpp"
#include "gossip/deadline.hpp"
#include "gossip/exchange/ban_list.hpp"
#include "gossip/exchange/chunk_set.hpp"
#include "gossip/exchange/exchange_conns.hpp"
#include "gossip/exchange/exchange_protocol.hpp"
#include "gossip/exchange/fault.hpp"
#include "gossip/exchange/link_wire.hpp"
#include "gossip/exchange/robust_bound.hpp"
#include "gossip/exchange/snapshot_buffers.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "kernels/backend.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

class Dispatcher;

struct AveragerConfig {
  RobustConfig robust;
  FaultConfig fault;
  int gossip_every = 1;  // steps between the exchanges this peer starts (>= 1)
  WireFormat wire = WireFormat::Fp32;
  // Error feedback on a lossy wire (fp16, bf16, int8): each snapshot sends the encoding of x + e
  // and keeps in e what the encoding rounded off (docs/communication.md). Takes the copy path.
  bool error_feedback = false;
  // The wire of the end of training: from finish_from of the run's progress on (or as soon as a
  // partner exchanges in it), exchanges go in this wire instead of `wire`: a coarse wire while
  // the models move far between exchanges, a finer one where the final accuracy is made. Both
  // partners of an exchange use the same one; around the switch a peer answers the other wire
  // BUSY (it switches itself) or with a quiet wire refusal. Takes the copy path. The error
  // feedback residual carries over.
  std::optional<WireFormat> finish_wire;
  double finish_from = 0.9;
  // With the partners whose link is measured slow, exchanges go in this compressed wire, with
  // error feedback, instead of `wire` (link_wire.hpp, docs/communication.md); the responder takes
  // the wire the request names. Only where `wire` is fp32 and there is no finish wire; nullopt:
  // off. Its threshold and the rest: link.
  std::optional<WireFormat> slow_link_wire;
  LinkWireConfig link;
  bool weight_by_samples = false;   // w = n_other / (n_self + n_other) instead of 1/2
  std::uint64_t fingerprint = 0;    // model fingerprint; peers with another one are refused
  double max_diff_norm = 0.0;       // refuse r when ||r - s||_2 exceeds this; 0 = off
  int max_tries = 3;                // peers asked per exchange (BUSY, refused, unreachable)
  PartnerChoiceConfig choice;       // which peer is asked: slow links asked much less often
  // A finished peer (training done, lingering) starts exchanges only while it is not settled
  // with the swarm (docs/lifecycle.md, "Lingering"): settled once, since it last moved (a mix
  // that moved it over half of settle_distance), it has met min(settle_partners, live members)
  // partners and none of them that was not known to be training was over settle_distance
  // (||r - s||) away. Unsettled, it starts one exchange at most every settle_gap; settled, one
  // every settle_probe (which finds a partner reachable again, after a heal). 0: a finished peer only serves (the library default;
  // gossip-peer's --linger-settle).
  double settle_distance = 0;
  int settle_partners = 7;
  net::Millis settle_gap{100};
  net::Millis settle_probe{2000};
  bool yield_between_steps = true;  // give up the CPU at every step boundary (see between_steps)
  // Mix from the chunk messages (ours and the partner's, no copies into s_ and r_) when the
  // backend's memory is host memory and the wire is element-wise (fp32, fp16, bf16). false forces
  // the copy path every other case takes.
  bool direct = true;
  net::Millis answer_timeout{5000};           // REQUEST -> ACCEPT/BUSY/REFUSE
  net::Millis transfer_timeout_floor{10000};  // ACCEPT -> commit, plus the size-scaled part
  net::Millis silence_floor{1000};  // a suspected, silent partner's transfer ends (exchange_protocol.hpp)
  double min_rate_bytes_per_s = 20e6;  // transfer deadline = floor + bytes both ways / this rate
  // Cap on the snapshot bytes this peer sends per second in an exchange (0: none), so that an
  // exchange spreads its CPU over more training steps. At least min_rate_bytes_per_s: partners
  // size their deadlines on that floor. Adjustable later with set_max_rate().
  double max_rate_bytes_per_s = 0;
  // Payload bytes per Chunk message: with its header, one chunk is exactly one 1 MiB channel frame.
  std::size_t chunk_bytes = (1u << 20) - kChunkHeaderBytes;
  net::Millis send_retry{1};      // wait before retrying a send refused by back-pressure
  // A request that finds us in another exchange's transfer is held up to this long and answered
  // when that exchange ends (ExchangeConfig::hold_max); 0: BUSY at once.
  net::Millis hold_max{20};
  net::Millis idle_close{30000};  // close our dedicated exchange connection after this idle
  std::uint64_t seed = 0;         // peer choice and exchange ids; 0 = from random_device
};

// The one check of an AveragerConfig's settings (std::invalid_argument saying which rule fails):
// the Averager's constructor runs it, and gossip-peer's flag parser before anything starts.
void check_config(const AveragerConfig& c);

struct AveragerStats {
  std::uint64_t ok = 0;
  // Of ok, those that averaged: clip at least kAveragingClip (exchange_protocol.hpp); and the sum
  // of the effective weights w c applied (a peer's effective averaging).
  std::uint64_t averaging = 0;
  double weight_sum = 0;
  std::uint64_t failed = 0;
  std::map<std::string, std::uint64_t> failed_by_reason;  // keyed by ExchangeEvent::reason
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t no_peer = 0;       // exchanges not started: no live peer to ask
  std::uint64_t busy_sent = 0;     // requests we answered BUSY
  std::uint64_t held = 0;          // requests held until our exchange ended (then answered)
  std::uint64_t refused_sent = 0;  // requests we refused (incompatible or banned)
  std::uint64_t bans = 0;          // partners banned (each ban counted)
};

// Lifetime: construct before the transport starts delivering; destroy after it has stopped (or on
// its protocol thread) and after the training loop stopped calling between_steps.
class Averager final : public core::StepHook, public net::TransportHandler, private ExchangePort {
 public:
  using EventFn = std::function<void(const ExchangeEvent&)>;

  // Registers itself with the dispatcher for the exchange types (0x40-0x5F). The directory, the
  // transport and the backend must outlive the averager. Throws std::invalid_argument on a bad
  // config.
  Averager(AveragerConfig cfg, net::Transport& transport, Dispatcher& dispatcher,
           const PeerDirectory& peers, kernels::Backend& backend);
  // Same without a dispatcher: the caller routes the exchange types to this handler itself.
  Averager(AveragerConfig cfg, net::Transport& transport, const PeerDirectory& peers,
           kernels::Backend& backend);
  ~Averager() override;

  // Called on the protocol thread for every finished exchange. Set before traffic starts.
  // Changes the fault injected from the next snapshot on (the simulator's churn fault events;
  // a gossip-peer process is restarted with --fault instead). Training thread.
  void set_fault(FaultConfig f) { fault_.reset(f); }
  void set_event_callback(EventFn fn) { on_event_ = std::move(fn); }
  // Called on the protocol thread when a partner is banned. Set before traffic starts.
  void set_ban_callback(std::function<void(const BanEvent&)> fn) { on_ban_ = std::move(fn); }
  // Called on the protocol thread with a partner silent in a transfer (ExchangePort::silent):
  // the node has membership probe it now. Set before traffic starts.
  void set_silent_callback(std::function<void(const std::string&)> fn) {
    on_silent_ = std::move(fn);
  }
  // Whether a peer is banned now (protocol thread).
  bool banned(const std::string& peer) const { return protocol_.banned(peer); }
  // Called on the protocol thread whenever work waits for the training thread's next step
  // boundary (a responder's snapshot, a committed mix, a norm to measure). gossip-peer's training
  // loop comes by every step anyway and sets none; a driver without a steady step loop (gossip-sim
  // on its virtual clock) schedules a between_steps call. Set before traffic starts.
  void set_boundary_request(std::function<void()> fn) { on_boundary_ = std::move(fn); }

  // StepHook (training thread): takes the snapshot a new or accepted exchange needs, uploads the
  // partner's chunks received so far, checks the optional norm bound, applies a committed mix.
  // Never waits on the network.
  void between_steps(core::StepContext& ctx) override;

  // TransportHandler (protocol thread), exchange message types only.
  void on_connection(const net::ConnectionPtr& c, bool inbound) override;
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override;
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override;

  AveragerStats stats() const;
  // Our progress (core::progress_of, -1 before the first step) and step at the last step
  // boundary, as our exchanges tell them (any thread; ExchangePort's, and membership's word).
  double own_progress() const override { return own_progress_.load(); }
  std::int64_t own_step() const override { return own_step_.load(); }
  // Membership declared peer dead or gone (any thread): an exchange with it in flight fails now.
  void partner_lost(const std::string& peer);
  // Membership suspects peer, or no longer does (any thread): a silent transfer with it ends.
  void partner_suspected(const std::string& peer, bool suspected);
  // Changes max_rate_bytes_per_s (any thread; the next chunk sent obeys it). Throws
  // std::invalid_argument for a rate under min_rate_bytes_per_s other than 0.
  void set_max_rate(double bytes_per_s);
  // True while this peer takes part in an exchange or has a committed mix still to apply (any
  // thread).
  bool in_exchange() const;
  const AveragerConfig& config() const { return cfg_; }
  // Error feedback's residual (training thread): empty without error feedback or before the
  // first step. set_residual (a checkpoint's) takes effect once the buffers exist; a vector of
  // another size than the model's is ignored.
  std::vector<float> residual() const { return buffers_->residual(); }
  // The slow link wire's residual (slow_link_wire; the same rules; empty without one), kept apart:
  // the two wires round off different things.
  std::vector<float> slow_residual() const {
    return slow_buffers_ ? slow_buffers_->residual() : std::vector<float>{};
  }
  void set_slow_residual(std::vector<float> e);
  // Whether exchanges have moved to the finish wire (training thread).
  bool on_finish_wire() const { return on_finish_wire_; }
  void set_residual(std::vector<float> e);
  // While training waits for an exchange (--max-lag), an exchange that failed (every partner
  // asked was BUSY, refused or silent) is started again after a short random pause instead of at
  // the next gossip_every steps: a waiting peer asks others rather than only waiting to be asked
  // (training thread).
  void set_eager(bool on) { eager_ = on; }
  // Whether exchanges with partner go in the slow link's wire now (protocol thread).
  bool slow_link(const std::string& partner) const { return protocol_.link_wire().slow(partner); }

 private:
  // The committed mix the training thread applies at its next step boundary.
  struct PendingMix {
    std::uint64_t seq = 0;
    Commit c;
    ChunkList rest;  // the partner's chunks of that exchange not yet taken by training
  };
  // What one step boundary has to do, taken from the handoff under its lock.
  struct StepWork {
    std::optional<PendingMix> mix;
    std::uint64_t seq = 0;
    bool snapshot = false, initiate = false, refresh = false;
    WireFormat snapshot_wire = WireFormat::Fp32;  // of the snapshot to take
    ChunkList in;
    WireFormat in_wire = WireFormat::Fp32;  // of the partner's chunks
    bool norm_vote = false;  // the partner's vector is complete: measure ||r - s|| for the vote
    std::string partner;     // whose vector that is
    net::Millis at{0};       // and when its last chunk came in
  };

  // --- training thread ---
  void ensure_buffers(core::StepContext& ctx);
  StepWork take_work(const core::StepContext& ctx);
  void apply_mix(core::StepContext& ctx, PendingMix& mix);
  void begin_exchange(core::StepContext& ctx, std::uint64_t seq);
  // Moves to the finish wire when it is time and nothing is in flight (AveragerConfig).
  void maybe_switch_wire(core::StepContext& ctx);
  // The snapshot buffers for a wire (the first one, then the finish wire's).
  std::unique_ptr<SnapshotBuffers> make_buffers(bool direct, WireFormat wire);
  void refresh_standing(core::StepContext& ctx);
  void vote_norm(core::StepContext& ctx, const StepWork& w);
  ChunkSetPtr snapshot(core::StepContext& ctx, std::uint64_t seq, WireFormat wire);
  // The buffers of an exchange in wire w: the configured wire's, or the slow link's.
  SnapshotBuffers& buffers(WireFormat w);
  // The bounds applied to a measured ||r - s|| of partner's vector at `at`.
  Verdict judge_at(const std::string& partner, double norm, const std::function<double()>& own_norm,
                   net::Millis at);
  // The one give-back of received buffers to the transport's pool.
  void recycle(net::Bytes&& b);
  void recycle_all(ChunkList& chunks);
  template <typename Fn>
  void post(Fn fn);
  void request_boundary() override {
    if (on_boundary_) on_boundary_();
  }

  // --- ExchangePort (protocol thread) ---
  void finish_wire_seen() override { finish_seen_.store(true); }
  net::Millis now() const override { return sched_.now(); }
  void arm(Timer t, std::uint64_t seq, net::Millis d) override;
  void cancel(Timer t) override { timer(t).cancel(); }
  Deadline& timer(Timer t) {
    return t == Timer::Deadline ? deadline_ : t == Timer::Retry ? retry_ : hold_;
  }
  void dial(std::uint64_t seq, const PeerRef& p) override;
  net::ConnectionPtr pooled(const std::string& peer) override { return conns_.open(peer); }
  bool has_pooled(const std::string& peer) override { return conns_.has(peer); }
  void pool(const std::string& peer, net::ConnectionPtr c) override { conns_.put(peer, c); }
  void touch_pooled(const std::string& peer) override { conns_.touch(peer); }
  void forget_pooled(const std::string& peer) override { conns_.forget(peer); }
  void forget_pooled(const net::ConnectionPtr& c) override { conns_.forget(c); }
  void close_pooled(const std::string& peer, const std::string& reason) override {
    conns_.close_unless_in_use(peer, reason);
  }
  void idle_close_pooled(const std::string& peer) override { conns_.schedule_idle_close(peer); }
  std::size_t n_params() const override { return n_params_.load(); }
  std::int64_t own_samples() const override { return own_samples_.load(); }
  void heard_step(const std::string& partner, std::int64_t step) override {
    bound_.heard_step(partner, step, sched_.now());
  }
  void heard_payload(const std::string& partner, std::uint64_t hash) override {
    bound_.heard_payload(partner, hash);
  }
  double max_rate() const override { return max_rate_.load(); }
  std::optional<std::uint64_t> claim(ChunkSetPtr& own, WireFormat w) override;
  void want_snapshot(std::uint64_t seq, WireFormat w) override;
  void release(std::uint64_t seq, bool no_peer) override;
  void commit(std::uint64_t seq, const Commit& c) override;
  void deliver(std::uint64_t seq, net::Bytes&& chunk, bool complete, bool norm_vote,
               const std::string& partner, WireFormat wire) override;
  Verdict judge(const std::string& partner, double norm,
                const std::function<double()>& own_norm) override {
    return judge_at(partner, norm, own_norm, sched_.now());
  }
  bool add_sq_diff(const ChunkSet* own, const std::uint8_t* r, std::size_t offset, std::size_t size,
                   double& sq) override {
    return gossip::add_sq_diff(be_, own, cfg_.chunk_bytes, r, offset, size, sq);
  }
  double own_sq_norm(const ChunkSet& own) override {
    return gossip::own_sq_norm(be_, own, zeros_host_);
  }
  void finished(const ExchangeEvent& ev) override;
  bool avoid(const std::string& partner) const override;
  void ban_started(const BanEvent& b) override;
  void silent(const std::string& partner) override {
    if (on_silent_) on_silent_(partner);
  }
  void count(Counter c) override;

  AveragerConfig cfg_;
  net::Transport& transport_;
  net::Scheduler& sched_;
  kernels::Backend& be_;
  // Direct mode: a host-memory backend and an element-wise wire (snapshot_buffers.hpp).
  bool direct_ = false;
  EventFn on_event_;
  std::function<void(const BanEvent&)> on_ban_;
  std::function<void(const std::string&)> on_silent_;
  std::function<void()> on_boundary_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards posted callbacks

  // Protocol thread only.
  ExchangeProtocol protocol_;
  ConnectionPool conns_;
  Deadline deadline_, retry_, hold_;  // the protocol's timers
  std::vector<float> zeros_host_;  // fast norm scratch

  // Training thread <-> protocol thread handoff.
  mutable std::mutex mu_;
  bool active_ = false;  // an exchange is in flight (claimed by either thread)
  std::uint64_t seq_ = 0;
  bool want_snapshot_ = false;  // the responder needs a snapshot for seq_
  WireFormat want_wire_ = WireFormat::Fp32;  // in this wire
  ChunkSetPtr standing_;  // a whole snapshot (the last one taken) for the next request, if idle
  ChunkList incoming_;    // the partner's chunks for seq_ not yet taken by training
  WireFormat incoming_wire_ = WireFormat::Fp32;  // their wire
  bool incoming_complete_ = false;     // the last of them is in incoming_
  std::optional<PendingMix> pending_;  // apply x += w (r - s) at the next step boundary
  bool incoming_norm_ = false;         // the training thread must measure ||r - s|| for seq_'s vote
  std::string incoming_partner_;       // whose vector that is
  net::Millis incoming_at_{0};         // and when its last chunk came in
  RobustBound bound_;                  // clipped mixing: tau and the refusals (its own lock)
  bool committed_unreported_ = false;  // a committed mix whose event is not yet reported
  AveragerStats stats_;
  // When the last exchange ended without a mix (release): an eager retry waits a pause after it.
  net::Millis released_at_{0};  // the scheduler's clock

  std::atomic<std::size_t> n_params_{0};  // known after the first between_steps
  std::atomic<std::int64_t> own_samples_{0};
  std::atomic<double> own_progress_{-1.0};  // core::progress_of the last step boundary
  std::atomic<std::int64_t> own_step_{0};   // ctx.step of the last step boundary
  std::atomic<bool> widen_{false};  // int4-rel: a partner could not decode our vector
  std::atomic<double> max_rate_{0.0};       // bytes per second; 0: no cap

  // Training thread only.
  std::unique_ptr<SnapshotBuffers> buffers_;
  std::unique_ptr<SnapshotBuffers> slow_buffers_;  // the slow link wire's (null: none)
  FaultInjector fault_;
  std::int64_t next_initiate_step_ = 0;
  bool eager_ = false;           // set_eager
  net::Millis eager_pause_{0};   // drawn anew at every start
  base::SplitMix64 eager_rng_;
  std::int64_t standing_step_ = 0;  // step at which standing_ was taken
  bool on_finish_wire_ = false;     // training thread
  std::atomic<bool> finish_seen_{false};  // a partner is on the finish wire (protocol thread)
  std::vector<float> pending_residual_;  // set_residual before the buffers existed
  std::vector<float> pending_slow_residual_;  // set_slow_residual before the buffers existed

  // Lingering (AveragerConfig::settle_distance), under mu_: training is done; each partner met
  // since then (and since this peer last moved) with its ||r - s|| and whether it had finished.
  struct Met {
    double distance = 0;
    bool partner_done = false;  // or its progress not known
  };
  bool settled_locked() const;
  const PeerDirectory& peers_;
  bool done_ = false;
  std::atomic<bool> lingering_{false};  // done_, for the protocol thread
  // Protocol thread: each partner's progress as it last told it, and when, at most kMaxMet. Older
  // than kHeardFresh it says nothing (a partner across a partition healed since).
  std::unordered_map<std::string, std::pair<double, net::Millis>> heard_;
  static constexpr net::Millis kHeardFresh{5000};
  std::unordered_map<std::string, Met> met_;  // at most kMaxMet
  net::Millis last_done_start_{-1000000000};
  static constexpr std::size_t kMaxMet = 4096;
};

}  // namespace gossiptrain::gossip
