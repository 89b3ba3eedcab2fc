// Ties membership, the averager and catch-up of one peer to its training loop over any
// net::Transport, and logs their events as `member`, `exchange`, `exchange_alert`, `ban`,
// `catch_up_served`, `connection_closed`, `waits`, `hold` and `min_peers` metric lines
// (docs/peer.md, "Metric lines").
#include "gossip/node/node.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "net/close_reason.hpp"

namespace gossiptrain::gossip {

Node::Node(net::Transport& transport, const NodeConfig& cfg, kernels::Backend& backend,
           core::Metrics& metrics, const std::function<void()>& start_transport)
    : transport_(transport),
      sched_(transport.scheduler()),
      threads_(cfg.threads),
      metrics_(metrics) {
  // One metric line per closed connection, with its typed reason (never the free text): the
  // Prometheus registry counts them as gossiptrain_connections_closed_total{reason}.
  dispatcher_.set_close_observer([this](const net::ConnectionPtr& c, const net::CloseCause& cause) {
    metrics_.emit(
        "connection_closed",
        {{"partner", c->peer_id()}, {"reason", std::string(net::close_reason_name(cause.reason))}});
  });
  transport_.set_handler(&dispatcher_);
  // The membership reads the transport's bound address, so the protocols are built once the
  // transport listens; on its protocol thread, so no event can reach the dispatcher
  // half-registered.
  start_transport();
  t0_ = sched_.now();
  started_ = true;
  cfg.membership.validate();
  max_lag_ = cfg.max_lag.resolve(cfg.averager.gossip_every, backend.host_memory());
  LagBoundConfig lc;
  lc.max_lag = max_lag_;
  lc.share = cfg.max_lag_share;
  lag_ = std::make_unique<LagBound>(lc);
  if (cfg.max_ahead > 0) pace_ = std::make_unique<PaceKeeper>(PaceConfig{cfg.max_ahead});
  // Shared threads have no owner that fetches a state mid-run (gossip-sim steps the trainer).
  if (cfg.behind.behind > 0 && threads_ == NodeThreads::Separate) {
    BehindConfig bc = cfg.behind;
    if (cfg.averager.settle_distance > 0) bc.min_distance = cfg.averager.settle_distance;
    behind_ = std::make_unique<BehindWatch>(bc);
  }
  on_protocol_thread([this, &cfg, &backend] { build_protocols(cfg, backend); });
  if (cfg.outer.every > 0 || cfg.averager.error_feedback) {
    std::unique_ptr<OuterStep> outer;
    if (cfg.outer.every > 0) outer = std::make_unique<OuterStep>(cfg.outer, backend);
    comm_ = std::make_unique<CommState>(cfg.checkpoint_dir, cfg.fingerprint, *averager_,
                                        std::move(outer));
  }
}

double Node::now_s() const { return double((sched_.now() - t0_).count()) / 1000.0; }

void Node::require_separate(const char* what) const {
  if (threads_ == NodeThreads::Shared)
    throw std::logic_error(std::string("gossip::Node::") + what +
                           " blocks: not with NodeThreads::Shared");
}

void Node::post_or_run(std::function<void()> fn) {
  if (threads_ == NodeThreads::Shared) fn();  // the caller is the protocol thread
  else sched_.post(std::move(fn));
}

void Node::on_protocol_thread(std::function<void()> fn) {
  if (threads_ == NodeThreads::Shared) {  // the caller is the protocol thread
    fn();
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto ready = done->get_future();
  sched_.post([fn = std::move(fn), done] {
    try {
      fn();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  ready.get();
}

void Node::build_protocols(const NodeConfig& cfg, kernels::Backend& backend) {
  membership_ = std::make_unique<Membership>(transport_, cfg.membership);
  membership_->set_listener([this](const MemberInfo& m) {
    metrics_.emit("member", {{"member", m.id},
                             {"addr", m.addr},
                             {"state", to_string(m.state)},
                             {"incarnation", m.incarnation}});
    // Dead or left: an exchange with it ends now. A suspicion alone can come from probes
    // delayed behind a saturated slow link, whose long transfer an abort would waste: it ends
    // only a transfer from which nothing has come for a while (partner-silent).
    if ((m.state == MemberState::Dead || m.state == MemberState::Left) && averager_)
      averager_->partner_lost(m.id);
    else if (averager_)
      averager_->partner_suspected(m.id, m.state == MemberState::Suspect);
    // --max-ahead waits for no member we cannot reach now.
    if (m.state != MemberState::Alive && pace_) pace_->unreachable(m.id);
    if (member_observer_) member_observer_(m);
  });
  dispatcher_.add(kMembershipTypeFirst, kMembershipTypeLast, membership_.get());

  averager_ =
      std::make_unique<Averager>(cfg.averager, transport_, dispatcher_, *membership_, backend);
  averager_->set_event_callback([this](const ExchangeEvent& e) { on_exchange(e); });
  averager_->set_silent_callback([this](const std::string& id) { membership_->probe_soon(id); });
  // Every ping, ping-req and ack says the sender's progress: --max-ahead hears each member every
  // few probe periods, where exchanges alone left a peer on a slow link deaf to the swarm.
  membership_->set_progress(
      [this] {
        const double p = averager_->own_progress();
        return ProgressWord{p >= 0 ? std::min(1.0, p) : -1.0,
                            std::max<std::int64_t>(0, averager_->own_step())};
      },
      [this](const std::string& id, const ProgressWord& w) {
        if (pace_ && same_run_length(w.progress, w.step)) pace_->heard(id, w.progress, now_s());
      });
  averager_->set_ban_callback([this](const BanEvent& b) {
    const double for_s = b.duration.count() / 1000.0;
    metrics_.emit("ban", {{"partner", b.partner},
                          {"until_s", metrics_.seconds() + for_s},
                          {"for_s", for_s},
                          {"reason", b.reason},
                          {"bans", b.count}});
  });

  CatchUpServerConfig sc;
  sc.fingerprint = cfg.fingerprint;
  catch_up_server_ = std::make_unique<CatchUpServer>(sc, transport_, dispatcher_);
  catch_up_server_->set_event_callback([this](const CatchUpServed& e) {
    metrics_.emit("catch_up_served", {{"to", e.peer},
                                      {"ok", e.ok},
                                      {"reason", e.reason},
                                      {"step", e.step},
                                      {"bytes", e.bytes},
                                      {"ms", e.ms}});
  });
  catch_up_client_ = std::make_unique<CatchUpClient>(transport_, dispatcher_, *membership_);
}

void Node::on_exchange(const ExchangeEvent& e) {
  if (pace_ && same_run_length(e.partner_progress, e.partner_step))
    pace_->heard(e.partner, e.partner_progress, now_s());
  if (behind_ && e.ok && same_run_length(e.partner_progress, e.partner_step))
    behind_->exchanged(e.partner, e.partner_progress, e.clip, e.diff_norm, now_s());
  metrics_.emit("exchange", {{"partner", e.partner},
                             {"role", role_name(e.role)},
                             {"ok", e.ok},
                             {"reason", e.reason()},
                             {"bytes", e.bytes_sent + e.bytes_received},
                             {"bytes_sent", e.bytes_sent},
                             {"bytes_received", e.bytes_received},
                             {"ms", e.ms},
                             {"wire", wire_name(e.wire)},
                             {"w", e.w},
                             {"diff_norm", e.diff_norm >= 0 ? nlohmann::json(e.diff_norm)
                                                            : nlohmann::json(nullptr)},
                             {"tau", e.tau},
                             {"clip", e.clip},
                             {"w_eff", e.effective_w()},
                             {"averaging", e.ok && e.clip >= kAveragingClip}});
  if (!e.ok) spdlog::debug("exchange with {} failed: {}", e.partner, e.reason());
  watch_health(e);
  if (exchange_observer_) exchange_observer_(e);
}

void Node::between_steps(core::StepContext& ctx) {
  if (hold_) {  // shared threads: a wait is open, and this call is one pass of it
    serve_once(ctx);
    if (!hold_over()) return;
    const Stage next = hold_->kind == Stage::Lag ? Stage::Pace : Stage::Waits;
    end_hold();
    after_hooks(ctx, next);
    return;
  }
  total_steps_.store(ctx.total_steps);
  const auto t0 = std::chrono::steady_clock::now();  // work done, not a decision: the wall clock
  if (comm_) comm_->before_averager(ctx);
  averager_->between_steps(ctx);
  if (comm_) comm_->between_steps(ctx);
  catch_up_server_->between_steps(ctx);
  hook_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  after_hooks(ctx, Stage::Lag);
}

void Node::after_hooks(core::StepContext& ctx, Stage stage) {
  if (ctx.training_done) return;
  if (stage == Stage::Lag && behind_) {
    auto ahead = behind_->far_ahead(core::progress_of(ctx), now_s());
    if (!ahead.empty()) {  // no wait: the owner catches up before the next step
      behind_->tried(now_s());
      catch_up_wanted_ = std::move(ahead);
      ctx.hand_back = true;
      return;
    }
  }
  if (stage == Stage::Lag && max_lag_ > 0 && bound_lag(ctx) && !wait_here(ctx)) return;
  if (stage != Stage::Waits && pace_ && keep_pace(ctx) && !wait_here(ctx)) return;
  if (ctx.epoch != waits_epoch_) say_waits(ctx.epoch);
}

// One `waits` line per epoch: the waits so far (cumulative), and the time the exchange's own work
// took on the training thread between steps (hook_s: snapshots, chunks, norms, mixes, the yield),
// so a run's metrics show where its time went, epoch by epoch, beside the eval lines' timestamps.
void Node::say_waits(int epoch) {
  waits_epoch_ = epoch;
  metrics_.emit("waits", {{"epoch", epoch},
                          {"lag_waits", lag_waits_},
                          {"lag_wait_s", lag_wait_s_},
                          {"lag_deferred", lag_->deferred()},
                          {"hook_s", hook_s_},
                          {"pace_waits", pace_waits_},
                          {"pace_wait_s", pace_wait_s_}});
}

void Node::serve_once(core::StepContext& ctx) {
  if (comm_) comm_->before_averager(ctx);
  averager_->between_steps(ctx);  // applies a committed mix, answers requests, may start one
  if (comm_) comm_->between_steps(ctx);  // the mix into the outer anchor (no second outer step)
  catch_up_server_->between_steps(ctx);
}

bool Node::hold_over() {
  Hold& h = *hold_;
  if (h.kind == Stage::Lag) {
    h.completed = averager_->stats().averaging != h.before;
    if (h.completed || membership_->live_count() == 0) return true;
  } else if (!pace_->should_wait(h.own, now_s())) {
    return true;
  }
  return sched_.now() >= h.end;
}

bool Node::wait_here(core::StepContext& ctx) {
  if (threads_ == NodeThreads::Shared) return false;
  while (!hold_over()) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    serve_once(ctx);
  }
  end_hold();
  return true;
}

void Node::end_hold() {
  constexpr double kMaxLagWait = 2.0;  // for the warning; the hold's deadline is set by bound_lag
  const Hold h = *hold_;
  hold_.reset();
  const double waited_s = double((sched_.now() - h.start).count()) / 1000.0;
  if (h.kind == Stage::Pace) {
    pace_wait_s_ += waited_s;
    pace_->resumed(h.own, now_s());
    return;
  }
  averager_->set_eager(false);
  lag_wait_s_ += waited_s;
  if (lag_->waited(h.completed, waited_s))
    spdlog::warn(
        "--max-lag: {} waits of {:.0f} s in a row saw no exchange average (refused, banned or "
        "failing partners): training now waits only every {} steps, at most {}, until one does",
        lag_->config().fruitless_before_backoff, kMaxLagWait, lag_->lag(),
        std::int64_t(max_lag_) * lag_->config().max_backoff);
}

// Fractions of runs of different lengths do not compare (a joiner with --epochs 1 beside a run of
// 1000 would wait for it for ever): --max-ahead keeps pace only with partners whose run, their
// step over their fraction done, is within 10% of ours in steps.
bool Node::same_run_length(double partner_progress, std::int64_t partner_step) const {
  const std::int64_t own = total_steps_.load();
  // Before our first step our run's length is not known: a word heard then (membership's come
  // from the join on) is not kept, or a joiner with a 1-epoch run took a long run's 0.3% for a
  // partner just behind it and waited 2 s for it. Words keep coming once we train.
  if (own <= 0) return false;
  if (partner_step < 0 || !(partner_progress > 0)) return true;  // cannot tell
  if (partner_progress >= 1) return true;  // done: says nothing of its length
  const double theirs = double(partner_step) / partner_progress;
  return std::abs(theirs - double(own)) <= 0.1 * double(own);
}

bool Node::keep_pace(core::StepContext& ctx) {
  constexpr net::Millis kPaceWait{2000};  // at a time; the partners' word is re-read meanwhile
  const double own = core::progress_of(ctx);
  if (own < 0) return false;
  pace_->trained(own, now_s());
  if (!pace_->should_wait(own, now_s())) return false;
  ++pace_waits_;
  const net::Millis now = sched_.now();
  hold_ = Hold{Stage::Pace, now, now + kPaceWait, 0, own, false};
  return true;
}

bool Node::bound_lag(core::StepContext& ctx) {
  // A fast backend (a GPU step takes a fraction of a millisecond) runs many steps while one
  // exchange is in flight: without a bound it trains alone, and a swarm of such peers averages a
  // few times per hundred steps. Waiting here keeps at least one exchange per max_lag_ steps.
  constexpr net::Millis kMaxLagWait{2000};  // a partner that cannot answer by then is dead
  // Only exchanges that averaged count: one clipped to nearly nothing did not bound the lag.
  const std::uint64_t before = averager_->stats().averaging;
  if (lag_->take_recovered())
    spdlog::info("--max-lag: an exchange averaged again; training waits for one every {} steps",
                 max_lag_);
  // The budget's clock: training time, without the waits here and for --max-ahead.
  const double train_s = now_s() - lag_wait_s_ - pace_wait_s_;
  const bool wait = lag_->should_wait(ctx.step, before, train_s);
  if (lag_->take_first_deferral())
    spdlog::info(
        "--max-lag: exchanges take longer than {} steps here; training waits for them at most "
        "{:.2f} s per second it trains (--max-lag-share), so it waits less often than every {} "
        "steps",
        max_lag_, lag_->config().share, max_lag_);
  if (!wait) return false;
  if (membership_->live_count() == 0) return false;  // alone: nobody to wait for
  ++lag_waits_;
  // The wait also ends when the last member leaves: a partner that said goodbye at the start of
  // a wait kept training waiting its full 2 s (issue 27's joiner, at the end of its linger).
  // Meanwhile an exchange that fails (partners BUSY) is started again, not left until the next
  // --gossip-every steps: with slow exchanges, most partners are busy when asked.
  averager_->set_eager(true);
  const net::Millis now = sched_.now();
  hold_ = Hold{Stage::Lag, now, now + kMaxLagWait, before, 0, false};
  return true;
}

bool Node::joined() {
  auto p = std::make_shared<std::promise<bool>>();
  auto f = p->get_future();
  sched_.post([this, p] { p->set_value(membership_->joined()); });
  return f.wait_for(std::chrono::seconds(2)) == std::future_status::ready && f.get();
}

bool Node::wait_for_members(int n, double timeout_s, const std::atomic<bool>& stop) {
  require_separate("wait_for_members");
  auto count = [this] { return int(membership_->live_count()) + 1; };
  int have = count();
  if (n <= 1 || have >= n) return true;
  const auto t0 = sched_.now();
  const auto end =
      t0 + std::chrono::duration_cast<net::Millis>(std::chrono::duration<double>(timeout_s));
  spdlog::info(
      "training on hold: waiting for {} live members before the first step ({} so far, "
      "at most {} s, --min-peers-timeout)",
      n, have, timeout_s);
  metrics_.emit("hold", {{"reason", "min-peers"}, {"left_s", timeout_s}});
  // Once a second, a full-state sync with a random member: members that joined right after us
  // may have gossiped their arrival before they knew us, and the periodic sync is 30 s away.
  auto next_sync = t0 + std::chrono::seconds(1);
  while (have < n && !stop.load() && sched_.now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (sched_.now() >= next_sync) {
      sched_.post([this] { membership_->sync_now(); });
      next_sync += std::chrono::seconds(1);
    }
    const int now = count();
    if (now != have) spdlog::info("{} of {} live members", now, n);
    have = now;
  }
  const double waited = std::chrono::duration<double>(sched_.now() - t0).count();
  const bool ok = have >= n;
  metrics_.emit("min_peers", {{"want", n}, {"have", have}, {"ok", ok}, {"s", waited}});
  if (ok) spdlog::info("{} live members after {:.1f} s: starting", have, waited);
  else if (!stop.load())
    spdlog::warn("only {} of {} live members after {:.0f} s (--min-peers-timeout): starting anyway",
                 have, n, waited);
  return ok;
}

std::optional<CatchUpResult> Node::catch_up(CatchUpClientConfig cfg,
                                            const std::atomic<bool>& stop) {
  require_separate("catch_up");
  const auto t0 = sched_.now();
  const auto end = t0 + cfg.deadline;
  // The member list arrives with the join's sync reply: before it, "no live member" means nothing.
  // Training waits meanwhile: say so, and for how long at most, then every kHoldNoteS.
  constexpr double kHoldNoteS = 10.0;
  auto left_s = [&] { return std::chrono::duration<double>(end - sched_.now()).count(); };
  auto next_note = t0;
  while (!joined()) {
    if (stop.load()) return std::nullopt;
    if (sched_.now() >= next_note && sched_.now() < end) {
      const bool first = next_note == t0;
      spdlog::info(
          "training on hold: {} the seeds to catch up from the swarm ({:.0f} s left of "
          "--catch-up-timeout {:.0f} s; then it trains from its own weights)",
          first ? "joining through" : "still no answer from", left_s(),
          std::chrono::duration<double>(cfg.deadline).count());
      metrics_.emit("hold", {{"reason", first ? "catch-up: joining" : "catch-up: seeds silent"},
                             {"left_s", left_s()}});
      next_note +=
          std::chrono::duration_cast<net::Millis>(std::chrono::duration<double>(kHoldNoteS));
    }
    if (sched_.now() >= end) {
      CatchUpResult r;
      r.reason = "not-joined";
      r.ms = std::chrono::duration<double, std::milli>(sched_.now() - t0).count();
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t live = membership_->live_count();
  if (live == 0) {
    spdlog::info("catch-up: no live member to fetch a state from: starting from our own weights");
    return std::nullopt;
  }
  if (cfg.resumed_only)
    spdlog::info(
        "training on hold: asking the {} live members whether one carries the run on from a "
        "checkpoint, to catch up from it (at most {:.0f} s)",
        live, left_s());
  else
    spdlog::info(
        "training on hold: catch-up fetching the state of one of {} live members (at most "
        "{:.0f} s)",
        live, left_s());
  metrics_.emit("hold", {{"reason", "catch-up: fetching"}, {"left_s", left_s()}});
  cfg.deadline =
      std::max(net::Millis(1), std::chrono::duration_cast<net::Millis>(end - sched_.now()));
  auto p = std::make_shared<std::promise<CatchUpResult>>();
  auto f = p->get_future();
  sched_.post([this, cfg, p] {
    try {
      catch_up_client_->start(cfg, [p](CatchUpResult r) { p->set_value(std::move(r)); });
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  // The client's own deadline ends the fetch; the margin only guards against a stuck thread.
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (stop.load() || sched_.now() > end + std::chrono::seconds(5)) {
      sched_.post([this] { catch_up_client_->cancel(); });
      if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        CatchUpResult r;
        r.reason = "cancelled";
        return r;
      }
      break;
    }
  }
  auto r = f.get();
  const double ms = std::chrono::duration<double, std::milli>(sched_.now() - t0).count();
  r.ms = ms;  // with the wait for the join
  return r;
}

void Node::watch_health(const ExchangeEvent& e) {
  std::string addr;
  if (e.role == ExchangeRole::Initiator) {
    if (auto m = membership_->member(e.partner)) addr = m->addr;
  }
  // An exchange clipped to almost nothing did not average: it counts as a failure ("clipped").
  const bool averaged = e.ok && e.clip >= kAveragingClip;
  const auto change =
      health_.on_result(averaged, e.ok ? std::string("clipped") : e.reason(), addr, sched_.now());
  if (change == ExchangeHealth::Change::None) return;
  const ExchangeAlert a = health_.alert();
  const bool failing = change == ExchangeHealth::Change::Failing;
  if (failing) {
    spdlog::warn(
        "no averaging exchange has succeeded in the last {} attempts ({:.0f} s): most "
        "failed with '{}'{}; this peer is training alone",
        a.failures, a.duration.count() / 1000.0, a.reason,
        a.addr.empty() ? "" : ", dialling " + a.addr);
  } else {
    spdlog::info("averaging exchanges succeed again");
  }
  metrics_.emit("exchange_alert", {{"state", failing ? "failing" : "recovered"},
                                   {"failures", a.failures},
                                   {"seconds", a.duration.count() / 1000.0},
                                   {"reason", a.reason},
                                   {"addr", a.addr}});
}

std::optional<std::string> Node::join_refused() const {
  std::lock_guard<std::mutex> lock(refused_mu_);
  return join_refused_;
}

void Node::start(std::atomic<bool>* give_up) {
  give_up_ = give_up;
  post_or_run([this] {
    membership_->set_join_refused_handler([this](const std::string& why) {
      {
        std::lock_guard<std::mutex> lock(refused_mu_);
        join_refused_ = why;
      }
      metrics_.emit("join_refused", {{"reason", why}});
      if (give_up_) give_up_->store(true);
    });
    membership_->start();
  });
  spdlog::info("peer {} listening on {}", transport_.local_id(), transport_.listen_addr());
}

void Node::withdraw() {
  if (!started_) return;
  post_or_run([this] {
    if (membership_) membership_->leave();
  });
}

void Node::leave() {
  if (!started_.exchange(false)) return;
  if (threads_ == NodeThreads::Shared) {  // the owner lets the linger pass on its clock
    membership_->leave();
    return;
  }
  // Leave gracefully and give the leave time to go out; the owner then closes everything.
  auto left = std::make_shared<std::promise<void>>();
  auto done = left->get_future();
  sched_.post([this, left] {
    if (membership_) membership_->leave();
    left->set_value();
  });
  done.wait_for(std::chrono::seconds(2));
  std::this_thread::sleep_for(membership_->config().leave_linger + std::chrono::milliseconds(100));
}

}  // namespace gossiptrain::gossip
