// gossip-sim's world: N peers in one process, each running gossip-peer's gossip::Node (membership,
// averaging, catch-up, --max-lag and --max-ahead: gossip/node) over the seeded in-memory network
// (net/memory/memory_transport) on its virtual clock. One thread drives everything (NodeThreads::Shared);
// the node's step hook is called at each peer's exchange ticks or training steps, and whenever
// the averager asks for a step boundary (Averager::set_boundary_request). See docs/sim.md, "gossip-sim".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/options.hpp"
#include "core/churn/scenario.hpp"
#include "core/dataset.hpp"
#include "gossip/exchange/averager.hpp"
#include "gossip/membership/membership.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/memory/memory_transport.hpp"

namespace gossiptrain::apps::sim {

// --topology FILE: regions, each with a weight (its share of the peers, in contiguous blocks of
// peer indices: peer i of T goes to the region whose cumulative share covers i / T), and the
// one-way latency in ms between regions, added to every link between them.
struct Topology {
  std::vector<std::string> names;
  std::vector<double> weights;
  std::vector<std::vector<double>> latency_ms;  // [from][to], square
  // The region of each of `peers` peer indices.
  std::vector<int> assign(int peers) const;
};
// Reads and checks a topology file; std::invalid_argument saying what is wrong.
Topology load_topology(const std::string& path);

struct SimConfig {
  int peers = 0;
  std::string workload = "consensus";
  double sim_seconds = 0;
  std::uint64_t seed = 1;
  std::size_t params = 1000;         // floats per peer (consensus workload)
  double exchange_interval_s = 1.0;  // each peer starts an exchange this often
  double sample_every_s = 1.0;       // consensus samples (msd) in events.jsonl
  double join_spread_s = 2.0;        // non-seed peers start uniformly in [0, this)
  int seeds = 3;                     // peers 0..seeds-1 are every peer's seeds
  double idle_timeout_s = 60;        // membership's idle_connection_timeout
  double loss = 0.0;                 // membership messages only (UDP-like); see README
  net::Millis latency{5};            // one-way base latency (log-normal: the links' median)
  net::Millis jitter{0};             // plus uniform [0, jitter]
  double latency_sigma = 0;          // > 0: log-normal links (net::SimOptions::latency_sigma)
  double bandwidth_mbit = 0;         // each peer's uplink; 0: unlimited
  std::optional<Topology> topology;  // regions, with latency between them
  gossip::MixMode mix = gossip::MixMode::Plain;
  int rate_rounds = 10;          // rounds sampled for the consensus rate check
  bool trace_exchanges = false;  // one events.jsonl line per exchange side
  std::optional<core::ChurnScenario> churn;
  // The train workload: the peers' flags (gossip-peer's training and gossip flags; the shard and
  // the number of shards are set per peer), and the simulated time of one step (0: measured).
  // Its backend is cpu unless set (gossip-peer's default, auto, would change the run with the
  // machine).
  PeerConfig peer = [] {
    PeerConfig p;
    p.backend = kernels::BackendKind::Cpu;
    return p;
  }();
  double step_ms = 0;
  bool train() const { return workload == "train"; }
};

// What a run measured; summary.json is built from it (to_json).
struct SimResult {
  nlohmann::json summary;
};

class World {
 public:
  // events (not owned) receives events.jsonl, one JSON object per line. Throws
  // std::invalid_argument for a configuration the world cannot run (checked by the option parser
  // first).
  World(SimConfig cfg, std::ostream& events);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // Runs sim_seconds of virtual time (then lets the exchanges in flight finish) and returns the
  // summary without wall_seconds (the caller times the run).
  nlohmann::json run();

  // For tests: the state an observer holds of a member (-1 never seen, else MemberState).
  int view(int observer, int member) const;
  net::SimNetwork& network() { return net_; }

 private:
  struct Peer;
  class VectorState;
  struct Crash;
  void start_peer(int i, bool joiner = false);
  void catch_up(int i, std::uint64_t life);
  void build_protocols(Peer& p);
  void tear_down(Peer& p);
  void tick(int i, std::uint64_t life);
  void boundary(int i, bool initiate);
  void on_member(int observer, const gossip::MemberInfo& m);
  void on_exchange(int i, const gossip::ExchangeEvent& e);
  void apply_churn(const core::ChurnEvent& e, const std::string& source);
  // The parts of apply_churn: the peers of an event that exist, and the events with more to do.
  std::vector<int> existing(const std::vector<int>& peers) const;
  void churn_partition(const core::ChurnEvent& e);
  void churn_link(const core::ChurnEvent& e);
  void churn_fault(const core::ChurnEvent& e);
  void crash(int i, const std::string& source, bool graceful);
  void restart(int i, const std::string& source);
  Crash& open_record(int i, const std::string& source);
  void pause(int i, const std::string& source);
  void resume(int i, const std::string& source);
  bool responsive(const Peer& p) const;
  void join(const std::string& source);
  void sample(const char* why);
  void check_converged();
  void census();
  void held_alive_at_end(nlohmann::json& membership) const;
  void report_progress();
  nlohmann::json finish();
  void emit(nlohmann::json j);
  double now_s() const;
  int index_of(const std::string& id) const;
  double detection_bound_s() const;
  nlohmann::json rate_check() const;
  nlohmann::json churn_summary() const;
  std::vector<double> coordinate_sums() const;
  int up_count() const;
  void set_up(Peer& p, bool up);  // keeps up_ in step
  bool counted(const Peer& p) const;
  // The vector a peer averages, readable here: on the GPU, copied into scratch first.
  const float* vec(const Peer& p, std::vector<float>& scratch) const;

  // The train workload (sim_train.cpp): data and shards, the step loop, checkpoints, the end.
  void load_train_data();
  double measure_step_ms();
  void start_training(Peer& p, bool joiner);
  void wait_for_cohort(int i, std::uint64_t life, double since_s, int checks);
  void train_tick(int i, std::uint64_t life);
  // A --max-lag or --max-ahead wait of peer i's node: a serve pass every kHoldTick, then the next
  // step a step time after the wait ends.
  void hold_tick(int i, std::uint64_t life);
  net::Millis step_time() const;  // the simulated time of one step, at least 1 ms
  void finish_training(int i);
  bool training_over() const;
  nlohmann::json train_summary() const;
  SimConfig cfg_;
  std::ostream& events_;
  std::chrono::steady_clock::time_point wall_start_, last_progress_;
  kernels::CpuBackend be_;  // before the peers: their buffers are freed through it
  // The train workload's backend (--backend cpu or cuda): every peer's trainer and averager on it,
  // one after another on the sim's one thread (one stream). Before the peers, as be_.
  std::unique_ptr<kernels::Backend> train_be_;
  net::SimNetwork net_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<std::string> seed_addrs_;
  std::shared_ptr<gossip::MemberNames> names_ = std::make_shared<gossip::MemberNames>();
  core::ChurnSchedule schedule_;
  bool ticking_ = true;
  int up_ = 0;  // peers up
  bool all_started_ = false;

  // Consensus bookkeeping.
  std::uint64_t ok_sides_ = 0, failed_sides_ = 0;
  std::map<std::string, std::uint64_t> failed_by_reason_;
  std::uint64_t next_round_sides_ = 0;
  int rounds_sampled_ = 0;
  struct Sample {
    double t;
    std::uint64_t exchanges;
    double msd;
    int live;
  };
  std::vector<Sample> samples_;
  std::vector<Sample> round_samples_;
  double msd0_ = -1;
  std::vector<double> sum0_;

  // Membership bookkeeping.
  std::optional<double> converged_s_;
  double last_start_s_ = 0;
  std::uint64_t false_dead_ = 0, false_dead_stable_ = 0, suspicions_ = 0;
  std::vector<std::unique_ptr<Crash>> crashes_;
  int joins_ = 0, restarts_ = 0;
  int catch_ups_ok_ = 0, catch_ups_failed_ = 0;
  double wrong_dead_sum_ = 0, wrong_alive_sum_ = 0;
  int wrong_dead_max_ = 0, wrong_alive_max_ = 0;
  std::uint64_t census_observations_ = 0;
  std::vector<std::pair<double, int>> alive_over_time_;

  // Train workload.
  core::TrainTest data_;
  std::vector<core::Dataset> shards_;
  std::size_t dim_ = 0;            // floats per peer: params, or the model's size
  std::uint64_t fingerprint_ = 0;  // the model's (train workload)
  std::int64_t steps_per_epoch_ = 0;
  double expected_train_s_ = 0;  // total steps x step time: where at_progress events fall
  std::string step_ms_source_;
  int evaluations_ = 0;
};

}  // namespace gossiptrain::apps::sim
