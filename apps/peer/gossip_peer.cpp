// gossip-peer: one peer. Flags -> config -> data shard, backend, training loop, and (with --seeds
// or
// --listen) the encrypted transport, membership and the averaging exchange behind the step hook.

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/common/blas.hpp"
#include "apps/common/export.hpp"
#include "apps/common/node_config.hpp"
#include "apps/common/observe.hpp"
#include "apps/common/peer_node.hpp"
#include "apps/fedavg/fedavg.hpp"
#include "apps/fedavg/wire.hpp"
#include "apps/common/peer_churn.hpp"
#include "apps/common/options.hpp"
#include "apps/peer/tuned_threads.hpp"
#include "base/short_id.hpp"
#include "base/thread.hpp"
#include "core/checkpoint.hpp"
#include "core/cpu_plan.hpp"
#include "core/dataset.hpp"
#include "core/partition.hpp"
#include "core/safetensors.hpp"
#include "core/trainer.hpp"
#include "core/watchdog.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/secure/identity.hpp"

using namespace gossiptrain;

namespace {

// This process's resident memory (Linux /proc/self/statm), 0 where it cannot be read.
double resident_mb() {
  std::ifstream in("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (!(in >> pages_total >> pages_resident)) return 0.0;
  return double(pages_resident) * double(::sysconf(_SC_PAGESIZE)) / 1e6;
}

// What this peer holds of the data set, for the launcher and the tests: its shard's rows (and a
// checksum of them), the bytes of training and test data in memory, the resident memory, and the
// BLAS kernels it computes with.
void emit_data_line(core::Metrics& metrics, const core::ShardData& d,
                    const kernels::BlasCoreChoice& blas) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the shard's labels, in order
  for (std::int32_t y : d.shard.y) h = (h ^ std::uint64_t(std::uint32_t(y))) * 1099511628211ull;
  auto bytes = [](const core::Dataset& s) {
    return s.x.capacity() * sizeof(float) + s.y.capacity() * sizeof(std::int32_t);
  };
  nlohmann::json fields = {{"shard_rows", d.shard.size()},
                           {"train_rows", d.train_size},
                           {"test_rows", d.test.size()},
                           {"shard_bytes", bytes(d.shard)},
                           {"test_bytes", bytes(d.test)},
                           {"shard_labels_fnv", std::to_string(h)},
                           {"rss_mb", resident_mb()}};
  fields.update(apps::blas_fields(blas));
  metrics.emit("data", fields);
}

std::atomic<bool> g_stop{false};

// The first SIGINT or SIGTERM asks for a clean stop (the watchdog bounds how long it may take,
// --stop-grace). A second SIGINT (a user's second Ctrl-C) exits at once. A repeated SIGTERM does
// not: a resource manager's stop often arrives twice within milliseconds (SLURM's time limit
// signals the step's tasks, and srun passes its own SIGTERM on to them too), and it would cut the
// checkpoint short; SIGKILL after the manager's grace, or --stop-grace, bounds the stop instead.
extern "C" void on_signal(int sig) {
  if (g_stop.exchange(true)) {
    if (sig == SIGINT) {
      static const char msg[] = "gossip-peer: second signal: exiting now\n";
      [[maybe_unused]] const auto n = ::write(2, msg, sizeof msg - 1);
      ::_exit(130);
    }
    static const char msg[] = "gossip-peer: SIGTERM again: still stopping (SIGINT ends it now)\n";
    [[maybe_unused]] const auto n = ::write(2, msg, sizeof msg - 1);
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// A figure for the log: printf format f of v x scale, or "-" when it was not measured.
std::string figure(const std::optional<double>& v, const char* f, double scale = 1.0) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, *v * scale);
  return b;
}

nlohmann::json or_null(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "gossip-peer: %s\nrun 'gossip-peer --help' for the flags\n", msg.c_str());
  return 2;
}

// A setting that parsed but cannot be used here (a port in use, a key file): exit 2 like bad input,
// without pointing at --help, which would not help.
int config_error(const std::string& msg) {
  std::fprintf(stderr, "gossip-peer: %s\n", msg.c_str());
  return 2;
}

// A fresh peer joining a running swarm takes a live member's state (weights, optimizer state,
// position in the schedule) instead of starting from random weights at the top of the schedule.
// Any failure leaves the trainer as it was: it starts from its own initial state.
// A peer of a cohort (cohort: --min-peers above 1) asks only members whose state carries the run
// on (resumed from their checkpoints: a run resized with the same --run-id); when every member it
// asks started from its own initial weights as well (a first start), it starts with them.
// Mid-run (--catch-up-behind: partners far ahead clip this peer away, or it is apart from the
// swarm at the end) the partners in `ahead` are asked first, the best accuracy this peer evaluated
// is kept, and a failure leaves it training on from its own state.
void catch_up(core::Trainer& trainer, apps::PeerNode& node, const apps::PeerConfig& cfg,
              core::Metrics& metrics, bool cohort, bool mid_run = false,
              std::vector<std::string> ahead = {}) {
  gossip::CatchUpClientConfig cc;
  cc.resumed_only = cohort;
  cc.fingerprint = trainer.model().fingerprint();
  cc.n_params = trainer.model().num_params();
  cc.n_opt_state = trainer.optimizer_state_count();
  // Mid-run the training thread beats no heartbeat while it fetches: stay well within
  // --stall-timeout, or the watchdog would take the peer out of the swarm.
  const double limit_s = mid_run && cfg.stall_timeout_s > 0
                             ? std::min(cfg.catch_up_timeout_s, cfg.stall_timeout_s / 2)
                             : cfg.catch_up_timeout_s;
  cc.deadline = std::chrono::milliseconds(std::int64_t(limit_s * 1000));
  cc.prefer = std::move(ahead);
  const auto best = trainer.best_test_acc();
  const std::int64_t step_before = trainer.step();
  auto r = node.gossip().catch_up(cc, g_stop);
  if (!r) return;
  if (cohort && !r->ok && r->reason == "fresh") {
    spdlog::info("catch-up: the members asked start from their own initial weights too (a first "
                 "start of the run): training from ours from step 0 ({:.0f} ms)",
                 r->ms);
    return;
  }
  bool counters = true;
  if (r->ok) {
    try {
      counters = trainer.restore(r->state, "state from peer " + r->from, /*own=*/false);
      if (mid_run && best) trainer.note_test_acc(*best);
    } catch (const core::CheckpointError& e) {
      spdlog::warn("catch-up: {}", e.what());
      r->ok = false;
      r->reason = "restore";
    }
  }
  if (r->ok) {
    if (counters)
      spdlog::info("caught up with {}: epoch {}, step {} ({} bytes in {:.0f} ms){}",
                   base::short_id(r->from), r->state.epoch, r->state.step, r->bytes, r->ms,
                   mid_run ? fmt::format(", from step {}", step_before) : std::string());
    else
      spdlog::info(
          "caught up with {}: took its weights and optimizer state; its counters (epoch {}, "
          "step {}) do not fit this run, which keeps its own schedule from step {} ({} bytes in "
          "{:.0f} ms)",
          base::short_id(r->from), r->state.epoch, r->state.step, trainer.step(), r->bytes, r->ms);
    metrics.emit("catch_up", {{"ok", true},
                              {"from", r->from},
                              {"step", r->state.step},
                              {"epoch", r->state.epoch},
                              {"bytes", r->bytes},
                              {"ms", r->ms},
                              {"attempts", r->attempts},
                              {"counters", counters},
                              {"mid_run", mid_run},
                              {"step_before", step_before}});
  } else {
    spdlog::warn("catch-up failed ({}) after {:.0f} ms: {}", r->reason, r->ms,
                 mid_run ? "training on from our own state"
                         : "starting from our own initial weights");
    metrics.emit("catch_up", {{"ok", false},
                              {"reason", r->reason},
                              {"ms", r->ms},
                              {"attempts", r->attempts},
                              {"mid_run", mid_run}});
  }
}

// Trains to the end; a run that hands back (--catch-up-behind: partners far ahead clip this peer
// away) fetches a partner's state and trains on from it. The result's seconds are the whole.
// *finished_takes counts the states so taken that were finished ones (the partner was done, and
// so is this peer now): a copy from while the swarm settles, as the linger's takes are.
core::TrainResult train(core::Trainer& trainer, apps::PeerNode* node, const apps::PeerConfig& cfg,
                        core::Metrics& metrics, int* finished_takes) {
  const auto t0 = std::chrono::steady_clock::now();
  core::TrainResult res = trainer.run(g_stop);
  while (res.handed_back && node && !g_stop.load()) {
    auto ahead = node->gossip().catch_up_wanted();
    const double pct =
        100.0 * double(trainer.step()) / double(std::max<std::int64_t>(1, trainer.total_steps()));
    spdlog::warn(
        "left behind: at step {} ({:.0f}% of the run), {} partners well ahead did not average with "
        "us in the last 10 s (robust mixing clips a model this far from theirs): fetching a "
        "partner's state to catch up (--catch-up-behind {})",
        trainer.step(), pct, ahead.size(), cfg.node.behind.behind);
    catch_up(trainer, *node, cfg, metrics, /*cohort=*/false, /*mid_run=*/true, std::move(ahead));
    if (trainer.step() >= trainer.total_steps()) {
      // A paused peer came back to finished partners and took one's state: like a take in the
      // linger it may be a copy from before they settled, and only exchanges from now on say so
      // (two runs ended with such a peer 0.19-0.22 from the others, docs/robustness.md).
      node->gossip().took_state();
      ++*finished_takes;
    }
    res = trainer.run(g_stop);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

// Test-only fault (GT_TEST_STALL_AT_STEP=N in the environment): from step N the training thread
// hangs for good, deaf to stop requests, as it did in the loop pool's deadlock. The watchdog must
// notice it, take the peer out of the swarm, and still end the process on SIGTERM.
class StallAtStep final : public core::StepHook {
 public:
  StallAtStep(core::StepHook& inner, std::int64_t at) : inner_(inner), at_(at) {}
  void between_steps(core::StepContext& ctx) override {
    if (ctx.step >= at_) {
      spdlog::warn("test fault: the training thread hangs from step {} (GT_TEST_STALL_AT_STEP)",
                   ctx.step);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    inner_.between_steps(ctx);
  }

 private:
  core::StepHook& inner_;
  std::int64_t at_;
};

// The watchdog of the training thread: a stall is said at error level and takes the peer out of
// the swarm (others stop dialling a peer that cannot average); a stop request not honoured within
// --stop-grace ends the process here, keeping the last checkpoint written.
// node is read only once training has started (a stall), after the main thread has set it.
std::unique_ptr<core::Watchdog> start_watchdog(const apps::PeerConfig& cfg,
                                               apps::PeerHealth& health,
                                               const std::unique_ptr<apps::PeerNode>& node) {
  core::WatchdogConfig wc;
  wc.stall_after_s = cfg.stall_timeout_s > 0 ? cfg.stall_timeout_s : 1e300;
  wc.stop_grace_s = cfg.stop_grace_s;
  core::Watchdog::Callbacks cb;
  cb.on_stall = [&node, &health](const std::string& state) {
    health.stalled = true;
    if (node) health.left_swarm = true;
    spdlog::error("watchdog: the training thread is stuck: {}; {}", state,
                  node ? "leaving the swarm so that others stop dialling this peer (restart it "
                         "to rejoin; SIGTERM ends it)"
                       : "SIGTERM ends it");
    if (node) node->gossip().withdraw();
  };
  cb.on_recover = [&node, &health](const std::string& state) {
    health.stalled = false;
    spdlog::warn("watchdog: the training thread moves again ({}){}", state,
                 node ? "; this peer has left the swarm and trains alone" : "");
  };
  cb.on_stop_overdue = [grace = cfg.stop_grace_s](const std::string& state) {
    spdlog::error(
        "watchdog: still running {:.0f} s after the stop request, training thread {}: exiting "
        "now without a final checkpoint (the last one written is kept)",
        grace, state);
    spdlog::default_logger()->flush();
    std::_Exit(130);
  };
  return std::make_unique<core::Watchdog>(health.heartbeat, wc, g_stop, std::move(cb));
}

// What a peer trains with, read before training starts. Bad input (data, partition, backend
// choice) throws core::DataError, std::invalid_argument or kernels::BackendError.
struct Resources {
  core::ShardData data;
  std::unique_ptr<kernels::Backend> backend;
  core::CpuPlan cpus;
  kernels::BlasCoreChoice blas;
};

Resources prepare(apps::PeerConfig& cfg) {
  Resources r;
  // Without gossip there is no network to keep cores for.
  // A container's CPU limit (a cgroup quota) sizes the BLAS pool as its affinity does.
  const std::vector<int> allowed = core::allowed_cpus();
  const bool blas_fixed = std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS");
  r.cpus = core::plan_cpus_within(allowed, core::cgroup_cpu_quota(),
                                  cfg.gossip_enabled() ? cfg.net_cores : 0, cfg.compute_threads,
                                  blas_fixed, core::physical_cores(allowed));
  const core::PartitionSpec& spec = cfg.partition_spec;
  // Only this peer's shard of the training set is read into memory (and the test set): the
  // partition needs the labels alone, and the images are streamed past.
  r.data = core::load_shard(cfg.data, [&](const std::vector<std::int32_t>& y, int classes) {
    auto parts = core::partition(y, classes, cfg.num_shards, spec, cfg.train.seed);
    return std::move(parts[std::size_t(cfg.shard)]);
  });
  cfg.train.num_shards = cfg.num_shards;
  if (cfg.num_shards > 1)
    cfg.train.steps_per_epoch =
        core::share_steps_per_epoch(r.data.train_size, cfg.num_shards, cfg.train.batch);
  r.backend = kernels::make_backend(cfg.backend, cfg.device);
  r.backend->set_precision(cfg.precision);
  return r;
}

// Training (this thread and the BLAS pool) on its cores; the network's threads, started by the
// node, pin themselves to theirs.
void apply_cpu_plan(const core::CpuPlan& cpus) {
  if (cpus.blas_threads > 0 && !kernels::set_blas_threads(cpus.blas_threads))
    spdlog::warn("cannot set the BLAS thread count: this BLAS has no such control");
  std::string pin_err;
  if (!cpus.compute.empty() && base::pin_all_threads(cpus.compute, &pin_err) == 0)
    spdlog::warn("could not pin the training threads: {}", pin_err);
  spdlog::info("cpu plan: {}{}", cpus.describe(),
               cpus.blas_threads > 0 ? std::string()
                                     : "; BLAS pool: " + std::to_string(kernels::blas_threads()) +
                                           " threads, the library's choice");
}

// Joins the swarm and hangs the averaging on the trainer's step hook. Throws net::ConfigError.
std::unique_ptr<apps::PeerNode> start_gossip(const apps::PeerConfig& cfg, core::Trainer& trainer,
                                               Resources& r, core::Metrics& metrics, bool resumed) {
  auto node = std::make_unique<apps::PeerNode>(cfg, trainer.model(), *r.backend, metrics,
                                                 r.cpus.net);
  metrics.set_peer(node->peer_id());
  // Before the node starts: a cohort's new peer may ask us as soon as it knows us.
  node->gossip().set_carries_run(trainer.step() > 0);
  // A peer resumed from its checkpoint serves its state from its first step boundary: a peer
  // added by a resize, waiting with the cohort, fetches it.
  if (resumed) node->gossip().catch_up_server().trained_state_ready(trainer.model().num_params());
  node->gossip().start(&g_stop);  // seeds that all refuse us end the run (exit code 2, below)
  // Start together, then catch up: a swarm launched at once finds nobody with a trained state
  // and every peer starts from step 0; a late joiner finds the others training.
  node->gossip().wait_for_members(cfg.min_peers, cfg.min_peers_timeout_s, g_stop);
  // Without seeds this is the swarm's first peer: nobody to catch up with.
  // A peer of a cohort that starts together (--min-peers > 1) starts with the others from its
  // own first step when they all start fresh; when some carry the run on from their checkpoints
  // (the run resumed at another size: this peer is a new ordinal), it catches up from one.
  if (!resumed && cfg.catch_up == apps::CatchUpMode::Auto && !cfg.node.membership.seeds.empty() && !g_stop.load()) {
    catch_up(trainer, *node, cfg, metrics, cfg.min_peers > 1);
    if (trainer.step() > 0) node->gossip().set_carries_run(true);
  }
  trainer.set_hook(&node->gossip().hook());
  // This thread trains (the network thread, started before, keeps its own priority).
  std::string err;
  if (!base::lower_this_thread_priority(cfg.train_nice, &err))
    spdlog::warn("could not lower the training thread's priority: {}", err);
  return node;
}

// --catch-up-behind at the end: `done`, the finished partners that clip this peer away, are
// enough: it takes one's state, the swarm's model (`why` says what made it look).
void take_finished_state(const apps::PeerConfig& cfg, core::Trainer& trainer, apps::PeerNode& node,
                         core::Metrics& metrics, std::vector<std::string> done,
                         const std::string& why) {
  spdlog::info("linger: {} finished partners clip this peer's model away ({}): taking the state "
               "of one, then lingering {} s",
               done.size(), why, cfg.linger_s);
  catch_up(trainer, node, cfg, metrics, /*cohort=*/false, /*mid_run=*/true, std::move(done));
  node.gossip().took_state();
}

// What a linger saw while it served (checked every 0.5 s).
struct LingerSaw {
  bool partition = false;   // a partition was suspected (see linger_through_partition)
  bool ran_ahead = false;   // partners well behind clipped us away (Node::ran_ahead)
  int takes = 0;            // apart from the swarm, we took a finished partner's state this often
};

// A state taken from a finished partner while the swarm still settles is an older copy: partners
// that settled on meanwhile clip it away again (a run ended with two such peers 0.13 from the
// others, docs/robustness.md). So a peer takes again while they do, this often at most.
constexpr int kMaxTakes = 3;

// --linger: serve exchanges for linger_s after training. --catch-up-behind at the end: a peer
// apart from the swarm (was_apart: it averaged a tenth as often as --gossip-every asks, or most
// partners clipped it away as its training ended; or, seen here, partners well behind it in their
// runs clip it away: it ran ahead) would leave with a model the swarm does not share: a slow link
// kept it from averaging, and it trained on alone between its few exchanges. As soon as finished
// partners that clip it away are enough (BehindWatch::finished_apart), while they still linger
// to meet it, it takes one's state, the swarm's model, and lingers a full --linger from then
// (again while partners clip that copy away, up to kMaxTakes; `takes` already made).
// Peers that finish together and were not apart do not: the settle exchanges bring them together.
LingerSaw linger_watching(const apps::PeerConfig& cfg, core::Trainer& trainer, apps::PeerNode& node,
                          core::Metrics& metrics, bool was_apart, int takes = 0) {
  LingerSaw saw;
  saw.takes = takes;
  auto t0 = std::chrono::steady_clock::now();
  double left = cfg.linger_s;
  while (!g_stop.load() && left > 0) {
    saw.partition = saw.partition || node.gossip().dead_count().partition_suspected();
    saw.ran_ahead = saw.ran_ahead || node.gossip().ran_ahead();
    if (saw.takes < kMaxTakes && (was_apart || saw.ran_ahead || saw.takes > 0)) {
      auto done = node.gossip().finished_apart();
      if (!done.empty()) {
        take_finished_state(cfg, trainer, node, metrics, std::move(done),
                            saw.takes == 0
                                ? std::string("it averaged seldom, was apart from them when its "
                                              "training ended, or ran ahead of them")
                                : fmt::format("the state taken before was a copy from while they "
                                              "settled: take {} of {} at most",
                                              saw.takes + 1, kMaxTakes));
        ++saw.takes;
        t0 = std::chrono::steady_clock::now();
      }
    }
    trainer.linger(g_stop, std::min(0.5, left));
    left = cfg.linger_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return saw;
}

// --linger-heal: a partition that heals after training (every peer of a side finished while the
// other side was unreachable) is crossed only if both sides are still there at the heal. So while
// the silent members (dead, or suspected: a split is declared only a suspicion timeout after it)
// are many enough to be a partition, keep serving for up to linger_heal_s, and once they are back,
// for --linger once more (the settle exchanges merge the sides). A partition seen during the
// linger that healed just before it ended counts as back too: a side that left then, 0.3 s after
// the heal, ended a run at consensus 2 (docs/robustness.md).
void linger_through_partition(const apps::PeerConfig& cfg, core::Trainer& trainer,
                              apps::PeerNode& node, bool saw_partition) {
  if (cfg.linger_heal_s <= 0 || cfg.linger_s <= 0 || g_stop.load()) return;
  gossip::DeadCount d = node.gossip().dead_count();
  if (!d.partition_possible()) {
    if (!saw_partition) return;
    spdlog::info("linger: members back ({} dead of {} now) during the linger: lingering {} s more "
                 "so both sides settle", d.dead, d.known, cfg.linger_s);
    trainer.linger(g_stop, cfg.linger_s);
    return;
  }
  spdlog::info("linger: {} of {} members silent without leaving ({} dead, {} suspected: a "
               "partition?): lingering up to {} s more for them to come back (--linger-heal)",
               d.dead + d.suspect, d.known, d.dead, d.suspect, cfg.linger_heal_s);
  const auto t0 = std::chrono::steady_clock::now();
  const auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  while (!g_stop.load() && d.partition_possible() && waited() < cfg.linger_heal_s) {
    trainer.linger(g_stop, 0.5);
    d = node.gossip().dead_count();
  }
  if (g_stop.load()) return;
  if (d.partition_possible()) {
    spdlog::warn("linger: {} of {} members still silent after {:.1f} s more ({} dead, {} "
                 "suspected): leaving without them",
                 d.dead + d.suspect, d.known, waited(), d.dead, d.suspect);
    return;
  }
  spdlog::info("linger: members back after {:.1f} s ({} dead of {} now): lingering {} s more so "
               "both sides settle", waited(), d.dead, d.known, cfg.linger_s);
  trainer.linger(g_stop, cfg.linger_s);
}

// --catch-up-behind, after the linger: a peer that finished long before the swarm (most partners
// heard are 10% of the run or more behind: it ran ahead, on a slow link that left it no
// exchanges to spend time on) would leave with a model the others never meet at the end, and one
// apart from the swarm (as in linger_watching) has nobody finished to take a state from yet. It
// lingers on, up to --linger-heal, while the swarm is that far behind or clips it away: once
// finished partners that clip it away are enough, it takes one's state; once they are done and
// mix with it, it lingers --linger once more so that the settle exchanges meet it.
void linger_while_apart(const apps::PeerConfig& cfg, core::Trainer& trainer, apps::PeerNode& node,
                        core::Metrics& metrics, bool was_apart) {
  if (cfg.linger_heal_s <= 0 || cfg.linger_s <= 0 || g_stop.load()) return;
  auto& g = node.gossip();
  const bool apart = (was_apart || g.ran_ahead()) && g.apart();
  if (!apart && !g.ahead_of_swarm()) return;
  spdlog::info("linger: {}: lingering up to {} s more for the swarm to finish (--linger-heal)",
               apart ? "most partners clip this peer's model away (it averaged seldom, or was apart "
                       "from them when its training ended, or ran ahead of them)"
                     : "most partners are 10% of their runs or more behind this peer's end",
               cfg.linger_heal_s);
  const auto t0 = std::chrono::steady_clock::now();
  const auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  while (!g_stop.load() && waited() < cfg.linger_heal_s) {
    auto done = g.finished_apart();
    if (!done.empty()) {
      take_finished_state(cfg, trainer, node, metrics, std::move(done),
                          fmt::format("after {:.1f} s more", waited()));
      linger_watching(cfg, trainer, node, metrics, /*was_apart=*/true, /*takes=*/1);
      return;
    }
    if (!g.apart() && !g.ahead_of_swarm()) {
      spdlog::info("linger: the swarm caught up after {:.1f} s: lingering {} s more so that the "
                   "settle exchanges meet this peer",
                   waited(), cfg.linger_s);
      trainer.linger(g_stop, cfg.linger_s);
      return;
    }
    trainer.linger(g_stop, 0.5);
  }
  if (!g_stop.load())
    spdlog::warn("linger: the swarm still far after {:.1f} s more: leaving with this peer's own "
                 "model",
                 waited());
}

// After training: serve exchanges for --linger, then evaluate and save once more, since the
// exchanges served changed the parameters.
// A stopped peer skips both (the run saved its checkpoint on the way out): a stop must be quick.
// `takes`: finished states train() took (a paused peer's catch-up to finished partners), which
// linger_watching may take again as it does its own.
void finish_gossip(const apps::PeerConfig& cfg, core::Trainer& trainer, apps::PeerNode& node,
                   const core::Dataset& test, core::TrainResult& res, core::Metrics& metrics,
                   int takes) {
  // Apart from the swarm as training ends: most partners of the last 10 s clipped us away, or we
  // averaged a tenth as often as the others (a slow link).
  const bool apart_in_training = node.gossip().apart() || node.gossip().undermixed();
  const LingerSaw saw = linger_watching(cfg, trainer, node, metrics, apart_in_training, takes);
  linger_through_partition(cfg, trainer, node, saw.partition);
  if (saw.takes == 0)
    linger_while_apart(cfg, trainer, node, metrics, apart_in_training || saw.ran_ahead);
  if (!res.stopped && !g_stop.load()) {
    const core::EvalResult ev = trainer.evaluate(test);
    trainer.note_test_acc(ev.acc);
    res.final_test_acc = ev.acc;
    res.best_test_acc = trainer.best_test_acc();
    metrics.emit("eval", {{"epoch", res.epochs_done},
                          {"step", res.steps},
                          {"final", true},
                          {"test_acc", ev.acc},
                          {"test_loss", ev.loss}});
    trainer.save_checkpoint_now();
  }
  const auto st = node.gossip().stats();
  spdlog::info(
      "exchanges: {} ok, {} failed, {:.1f} MB sent; training waited for one {} times "
      "({:.1f} s, --max-lag), for slower partners {} times ({:.1f} s, --max-ahead)",
      st.ok, st.failed, st.bytes_sent / 1e6, node.gossip().lag_waits(), node.gossip().lag_wait_s(),
      node.gossip().pace_waits(), node.gossip().pace_wait_s());
  node.stop();
}

void report_done(const core::TrainResult& res, core::Metrics& metrics) {
  metrics.emit("done", {{"steps", res.steps},
                        {"epochs", res.epochs_done},
                        {"final_test_acc", or_null(res.final_test_acc)},
                        {"best_test_acc", or_null(res.best_test_acc)},
                        {"seconds", res.seconds},
                        {"stopped", res.stopped}});
  spdlog::info("{} after {} epochs, {} steps, {:.1f} s: final test_acc {}",
               res.stopped ? "stopped" : "done", res.epochs_done, res.steps, res.seconds,
               figure(res.final_test_acc, "%.2f%%", 100.0));
  spdlog::info("resident memory {:.0f} MB at the end", resident_mb());
}

// --churn FILE: this shard's events, with the record of those played beside the metrics (or the
// checkpoints), where a restarted process finds it. Throws core::ScenarioError.
std::unique_ptr<apps::PeerChurn> make_peer_churn(const apps::PeerConfig& cfg,
                                                 core::Metrics& metrics) {
  auto events = apps::peer_churn_events(cfg.churn, cfg.shard, cfg.num_shards);
  std::string dir;
  if (!cfg.metrics.empty()) dir = std::filesystem::path(cfg.metrics).parent_path().string();
  if (dir.empty()) dir = cfg.train.checkpoint_dir;
  const bool crash = std::any_of(events.begin(), events.end(), [](const core::ChurnEvent& e) {
    return e.kind == core::ChurnKind::Crash;
  });
  if (crash && (cfg.metrics.empty() && cfg.train.checkpoint_dir.empty()))
    throw core::ScenarioError("--churn " + cfg.churn +
                              ": a crash needs --metrics or --checkpoint-dir, where the restarted "
                              "peer finds that it already crashed");
  if (dir.empty()) dir = ".";
  spdlog::info("churn: this peer (shard {}) plays {} event(s) of {}", cfg.shard, events.size(),
               cfg.churn);
  return std::make_unique<apps::PeerChurn>(std::move(events), dir + "/churn-played.txt",
                                           cfg.shard, metrics, g_stop);
}

// Where this process's clock (t = 0) stands in wall time, and its shard: what gossip-launch
// --report needs to put peers started by an engine, or by hand, on one time axis.
void emit_clock_line(const apps::PeerConfig& cfg, core::Metrics& metrics) {
  metrics.emit("clock", {{"unix_s", std::chrono::duration<double>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count() - metrics.seconds()},
                         {"shard", cfg.shard},
                         {"num_shards", cfg.num_shards},
                         {"cluster", cfg.cluster.kind},
                         {"run_id", cfg.train.run_id},
                         {"model", cfg.train.model},
                         {"epochs", cfg.train.epochs},
                         {"batch", cfg.train.batch},
                         {"partition", cfg.partition},
                         {"data", cfg.data},
                         {"seed", cfg.train.seed}});
}

// The epoch and progress lines on the console.
void log_training(core::Trainer& trainer, int epochs) {
  trainer.on_epoch = [epochs](int epoch, std::optional<double> loss, const core::EvalResult& ev,
                              std::optional<double> sps) {
    spdlog::info("epoch {}/{}  loss {}  test_acc {:.2f}%  test_loss {:.4f}  {} samples/s", epoch,
                 epochs, figure(loss, "%.4f"), 100.0 * ev.acc, ev.loss, figure(sps, "%.0f"));
  };
  trainer.on_progress = [epochs](const core::EpochStepProgress& p) {
    spdlog::info(
        "epoch {}/{}  step {}/{} ({:.0f}%)  loss {:.4f}  {:.0f} samples/s  {:.0f} s left "
        "in the epoch",
        p.epoch, epochs, p.step_in_epoch, p.steps_in_epoch,
        100.0 * double(p.step_in_epoch) / double(std::max<std::int64_t>(1, p.steps_in_epoch)),
        p.loss, p.samples_per_s, p.seconds_left);
  };
}

// The final model (a stopped peer's is not final: its checkpoint holds it for a later export);
// false when it could not be written.
bool export_final(const apps::PeerConfig& cfg, Resources& r, core::Trainer& trainer,
                  const core::TrainResult& res, core::Metrics& metrics) {
  if (cfg.export_path.empty() || res.stopped) return true;
  std::map<std::string, std::string> meta{{"steps", std::to_string(res.steps)},
                                          {"epochs", std::to_string(res.epochs_done)}};
  if (res.final_test_acc) meta["test_acc"] = std::to_string(*res.final_test_acc);
  try {
    apps::export_model(*r.backend, trainer.model(), cfg.export_path, meta);
    metrics.emit("export", {{"path", cfg.export_path}, {"step", res.steps}});
  } catch (const core::SafetensorsError& e) {
    spdlog::error("export: {}", e.what());
    return false;
  }
  return true;
}

// The trainer's step hooks, outermost first: this peer's churn (--churn), the test-only stall
// (GT_TEST_STALL_AT_STEP), the gossip node. Returns the stall hook, which must outlive training.
std::unique_ptr<StallAtStep> wire_hooks(core::Trainer& trainer, apps::PeerNode* node,
                                        apps::PeerChurn* churn) {
  std::unique_ptr<StallAtStep> stall_fault;
  if (const char* at = std::getenv("GT_TEST_STALL_AT_STEP"); at && node) {
    stall_fault = std::make_unique<StallAtStep>(node->gossip().hook(), std::atoll(at));
    trainer.set_hook(stall_fault.get());
  }
  if (churn) {
    core::StepHook* inner = nullptr;
    if (stall_fault) inner = stall_fault.get();
    else if (node) inner = &node->gossip().hook();
    churn->set_inner(inner);
    trainer.set_hook(churn);
  }
  return stall_fault;
}

// A FedAvg server or client (apps/fedavg: the protocol on any transport) over the encrypted TCP
// transport of the flags, sized for one whole model a message; the exit code.
template <class Role>
int run_fedavg(const apps::PeerConfig& cfg, Resources& r, core::Metrics& metrics) {
  Role role(cfg, *r.backend, r.data, metrics, g_stop);
  auto identity =
      std::make_shared<const net::Identity>(net::Identity::load_or_create(cfg.identity));
  metrics.set_peer(identity->peer_id());
  net::TcpTransportConfig tcfg = apps::transport_config(cfg, identity, role.fingerprint(), {});
  tcfg.limits.max_message_bytes = apps::fedavg::max_message_bytes(role.num_params());
  net::TcpTransport transport(std::move(tcfg));  // declared after role: stopped before it goes
  role.attach(transport);
  transport.start();
  const int code = role.run();
  transport.stop();
  return code;
}

// Trains (and gossips); the process exit code.
int train(const apps::PeerConfig& cfg, Resources& r) {
  core::Metrics metrics(cfg.metrics, "local");
  emit_clock_line(cfg, metrics);
  std::unique_ptr<apps::PeerChurn> churn;  // --churn: this shard's events, played between steps
  if (!cfg.churn.empty()) {
    try {
      churn = make_peer_churn(cfg, metrics);
    } catch (const core::ScenarioError& e) {
      return usage_error(e.what());
    }
  }
  // /healthz and /readyz read it from the HTTP thread: declared before the observers, it goes
  // after them on the way out.
  apps::PeerHealth health;
  std::unique_ptr<apps::PeerObservers> observers;
  try {
    observers = std::make_unique<apps::PeerObservers>(cfg, metrics, health);
  } catch (const std::runtime_error& e) {
    return usage_error(e.what());
  }
  apply_cpu_plan(r.cpus);
  apps::log_blas(r.blas);
  spdlog::info("backend {} ({}, {}), model {}, shard {}/{} ({} samples, partition {}), test set {}",
               r.backend->name(), r.backend->device(),
               kernels::precision_name(r.backend->precision()), cfg.train.model, cfg.shard,
               cfg.num_shards, r.data.shard.size(), cfg.partition, r.data.test.size());
  spdlog::info("resident memory {:.0f} MB after loading the data", resident_mb());
  emit_data_line(metrics, r.data, r.blas);
  std::unique_ptr<apps::PeerNode> node;
  // From here a stop request ends the process within --stop-grace (joining, catch-up and the
  // FedAvg modes included); stalls count from the first beat of the gossip trainer below.
  // Declared after node: it goes first on the way out.
  const auto watchdog = start_watchdog(cfg, health, node);
  if (cfg.fedavg.enabled()) {  // a FedAvg server or client instead of a gossip peer
    health.phase = apps::PeerHealth::Phase::Training;
    try {
      return cfg.fedavg.server ? run_fedavg<apps::fedavg::Server>(cfg, r, metrics)
                               : run_fedavg<apps::fedavg::Client>(cfg, r, metrics);
    } catch (const core::CheckpointRunError& e) {
      return config_error(e.what());  // names the ways out itself
    } catch (const core::CheckpointError& e) {
      return usage_error(std::string(e.what()) +
                         " (move it away or pass another --checkpoint-dir)");
    } catch (const net::ConfigError& e) {
      return config_error(e.what());
    }
  }
  // The trainer owns the model; the gossip node takes its fingerprint and parameter count.
  core::Trainer trainer(*r.backend, cfg.train, r.data.shard, r.data.test, metrics, nullptr);
  trainer.set_heartbeat(&health.heartbeat);
  bool resumed = false;
  try {
    resumed = trainer.resume();
  } catch (const core::CheckpointRunError& e) {
    return config_error(e.what());  // names the ways out itself
  } catch (const core::CheckpointError& e) {
    return usage_error(std::string(e.what()) +
                       " (move the checkpoint away or pass another --checkpoint-dir)");
  }
  if (cfg.gossip_enabled()) {
    health.phase = apps::PeerHealth::Phase::Joining;
    try {
      node = start_gossip(cfg, trainer, r, metrics, resumed);
    } catch (const net::ConfigError& e) {
      return config_error(e.what());
    }
  }
  const auto stall_fault = wire_hooks(trainer, node.get(), churn.get());
  // Outermost: it times the steps alone, not the hooks inside it.
  const auto tuned = apps::tune_threads(r.backend->kind() == kernels::BackendKind::Cpu,
                                        cfg.compute_threads, trainer.hook());
  if (tuned) trainer.set_hook(tuned.get());
  log_training(trainer, cfg.train.epochs);
  auto refused = [&]() -> std::optional<std::string> {
    return node ? node->gossip().join_refused() : std::nullopt;
  };
  if (auto why = refused()) return usage_error("could not join the swarm: " + *why);
  health.phase = apps::PeerHealth::Phase::Training;
  int finished_takes = 0;
  core::TrainResult res = train(trainer, node.get(), cfg, metrics, &finished_takes);
  if (auto why = refused()) return usage_error("could not join the swarm: " + *why);
  if (res.stopped || g_stop.load()) health.phase = apps::PeerHealth::Phase::Stopping;
  else if (node) health.phase = apps::PeerHealth::Phase::Lingering;
  if (node) finish_gossip(cfg, trainer, *node, r.data.test, res, metrics, finished_takes);
  health.phase = apps::PeerHealth::Phase::Stopping;
  report_done(res, metrics);
  if (!export_final(cfg, r, trainer, res, metrics)) return 1;
  return res.stopped ? 130 : 0;
}

// --export FILE --from-checkpoint DIR: the checkpoint's model (its spec from the checkpoint's
// metadata), evaluated once on the test set, to FILE; one JSON line on stdout with the figures.
int export_checkpoint(apps::PeerConfig cfg) {
  core::Checkpoint c;
  try {
    c = core::load_checkpoint(cfg.from_checkpoint);
  } catch (const core::CheckpointError& e) {
    return usage_error(e.what());
  }
  const auto meta = nlohmann::json::parse(c.meta, nullptr, false);
  if (meta.is_object() && meta.contains("model") && meta["model"].is_string())
    cfg.train.model = meta["model"].get<std::string>();
  if (meta.is_object() && meta.contains("optimizer") && meta["optimizer"].is_string())
    core::from_string(meta["optimizer"].get<std::string>(), cfg.train.optimizer);
  // Only the parameters matter here: the step counters belong to the run that wrote them (its
  // shards and epochs), which this command need not repeat.
  cfg.train.checkpoint_dir.clear();
  Resources r = prepare(cfg);
  core::Metrics metrics("", "local");
  core::Trainer trainer(*r.backend, cfg.train, r.data.shard, r.data.test, metrics, nullptr);
  if (c.fingerprint != trainer.model().fingerprint() ||
      c.params.size() != trainer.model().num_params())
    return usage_error("checkpoint in " + cfg.from_checkpoint + " does not hold a " +
                       cfg.train.model + " model");
  r.backend->upload(trainer.model().params(), c.params.data(), c.params.size() * sizeof(float));
  const core::EvalResult ev = trainer.evaluate(r.data.test);
  try {
    apps::export_model(*r.backend, trainer.model(), cfg.export_path,
                       {{"steps", std::to_string(c.step)},
                        {"epochs", std::to_string(c.epoch)},
                        {"test_acc", std::to_string(ev.acc)},
                        {"checkpoint", cfg.from_checkpoint}});
  } catch (const core::SafetensorsError& e) {
    spdlog::error("export: {}", e.what());
    return 1;
  }
  std::printf("%s\n", nlohmann::json{{"export", cfg.export_path},
                                     {"checkpoint", cfg.from_checkpoint},
                                     {"model", cfg.train.model},
                                     {"step", c.step},
                                     {"epoch", c.epoch},
                                     {"test_acc", ev.acc},
                                     {"test_loss", ev.loss},
                                     {"test_rows", r.data.test.size()}}
                           .dump()
                           .c_str());
  return 0;
}

// Runs f; bad input it throws (data, partition, backend choice, checkpoint) comes back as the
// message for exit code 2, anything else propagates.
template <typename F>
std::optional<std::string> bad_input(F&& f) {
  try {
    f();
  } catch (const core::DataError& e) {
    return std::string(e.what());
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  } catch (const kernels::BackendError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto rc = apps::answer_blas_probe()) return *rc;  // a probe child of ours
  apps::PeerConfig cfg;
  try {
    bool help = false;
    cfg = apps::parse_peer_args(std::vector<std::string>(argv + 1, argv + argc), &help);
    if (help) {
      std::fputs(apps::peer_usage().c_str(), stdout);
      return 0;
    }
  } catch (const apps::UsageError& e) {
    return usage_error(e.what());
  }
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  // Before anything else: a change of OpenBLAS core runs this program again from the start.
  const kernels::BlasCoreChoice blas = apps::settle_blas_core(cfg.blas_core);
  install_signal_handlers();
  if (!cfg.from_checkpoint.empty()) {
    int rc = 0;
    if (const auto bad = bad_input([&] { rc = export_checkpoint(cfg); })) return usage_error(*bad);
    return rc;
  }
  Resources r;
  if (const auto bad = bad_input([&] {
        r = prepare(cfg);
        r.blas = blas;
      }))
    return usage_error(*bad);
  try {
    return train(cfg, r);
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    spdlog::error("gossip-peer failed: {}", e.what());
    return 1;
  }
}
