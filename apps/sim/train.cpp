// gossip-sim's train workload: every peer trains the real model (core::Trainer) on its shard, one
// step per simulated step time, and averages through the real gossip/ code at its step
// boundaries, as gossip-peer does with the same flags. docs/sim.md, "gossip-sim".
#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>

#include "apps/sim/peer.hpp"
#include "core/partition.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::apps::sim {

using net::Millis;
using nlohmann::json;

namespace {

// The summary keeps its max_lag field as it has always been written: -1 auto, 0 off, else the
// steps.
int max_lag_field(const gossip::MaxLag& m) {
  return m.mode() == gossip::MaxLag::Mode::Auto ? -1 : m.steps();
}
// gossip-launch under churn passes --checkpoint-every 5: a crashed peer loses at most that much.
constexpr double kChurnCheckpointS = 5.0;
// gossip-peer's --min-peers-timeout default: the first peers wait this long at most for the others.
constexpr double kCohortTimeoutS = 120.0;
constexpr int kMeasureSteps = 40, kMeasureWarmup = 5;
// How often a peer in a --max-lag or --max-ahead wait makes a serve pass (gossip-peer's training
// thread makes one every 200 us; the virtual clock counts whole ms). The averager's boundary
// requests make one at once besides.
constexpr Millis kHoldTick{1};
}  // namespace

Millis World::step_time() const {
  return Millis(std::max<Millis::rep>(1, std::llround(cfg_.step_ms)));
}

// The data once for all peers: the whole training set split into one shard per peer slot (as
// gossip-launch does: --num-shards is every slot, joiners included) and one shared test set.
void World::load_train_data() {
  PeerConfig& pc = cfg_.peer;
  const int slots = static_cast<int>(peers_.size());
  pc.train.seed = cfg_.seed;  // gossip-launch passes its --seed to every peer
  pc.train.checkpoint_dir.clear();
  data_ = core::load_dataset(pc.data);
  const core::PartitionSpec& spec = pc.partition_spec;
  const auto parts =
      core::partition(data_.train.y, data_.train.classes, slots, spec, pc.train.seed);
  shards_.clear();
  for (const auto& rows : parts) shards_.push_back(core::subset(data_.train, rows));
  // As gossip-peer with --num-shards: an epoch is an equal share of the training set. Alone, the
  // trainer's own count (one pass over the shard, which is the whole set) is the same number.
  steps_per_epoch_ = core::share_steps_per_epoch(data_.train.size(), slots, pc.train.batch);
  pc.train.steps_per_epoch = slots > 1 ? steps_per_epoch_ : 0;
  core::Metrics quiet("", "probe");
  train_be_ = kernels::make_backend(pc.backend, pc.device);
  train_be_->set_precision(pc.precision);
  core::Trainer probe(*train_be_, pc.train, shards_[0], data_.test, quiet, nullptr);
  fingerprint_ = probe.model().fingerprint();
  dim_ = probe.model().num_params();
  if (cfg_.step_ms > 0) {
    step_ms_source_ = "given";
  } else {
    cfg_.step_ms = measure_step_ms();
    step_ms_source_ = "measured";
  }
  const double total_steps = double(steps_per_epoch_) * pc.train.epochs;
  expected_train_s_ = total_steps * cfg_.step_ms / 1000.0 + cfg_.join_spread_s;
}

// The wall time of one step of peer 0's trainer, after a warm-up: what a simulated step costs.
double World::measure_step_ms() {
  core::Metrics quiet("", "probe");
  core::TrainConfig tc = cfg_.peer.train;
  tc.epochs = 1;
  tc.steps_per_epoch = kMeasureSteps + kMeasureWarmup + 1;  // no epoch end inside the timing
  tc.log_every_steps = 0;
  core::Trainer t(*train_be_, tc, shards_[0], data_.test, quiet, nullptr);
  core::TrainResult r;
  for (int k = 0; k < kMeasureWarmup; ++k) t.train_step(r);
  train_be_->synchronize();  // a GPU's queued work is not part of the timing, nor left out of it
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kMeasureSteps; ++k) t.train_step(r);
  train_be_->synchronize();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::max(0.001, ms / kMeasureSteps);
}

// A peer (re)starts: a trainer over its shard, resumed from its last checkpoint after a crash.
// The first peers wait for the whole cohort before their first step (gossip-launch's
// --min-peers N); a restarted peer without a checkpoint and a joiner catch up first.
void World::start_training(Peer& p, bool joiner) {
  const int i = p.index;
  p.trainer = std::make_unique<core::Trainer>(*train_be_, cfg_.peer.train, shards_[std::size_t(i)],
                                              data_.test, *p.metrics, &p.node->hook());
  p.trainer->on_epoch = [this, i](int epoch, std::optional<double> loss, const core::EvalResult& ev,
                                  std::optional<double>) {
    ++evaluations_;
    emit({{"t", now_s()},
          {"event", "eval"},
          {"peer", i},
          {"epoch", epoch},
          {"test_acc", ev.acc},
          {"test_loss", ev.loss},
          {"train_loss", loss ? json(*loss) : json(nullptr)}});
  };
  p.training = false;
  p.finished = false;
  p.res = core::TrainResult{};
  bool resumed = false;
  if (p.ckpt) {
    p.trainer->restore(*p.ckpt, "checkpoint of peer " + std::to_string(i));
    resumed = true;
  }
  const bool restarted = p.life > 1;
  p.catching_up = joiner || (restarted && !resumed && cfg_.peer.catch_up == CatchUpMode::Auto);
  p.trainer->call_hook(/*done=*/true);  // the averager learns the vector's size
  p.node->start();
  const std::uint64_t life = p.life;
  if (p.catching_up) {
    p.t->post([this, i, life] { catch_up(i, life); });
  } else if (!restarted && cfg_.peers > 1) {
    const double since = now_s();
    p.t->post([this, i, life, since] { wait_for_cohort(i, life, since, 0); });
  } else {
    p.t->post([this, i, life] { train_tick(i, life); });
  }
}

// Checks every 100 ms, and syncs with a random member every 10th time, as gossip-peer does.
void World::wait_for_cohort(int i, std::uint64_t life, double since_s, int checks) {
  Peer& p = *peers_[i];
  if (!p.up || p.life != life) return;
  const int have = int(p.node->live_count()) + 1;
  if (have >= cfg_.peers || now_s() - since_s >= kCohortTimeoutS) {
    train_tick(i, life);
    return;
  }
  p.trainer->call_hook(/*done=*/true);  // answers exchanges meanwhile
  if (++checks % 10 == 0) p.node->membership().sync_now();
  p.t->schedule(Millis(100), [this, i, life, since_s, checks] {
    wait_for_cohort(i, life, since_s, checks);
  });
}

// One step of peer i's trainer (its hook runs the averager), then the next one a step time later.
void World::train_tick(int i, std::uint64_t life) {
  Peer& p = *peers_[i];
  if (!p.up || p.life != life || !p.trainer || p.finished || p.catching_up) return;
  p.training = true;
  const int epoch_before = p.res.epochs_done;
  const bool more = p.trainer->train_step(p.res);
  // In-memory checkpoints as gossip-launch's peers write them: every epoch end, and every few
  // seconds under churn (every minute without).
  const double every = cfg_.churn ? kChurnCheckpointS : cfg_.peer.train.checkpoint_every_s;
  if (p.res.epochs_done != epoch_before || now_s() - p.ckpt_at >= every) {
    p.ckpt = p.trainer->state();
    p.ckpt_at = now_s();
  }
  if (more) {
    if (p.node->holding()) {  // --max-lag or --max-ahead: training waits, the node serves
      p.t->schedule(kHoldTick, [this, i, life] { hold_tick(i, life); });
      return;
    }
    p.t->schedule(step_time(), [this, i, life] { train_tick(i, life); });
    return;
  }
  // Done: gossip-peer lingers to serve exchanges (10 s with seeds), evaluates, and leaves.
  p.training = false;
  const double linger = cfg_.peer.linger_s >= 0 ? cfg_.peer.linger_s : 10.0;
  p.t->schedule(ms_of(linger), [this, i, life] {
    if (peers_[i]->up && peers_[i]->life == life) finish_training(i);
  });
}

void World::hold_tick(int i, std::uint64_t life) {
  Peer& p = *peers_[i];
  if (!p.up || p.life != life || !p.trainer || p.finished) return;
  if (p.node->holding()) p.trainer->call_hook(/*done=*/false);  // one serve pass
  if (p.node->holding()) {
    p.t->schedule(kHoldTick, [this, i, life] { hold_tick(i, life); });
    return;
  }
  p.t->schedule(step_time(), [this, i, life] { train_tick(i, life); });
}

void World::finish_training(int i) {
  Peer& p = *peers_[i];
  const core::EvalResult ev = p.trainer->evaluate(data_.test);
  p.final_acc = ev.acc;
  p.finished = true;
  p.ckpt = p.trainer->state();
  emit({{"t", now_s()},
        {"event", "done"},
        {"peer", i},
        {"final_test_acc", ev.acc},
        {"steps", p.res.steps},
        {"epochs", p.res.epochs_done}});
  // gossip-peer's clean stop: announce "left", linger, then the process ends.
  p.node->leave();
  const std::uint64_t life = p.life;
  p.t->schedule(p.node->membership().config().leave_linger + Millis(100), [this, i, life] {
    Peer& q = *peers_[i];
    if (!q.up || q.life != life) return;
    net_.kill(q.addr, true);
    set_up(q, false);
    q.down_since = now_s();
    tear_down(q);
  });
}

// The train workload ends when no peer is up and no churn event is left to start one.
bool World::training_over() const {
  if (!cfg_.train() || !all_started_) return false;
  for (const auto& p : peers_)
    if (p->up) return false;
  return true;
}

json World::train_summary() const {
  json per_peer = json::array();
  std::vector<double> accs;
  // --max-lag and --max-ahead waits of every peer (the ones of a node still up included).
  std::uint64_t lag_waits = 0, pace_waits = 0;
  double lag_wait_s = 0, pace_wait_s = 0;
  for (const auto& p : peers_) {
    lag_waits += p->lag_waits + (p->node ? p->node->lag_waits() : 0);
    lag_wait_s += p->lag_wait_s + (p->node ? p->node->lag_wait_s() : 0);
    pace_waits += p->pace_waits + (p->node ? p->node->pace_waits() : 0);
    pace_wait_s += p->pace_wait_s + (p->node ? p->node->pace_wait_s() : 0);
  }
  for (const auto& p : peers_) {
    if (!p->ever_started) continue;
    per_peer.push_back(p->final_acc ? json(*p->final_acc) : json(nullptr));
    if (p->final_acc) accs.push_back(*p->final_acc);
  }
  double mean = 0;
  for (double a : accs) mean += a;
  const auto& tc = cfg_.peer.train;
  return {{"model", tc.model},
          {"partition", cfg_.peer.partition},
          {"data", cfg_.peer.data},
          {"epochs", tc.epochs},
          {"batch", tc.batch},
          {"lr", tc.lr},
          {"optimizer", std::string(core::to_string(tc.optimizer))},
          {"gossip_every", cfg_.peer.node.averager.gossip_every},
          {"max_lag", max_lag_field(cfg_.peer.node.max_lag)},
          {"max_ahead", cfg_.peer.node.max_ahead},
          {"outer_every", cfg_.peer.node.outer.every},
          {"wire", std::string(gossip::wire_name(cfg_.peer.node.averager.wire))},
          {"lag_waits", lag_waits},
          {"lag_wait_s", lag_wait_s},
          {"pace_waits", pace_waits},
          {"pace_wait_s", pace_wait_s},
          {"steps_per_epoch", steps_per_epoch_},
          {"step_ms", cfg_.step_ms},
          {"step_ms_source", step_ms_source_},
          {"evaluations", evaluations_},
          {"peers_finished", accs.size()},
          {"final_test_acc_per_peer", per_peer},
          {"final_test_acc_mean", accs.empty() ? json(nullptr) : json(mean / double(accs.size()))},
          {"final_test_acc_min",
           accs.empty() ? json(nullptr) : json(*std::min_element(accs.begin(), accs.end()))},
          {"final_test_acc_max",
           accs.empty() ? json(nullptr) : json(*std::max_element(accs.begin(), accs.end()))}};
}

}  // namespace gossiptrain::apps::sim
