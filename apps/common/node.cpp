// Wires the TCP transport, membership, the averager and catch-up of one peer, and logs their
// events as `member`, `exchange`, `exchange_alert` and `catch_up_served` metric lines
// (docs/ARCHITECTURE.md, "Metric lines").
#include "apps/common/node.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/model.hpp"
#include "net/buffer_pool.hpp"
#include "net/close_reason.hpp"
#include "net/identity.hpp"

namespace gossiptrain::apps {

net::TcpTransportConfig transport_config(const PeerConfig& cfg,
                                         std::shared_ptr<const net::Identity> identity,
                                         std::uint64_t fingerprint, std::vector<int> net_cpus) {
  net::TcpTransportConfig tc;
  tc.listen = cfg.listen;
  tc.advertise = cfg.advertise;
  tc.reachability_check = true;  // docs/nat.md
  tc.identity = std::move(identity);
  if (!cfg.network_key.empty()) tc.network_key = net::load_network_key(cfg.network_key);
  if (!cfg.allowlist.empty()) tc.allowlist = net::Allowlist::load(cfg.allowlist);
  tc.model_fingerprint = fingerprint;
  tc.thread_nice = cfg.net_nice;
  tc.thread_cpus = std::move(net_cpus);
  if (cfg.crypto_threads >= 0) tc.crypto_threads = unsigned(cfg.crypto_threads);
  // A failed handshake is logged once, by the transport ("net: handshake with ... failed").
  return tc;
}

gossip::AveragerConfig averager_config(const PeerConfig& cfg, std::uint64_t fingerprint) {
  gossip::AveragerConfig ac;
  ac.gossip_every = cfg.gossip_every;
  ac.wire = cfg.wire;
  ac.error_feedback = cfg.error_feedback;
  ac.weight_by_samples = cfg.weight_by_samples;
  ac.fingerprint = fingerprint;
  ac.max_diff_norm = cfg.max_diff_norm;
  ac.robust = cfg.robust;
  ac.choice = cfg.partner_choice;
  ac.fault = cfg.fault;
  if (cfg.fault.mode != gossip::FaultMode::None)
    spdlog::warn("FAULTY PEER (--fault {}): sending corrupted vectors, mixing nothing in",
                 cfg.fault_spec);
  ac.max_rate_bytes_per_s = cfg.max_rate_mb * 1e6;
  return ac;
}

// The received-buffer pool holds what one exchange needs again (the partner's vector as fp32,
// the largest wire, twice for a catch-up served meanwhile), not the 256 MiB default: a hundred
// peers of a small model on one machine must not each keep a large pool.
void GossipNode::limit_buffer_pool(const PeerConfig& cfg) {
  std::size_t n_params = 0;
  try {
    const std::vector<int> d = core::parse_model_spec(cfg.train.model);
    for (std::size_t i = 1; i < d.size(); ++i)
      n_params += std::size_t(d[i - 1]) * std::size_t(d[i]) + std::size_t(d[i]);
  } catch (const std::invalid_argument&) {
    n_params = 0;  // the trainer reports a bad spec; keep the default pool
  }
  if (n_params > 0)
    transport_->buffers().set_limit(std::max<std::size_t>(8u << 20, 2 * 4 * n_params + (2u << 20)));
}

GossipNode::GossipNode(const PeerConfig& cfg, std::uint64_t fingerprint, kernels::Backend& backend,
                       core::Metrics& metrics, std::vector<int> net_cpus)
    : metrics_(metrics) {
  identity_ = std::make_shared<const net::Identity>(net::Identity::load_or_create(cfg.identity));
  transport_ = std::make_unique<net::TcpTransport>(
      transport_config(cfg, identity_, fingerprint, std::move(net_cpus)));
  limit_buffer_pool(cfg);
  // One metric line per closed connection, with its typed reason (never the free text): the
  // Prometheus registry counts them as gossiptrain_connections_closed_total{reason}.
  dispatcher_.set_close_observer([this](const net::ConnectionPtr& c, const std::string& reason) {
    metrics_.emit("connection_closed",
                  {{"partner", c->peer_id()},
                   {"reason", std::string(net::close_reason_name(net::close_reason_of(reason)))}});
  });
  transport_->set_handler(&dispatcher_);
  // The membership reads the transport's bound address, so the protocols are built once the
  // transport listens; on its io thread, so no event can reach the dispatcher half-registered.
  transport_->start();
  started_ = true;
  gossip::MembershipConfig mc;
  mc.seeds = cfg.seeds;
  mc.validate();
  // auto: one exchange per --gossip-every steps on a GPU, whose steps outrun any exchange (8 peers
  // on one H100, 10 epochs: 86.51% mean with 4 x, 87.64% with 1 x); 4 x on the CPU, where
  // exchanges keep up and a tighter bound would only make peers wait for each other.
  max_lag_ = cfg.max_lag >= 0        ? cfg.max_lag
             : backend.host_memory() ? 4 * cfg.gossip_every
                                     : cfg.gossip_every;
  gossip::LagBoundConfig lc;
  lc.max_lag = std::max(max_lag_, 0);
  lc.share = cfg.max_lag_share;
  lag_ = std::make_unique<gossip::LagBound>(lc);
  if (cfg.max_ahead > 0)
    pace_ = std::make_unique<gossip::PaceKeeper>(gossip::PaceConfig{cfg.max_ahead});
  const gossip::AveragerConfig ac = averager_config(cfg, fingerprint);
  auto built = std::make_shared<std::promise<void>>();
  auto ready = built->get_future();
  transport_->post([this, mc, ac, &backend, built, fingerprint] {
    try {
      build_protocols(mc, ac, backend, fingerprint);
      built->set_value();
    } catch (...) {
      built->set_exception(std::current_exception());
    }
  });
  ready.get();
  if (cfg.outer_every > 0 || cfg.error_feedback) {
    std::unique_ptr<gossip::OuterStep> outer;
    if (cfg.outer_every > 0)
      outer = std::make_unique<gossip::OuterStep>(
          gossip::OuterConfig{cfg.outer_every, float(cfg.outer_lr), float(cfg.outer_momentum)},
          backend);
    comm_ = std::make_unique<gossip::CommState>(cfg.train.checkpoint_dir, fingerprint,
                                                *averager_, std::move(outer));
  }
}

void GossipNode::build_protocols(const gossip::MembershipConfig& mc,
                                 const gossip::AveragerConfig& ac, kernels::Backend& backend,
                                 std::uint64_t fingerprint) {
  membership_ = std::make_unique<gossip::Membership>(*transport_, mc);
  membership_->set_listener([this](const gossip::MemberInfo& m) {
    metrics_.emit("member", {{"member", m.id},
                             {"addr", m.addr},
                             {"state", gossip::to_string(m.state)},
                             {"incarnation", m.incarnation}});
  });
  dispatcher_.add(gossip::kMembershipTypeFirst, gossip::kMembershipTypeLast, membership_.get());

  averager_ =
      std::make_unique<gossip::Averager>(ac, *transport_, dispatcher_, *membership_, backend);
  averager_->set_event_callback([this](const gossip::ExchangeEvent& e) {
    if (pace_ && same_run_length(e))
      pace_->heard(e.partner, e.partner_progress, metrics_.seconds());
    metrics_.emit("exchange", {{"partner", e.partner},
                               {"role", gossip::role_name(e.role)},
                               {"ok", e.ok},
                               {"reason", e.reason},
                               {"bytes", e.bytes_sent + e.bytes_received},
                               {"bytes_sent", e.bytes_sent},
                               {"bytes_received", e.bytes_received},
                               {"ms", e.ms},
                               {"w", e.w},
                               {"diff_norm", e.diff_norm >= 0 ? nlohmann::json(e.diff_norm)
                                                              : nlohmann::json(nullptr)},
                               {"tau", e.tau},
                               {"clip", e.clip},
                               {"w_eff", e.effective_w()},
                               {"averaging", e.ok && e.clip >= gossip::kAveragingClip}});
    if (!e.ok) spdlog::debug("exchange with {} failed: {}", e.partner, e.reason);
    watch_health(e);
  });
  averager_->set_ban_callback([this](const gossip::BanEvent& b) {
    const double for_s = b.duration.count() / 1000.0;
    metrics_.emit("ban", {{"partner", b.partner},
                          {"until_s", metrics_.seconds() + for_s},
                          {"for_s", for_s},
                          {"reason", b.reason},
                          {"bans", b.count}});
  });

  gossip::CatchUpServerConfig sc;
  sc.fingerprint = fingerprint;
  catch_up_server_ = std::make_unique<gossip::CatchUpServer>(sc, *transport_, dispatcher_);
  catch_up_server_->set_event_callback([this](const gossip::CatchUpServed& e) {
    metrics_.emit("catch_up_served", {{"to", e.peer},
                                      {"ok", e.ok},
                                      {"reason", e.reason},
                                      {"step", e.step},
                                      {"bytes", e.bytes},
                                      {"ms", e.ms}});
  });
  catch_up_client_ =
      std::make_unique<gossip::CatchUpClient>(*transport_, dispatcher_, *membership_);
}

void GossipNode::between_steps(core::StepContext& ctx) {
  total_steps_.store(ctx.total_steps);
  const auto t0 = std::chrono::steady_clock::now();
  if (comm_) comm_->before_averager(ctx);
  averager_->between_steps(ctx);
  if (comm_) comm_->between_steps(ctx);
  catch_up_server_->between_steps(ctx);
  hook_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (max_lag_ > 0 && !ctx.training_done) bound_lag(ctx);
  if (pace_ && !ctx.training_done) keep_pace(ctx);
  if (ctx.epoch != waits_epoch_ && !ctx.training_done) say_waits(ctx.epoch);
}

// One `waits` line per epoch: the waits so far (cumulative), and the time the exchange's own work
// took on the training thread between steps (hook_s: snapshots, chunks, norms, mixes, the yield),
// so a run's metrics show where its time went, epoch by epoch, beside the eval lines' timestamps.
void GossipNode::say_waits(int epoch) {
  waits_epoch_ = epoch;
  metrics_.emit("waits", {{"epoch", epoch},
                          {"lag_waits", lag_waits_},
                          {"lag_wait_s", lag_wait_s_},
                          {"lag_deferred", lag_->deferred()},
                          {"hook_s", hook_s_},
                          {"pace_waits", pace_waits_},
                          {"pace_wait_s", pace_wait_s_}});
}

template <class Done>
double GossipNode::serve_until(core::StepContext& ctx, double max_s, Done done) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_s));
  while (!done() && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (comm_) comm_->before_averager(ctx);
    averager_->between_steps(ctx);  // applies a committed mix, answers requests, may start one
    if (comm_) comm_->between_steps(ctx);  // the mix into the outer anchor (no second outer step)
    catch_up_server_->between_steps(ctx);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Fractions of runs of different lengths do not compare (a joiner with --epochs 1 beside a run of
// 1000 would wait for it for ever): --max-ahead keeps pace only with partners whose run, their
// step over their fraction done, is within 10% of ours in steps.
bool GossipNode::same_run_length(const gossip::ExchangeEvent& e) const {
  const std::int64_t own = total_steps_.load();
  if (own <= 0 || e.partner_step < 0 || !(e.partner_progress > 0)) return true;  // cannot tell
  if (e.partner_progress >= 1) return true;  // done: says nothing of its length
  const double theirs = double(e.partner_step) / e.partner_progress;
  return std::abs(theirs - double(own)) <= 0.1 * double(own);
}

void GossipNode::keep_pace(core::StepContext& ctx) {
  constexpr double kPaceWait = 2.0;  // seconds at a time; the partners' word is re-read meanwhile
  auto now_s = [this] { return metrics_.seconds(); };
  const double own = core::progress_of(ctx);
  if (own < 0) return;
  pace_->trained(own, now_s());
  if (!pace_->should_wait(own, now_s())) return;
  ++pace_waits_;
  pace_wait_s_ += serve_until(ctx, kPaceWait, [&] { return !pace_->should_wait(own, now_s()); });
  pace_->resumed(own, now_s());
}

void GossipNode::bound_lag(core::StepContext& ctx) {
  // A fast backend (a GPU step takes a fraction of a millisecond) runs many steps while one
  // exchange is in flight: without a bound it trains alone, and a swarm of such peers averages a
  // few times per hundred steps. Waiting here keeps at least one exchange per max_lag_ steps.
  constexpr double kMaxLagWait = 2.0;  // seconds; a partner that cannot answer by then is dead
  // Only exchanges that averaged count: one clipped to nearly nothing did not bound the lag.
  const std::uint64_t before = averager_->stats().averaging;
  if (lag_->take_recovered())
    spdlog::info("--max-lag: an exchange averaged again; training waits for one every {} steps",
                 max_lag_);
  // The budget's clock: training time, without the waits here and for --max-ahead.
  const double train_s = metrics_.seconds() - lag_wait_s_ - pace_wait_s_;
  const bool wait = lag_->should_wait(ctx.step, before, train_s);
  if (lag_->take_first_deferral())
    spdlog::info(
        "--max-lag: exchanges take longer than {} steps here; training waits for them at most "
        "{:.2f} s per second it trains (--max-lag-share), so it waits less often than every {} "
        "steps",
        max_lag_, lag_->config().share, max_lag_);
  if (!wait) return;
  if (membership_->live_count() == 0) return;  // alone: nobody to wait for
  ++lag_waits_;
  bool completed = false;
  // The wait also ends when the last member leaves: a partner that said goodbye at the start of
  // a wait kept training waiting its full 2 s (issue 27's joiner, at the end of its linger).
  const double waited_s = serve_until(ctx, kMaxLagWait, [&] {
    completed = averager_->stats().averaging != before;
    return completed || membership_->live_count() == 0;
  });
  lag_wait_s_ += waited_s;
  if (lag_->waited(completed, waited_s))
    spdlog::warn(
        "--max-lag: {} waits of {:.0f} s in a row saw no exchange average (refused, banned or "
        "failing partners): training now waits only every {} steps, at most {}, until one does",
        lag_->config().fruitless_before_backoff, kMaxLagWait, lag_->lag(),
        std::int64_t(max_lag_) * lag_->config().max_backoff);
}

bool GossipNode::joined() {
  auto p = std::make_shared<std::promise<bool>>();
  auto f = p->get_future();
  transport_->post([this, p] { p->set_value(membership_->joined()); });
  return f.wait_for(std::chrono::seconds(2)) == std::future_status::ready && f.get();
}

bool GossipNode::wait_for_members(int n, double timeout_s, const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  auto count = [this] { return int(membership_->live_count()) + 1; };
  int have = count();
  if (n <= 1 || have >= n) return true;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  spdlog::info(
      "training on hold: waiting for {} live members before the first step ({} so far, "
      "at most {} s, --min-peers-timeout)",
      n, have, timeout_s);
  metrics_.emit("hold", {{"reason", "min-peers"}, {"left_s", timeout_s}});
  // Once a second, a full-state sync with a random member: members that joined right after us
  // may have gossiped their arrival before they knew us, and the periodic sync is 30 s away.
  auto next_sync = t0 + std::chrono::seconds(1);
  while (have < n && !stop.load() && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Clock::now() >= next_sync) {
      transport_->post([this] { membership_->sync_now(); });
      next_sync += std::chrono::seconds(1);
    }
    const int now = count();
    if (now != have) spdlog::info("{} of {} live members", now, n);
    have = now;
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool ok = have >= n;
  metrics_.emit("min_peers", {{"want", n}, {"have", have}, {"ok", ok}, {"s", waited}});
  if (ok) spdlog::info("{} live members after {:.1f} s: starting", have, waited);
  else if (!stop.load())
    spdlog::warn("only {} of {} live members after {:.0f} s (--min-peers-timeout): starting anyway",
                 have, n, waited);
  return ok;
}

std::optional<gossip::CatchUpResult> GossipNode::catch_up(gossip::CatchUpClientConfig cfg,
                                                          const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto end = t0 + cfg.deadline;
  // The member list arrives with the join's sync reply: before it, "no live member" means nothing.
  // Training waits meanwhile: say so, and for how long at most, then every kHoldNoteS.
  constexpr double kHoldNoteS = 10.0;
  auto left_s = [&] { return std::chrono::duration<double>(end - Clock::now()).count(); };
  auto next_note = t0;
  while (!joined()) {
    if (stop.load()) return std::nullopt;
    if (Clock::now() >= next_note && Clock::now() < end) {
      const bool first = next_note == t0;
      spdlog::info(
          "training on hold: {} the seeds to catch up from the swarm ({:.0f} s left of "
          "--catch-up-timeout {:.0f} s; then it trains from its own weights)",
          first ? "joining through" : "still no answer from", left_s(),
          std::chrono::duration<double>(cfg.deadline).count());
      metrics_.emit("hold", {{"reason", first ? "catch-up: joining" : "catch-up: seeds silent"},
                             {"left_s", left_s()}});
      next_note +=
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kHoldNoteS));
    }
    if (Clock::now() >= end) {
      gossip::CatchUpResult r;
      r.reason = "not-joined";
      r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t live = membership_->live_count();
  if (live == 0) {
    spdlog::info("catch-up: no live member to fetch a state from: starting from our own weights");
    return std::nullopt;
  }
  spdlog::info(
      "training on hold: catch-up fetching the state of one of {} live members (at most "
      "{:.0f} s)",
      live, left_s());
  metrics_.emit("hold", {{"reason", "catch-up: fetching"}, {"left_s", left_s()}});
  cfg.deadline = std::max(net::Millis(1), std::chrono::duration_cast<net::Millis>(end - Clock::now()));
  auto p = std::make_shared<std::promise<gossip::CatchUpResult>>();
  auto f = p->get_future();
  transport_->post([this, cfg, p] {
    try {
      catch_up_client_->start(cfg, [p](gossip::CatchUpResult r) { p->set_value(std::move(r)); });
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  // The client's own deadline ends the fetch; the margin only guards against a stuck thread.
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (stop.load() || Clock::now() > end + std::chrono::seconds(5)) {
      transport_->post([this] { catch_up_client_->cancel(); });
      if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        gossip::CatchUpResult r;
        r.reason = "cancelled";
        return r;
      }
      break;
    }
  }
  auto r = f.get();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.ms = ms;  // with the wait for the join
  return r;
}

void GossipNode::watch_health(const gossip::ExchangeEvent& e) {
  std::string addr;
  if (e.role == gossip::ExchangeRole::Initiator) {
    if (auto m = membership_->member(e.partner)) addr = m->addr;
  }
  // An exchange clipped to almost nothing did not average: it counts as a failure ("clipped").
  const bool averaged = e.ok && e.clip >= gossip::kAveragingClip;
  const auto change = health_.on_result(averaged, e.ok ? std::string("clipped") : e.reason, addr,
                                        transport_->now());
  if (change == gossip::ExchangeHealth::Change::None) return;
  const gossip::ExchangeAlert a = health_.alert();
  const bool failing = change == gossip::ExchangeHealth::Change::Failing;
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

GossipNode::~GossipNode() { stop(); }

std::optional<std::string> GossipNode::join_refused() const {
  std::lock_guard<std::mutex> lock(refused_mu_);
  return join_refused_;
}

const std::string& GossipNode::peer_id() const { return identity_->peer_id(); }

void GossipNode::start(std::atomic<bool>* give_up) {
  give_up_ = give_up;
  transport_->post([this] {
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
  spdlog::info("peer {} listening on {}", peer_id(), transport_->listen_addr());
}

void GossipNode::withdraw() {
  if (!started_) return;
  transport_->post([this] {
    if (membership_) membership_->leave();
  });
}

void GossipNode::stop() {
  if (!started_) return;
  started_ = false;
  // Leave gracefully, give the leave time to go out, then close everything.
  auto left = std::make_shared<std::promise<void>>();
  auto done = left->get_future();
  transport_->post([this, left] {
    if (membership_) membership_->leave();
    left->set_value();
  });
  done.wait_for(std::chrono::seconds(2));
  std::this_thread::sleep_for(membership_->config().leave_linger + std::chrono::milliseconds(100));
  transport_->stop();
}

}  // namespace gossiptrain::apps
