// A peer's gossip side over any net::Transport: membership, the averaging exchange and catch-up
// sharing it through a dispatcher, the training loop's step hook with the --max-lag bound and
// --max-ahead pace, and their events turned into metric lines. Knows no sockets: the program that
// owns the transport (apps/common/peer_node) builds, starts and stops it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/metrics.hpp"
#include "core/step_hook.hpp"
#include "gossip/catch_up/catch_up.hpp"
#include "gossip/dispatcher.hpp"
#include "gossip/exchange/averager.hpp"
#include "gossip/node/behind.hpp"
#include "gossip/node/comm_state.hpp"
#include "gossip/node/exchange_health.hpp"
#include "gossip/node/lag_bound.hpp"
#include "gossip/node/outer_step.hpp"
#include "gossip/node/pace.hpp"
#include "gossip/membership/membership.hpp"
#include "kernels/backend.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Who drives the node's waits, and on which clock they run.
enum class NodeThreads {
  // gossip-peer: the transport runs its own protocol thread; the training thread calls the hook,
  // and a --max-lag or --max-ahead wait blocks it there (sleeping between serve passes) until the
  // wait ends on the transport scheduler's clock (real time for a TCP transport).
  Separate,
  // gossip-sim: one thread runs the protocol and training of every peer on a virtual clock
  // (net::SimNetwork). Nothing blocks: the hook returns with the wait open (holding()), and the
  // owner calls the hook again (each call one serve pass) until holding() is false. The owner
  // calls everything on the protocol thread; the blocking helpers (wait_for_members, catch_up,
  // leave's linger) are gossip-peer's and refuse to run here (std::logic_error).
  Shared,
};

// Everything the node needs, typed (apps::node_config builds it from gossip-peer's flags).
struct NodeConfig {
  NodeThreads threads = NodeThreads::Separate;
  std::uint64_t fingerprint = 0;  // the model's; fetchers and partners with another are refused
  MembershipConfig membership;    // seeds and timings
  AveragerConfig averager;        // gossip_every, wire, robust, fault, error feedback, rate, ...
  // --max-lag: steps without an exchange that averaged before training waits (auto: see
  // MaxLag::resolve). max_lag_share: its time budget.
  MaxLag max_lag;
  double max_lag_share = 0.25;
  double max_ahead = 0.02;     // --max-ahead: fraction of the run; 0: off
  // --catch-up-behind (behind.behind 0: off). Separate threads only: the owner fetches the state
  // when run() hands back (catch_up_wanted).
  BehindConfig behind;
  OuterConfig outer;           // --outer-every (every 0: off)
  std::string checkpoint_dir;  // where the outer optimizer's and error feedback's state is kept
};

// The node is the training loop's one step hook: the averager, then the catch-up server (which
// takes the state after any mix applied at the same boundary).
class Node final : private core::StepHook {
 public:
  // Becomes transport's handler, calls start_transport (which must start it: the membership reads
  // its bound address), then builds the protocols on the protocol thread. The transport must be
  // stopped, after leave(), before the node is destroyed.
  Node(net::Transport& transport, const NodeConfig& cfg, kernels::Backend& backend,
       core::Metrics& metrics, const std::function<void()>& start_transport);

  // Shared threads: the exchange's and the membership's events, after the node's own metric
  // lines (the simulator's bookkeeping). Set before start(); called on the protocol thread.
  void set_exchange_observer(std::function<void(const ExchangeEvent&)> fn) {
    exchange_observer_ = std::move(fn);
  }
  void set_member_observer(std::function<void(const MemberInfo&)> fn) {
    member_observer_ = std::move(fn);
  }
  // The protocols, for an owner on the protocol thread (the simulator: joined(), sync_now(), the
  // averager's boundary requests, catch-up as a callback).
  Membership& membership() { return *membership_; }
  Averager& averager() { return *averager_; }
  CatchUpClient& catch_up_client() { return *catch_up_client_; }
  CatchUpServer& catch_up_server() { return *catch_up_server_; }
  // Shared threads: a --max-lag or --max-ahead wait is open; the next hook calls serve the
  // protocol (no training) until it ends. Always false with separate threads (the hook waits).
  bool holding() const { return hold_.has_value(); }
  // Seconds on the transport scheduler's clock since the node was built: the clock of every
  // decision (--max-lag's budget, --max-ahead's partners, the waits' deadlines).
  double now_s() const;

  // Joins through the seeds. If every seed refuses this peer in the handshake
  // (MembershipConfig::join_refused_limit), join_refused() says why from then on and *give_up is
  // set, which ends the waits before training and training itself.
  void start(std::atomic<bool>* give_up = nullptr);
  std::optional<std::string> join_refused() const;
  // Leaves the swarm gracefully and gives the leave time to go out (the owner then stops the
  // transport). Once; later calls do nothing.
  void leave();
  // Announces a leave and stops answering membership, from any thread, without waiting: the
  // training thread has hung, and the swarm must stop counting on this peer.
  void withdraw();
  core::StepHook& hook() { return *this; }
  // Live members known, this peer not counted. Any thread.
  std::size_t live_count() const { return membership_->live_count(); }
  // Members dead or suspected without leaving, and those known (count_dead). Any thread.
  DeadCount dead_count() const { return count_dead(membership_->members()); }
  AveragerStats stats() const { return averager_->stats(); }
  // --max-lag: how often, and for how long in all, training waited for an exchange to complete.
  std::uint64_t lag_waits() const { return lag_waits_; }
  double lag_wait_s() const { return lag_wait_s_; }
  // Waits due by steps that --max-lag-share's time budget put off (LagBound::deferred).
  std::uint64_t lag_deferred() const { return lag_->deferred(); }
  // --max-ahead: how often, and for how long in all, training waited for slower partners.
  std::uint64_t pace_waits() const { return pace_waits_; }
  double pace_wait_s() const { return pace_wait_s_; }

  // Start together: waits (polling membership) until n live members, this peer included, are
  // known, or timeout_s pass (a warning; returns false), or stop is set. Before the first step.
  bool wait_for_members(int n, double timeout_s, const std::atomic<bool>& stop);
  // Whether this peer's state carries a run on (resumed from its checkpoint, or caught up): a
  // cohort's fresh peer asks only such a peer for its state (CatchUpServer::set_carries_run).
  // Any thread; before start() for a resumed peer.
  void set_carries_run(bool yes) { catch_up_server_->set_carries_run(yes); }
  // Catch-up: waits for the join through the seeds, then fetches a live member's state, all within
  // cfg.deadline. nullopt when there was nobody to fetch from (no live member after joining) or
  // stop was set; else the fetch's result (the state in it when ok). Before the first step.
  std::optional<CatchUpResult> catch_up(CatchUpClientConfig cfg, const std::atomic<bool>& stop);
  // --catch-up-behind: partners far ahead clip this peer away (BehindWatch), so the hook set
  // StepContext::hand_back. Returns them, furthest ahead first (CatchUpClientConfig::prefer), and
  // clears them; empty when none asked. Training thread.
  std::vector<std::string> catch_up_wanted() { return std::exchange(catch_up_wanted_, {}); }
  // --catch-up-behind, for a finished peer (BehindWatch; false and empty when off; any thread):
  // whether partners well behind it clip it away (it ran ahead of the swarm and should not leave
  // with a model the swarm does not share); whether most partners heard in the last 10 s clip it
  // away, whatever their progress; whether most of them are 10% of the run or more behind it; and
  // the finished partners that clip it away, when they are enough to take one's state (took_state
  // then forgets what was heard: only exchanges after the take say whether the state taken still
  // leaves it apart, a copy made while the swarm settled).
  bool ran_ahead() const { return behind_ && behind_->ran_ahead(1.0, now_s()); }
  bool apart() const { return behind_ && behind_->apart(now_s()); }
  bool ahead_of_swarm() const { return behind_ && behind_->ahead_of_swarm(1.0, now_s()); }
  std::vector<std::string> finished_apart() const {
    return behind_ ? behind_->finished_apart(now_s()) : std::vector<std::string>{};
  }
  // The state was taken (after finished_apart): what was heard before and during the fetch was
  // about the model it replaced, and is forgotten.
  void took_state() {
    if (behind_) behind_->tried(now_s(), /*quiet_s=*/0.0);
  }
  // Whether this peer averaged less than a tenth as often as its --gossip-every asks over its run
  // (a slow link: it trained alone between its few exchanges). False when off.
  bool undermixed() const {
    const std::int64_t steps = total_steps_.load();
    const int every = std::max(1, averager_->config().gossip_every);
    return behind_ && steps > 0 &&
           10.0 * double(averager_->stats().averaging) * double(every) < double(steps);
  }

 private:
  void build_protocols(const NodeConfig& cfg, kernels::Backend& backend);
  void on_exchange(const ExchangeEvent& e);  // protocol thread
  void between_steps(core::StepContext& ctx) override;
  // Membership has joined (its first sync reply is in); asked on the protocol thread.
  bool joined();
  // Warns once when every exchange has failed for a while (protocol thread).
  void watch_health(const ExchangeEvent& e);
  // Bounded staleness: after max_lag_ steps without an exchange that averaged, keeps serving the
  // protocol between steps (no training) until one completes or kMaxLagWait passes; backs off
  // when the waits find none (gossip/node/lag_bound.hpp). Returns whether a wait opened.
  bool bound_lag(core::StepContext& ctx);
  // --max-ahead: while more than that ahead of the slowest recent partner, serves the protocol
  // between steps (no training), at most kPaceWait at a time. Returns whether a wait opened.
  bool keep_pace(core::StepContext& ctx);
  // A partner's word (an exchange's, or membership's progress word) from a run as long as ours
  // in steps, or one we cannot tell (protocol thread).
  bool same_run_length(double partner_progress, std::int64_t partner_step) const;
  void say_waits(int epoch);                           // the `waits` metric line
  // A wait training is in (--max-lag or --max-ahead): when it began, its deadline, and what ends
  // it early.
  enum class Stage { Lag, Pace, Waits };
  struct Hold {
    Stage kind;
    net::Millis start, end;
    std::uint64_t before = 0;  // Lag: averaging exchanges when it began
    double own = 0;            // Pace: our progress
    bool completed = false;    // Lag: an exchange averaged
  };
  // The checks after the step's hooks, from `stage` on: a wait may open (then, with shared
  // threads, the rest runs when it ends).
  void after_hooks(core::StepContext& ctx, Stage stage);
  // Separate threads: serves until the hold ends, and ends it; returns true. Shared: false (open).
  bool wait_here(core::StepContext& ctx);
  bool hold_over();                      // the hold's end condition, or its deadline passed
  void serve_once(core::StepContext& ctx);  // one pass of the hooks, no training
  void end_hold();                       // counts the wait; the hold is closed
  void require_separate(const char* what) const;
  // Runs fn on the protocol thread and waits for it (its exception is rethrown here); with
  // shared threads, here and now.
  void on_protocol_thread(std::function<void()> fn);
  // Posts fn to the protocol thread without waiting; with shared threads, runs it here and now.
  void post_or_run(std::function<void()> fn);

  net::Transport& transport_;
  net::Scheduler& sched_;
  NodeThreads threads_;
  net::Millis t0_{0};  // sched_.now() when built
  std::function<void(const ExchangeEvent&)> exchange_observer_;
  std::function<void(const MemberInfo&)> member_observer_;
  std::optional<Hold> hold_;  // training thread only
  core::Metrics& metrics_;
  Dispatcher dispatcher_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Averager> averager_;
  ExchangeHealth health_;  // protocol thread only
  std::unique_ptr<CatchUpServer> catch_up_server_;
  std::unique_ptr<CatchUpClient> catch_up_client_;
  // The outer optimizer and error feedback's state (null when both are off). Training thread.
  std::unique_ptr<CommState> comm_;
  std::atomic<bool> started_{false};
  mutable std::mutex refused_mu_;
  std::optional<std::string> join_refused_;  // set on the protocol thread
  std::atomic<bool>* give_up_ = nullptr;
  // Training thread only: --max-lag state.
  int max_lag_ = 0;
  std::unique_ptr<LagBound> lag_;
  std::uint64_t lag_waits_ = 0;
  double lag_wait_s_ = 0.0;
  int waits_epoch_ = -1;  // the epoch of the last `waits` line
  double hook_s_ = 0.0;   // seconds in the averager's and catch-up's step hooks
  // --max-ahead (null: off). Partners are heard on the protocol thread.
  std::unique_ptr<PaceKeeper> pace_;
  // --catch-up-behind (null: off). Partners heard on the protocol thread; the training thread asks
  // and keeps what it found for the owner.
  std::unique_ptr<BehindWatch> behind_;
  std::vector<std::string> catch_up_wanted_;
  std::atomic<std::int64_t> total_steps_{0};  // of our run, from the training thread
  std::uint64_t pace_waits_ = 0;
  double pace_wait_s_ = 0.0;
};

}  // namespace gossiptrain::gossip
