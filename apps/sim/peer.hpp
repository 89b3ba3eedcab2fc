// gossip-sim's per-peer state, shared by the world (world.cpp) and its train workload
// (train.cpp). Private to gt_sim.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/sim/world.hpp"
#include "base/rng.hpp"
#include "core/checkpoint.hpp"
#include "core/metrics.hpp"
#include "core/trainer.hpp"
#include "gossip/node/node.hpp"

namespace gossiptrain::apps::sim {

// A seeded draw of its own for each (seed, purpose): never 0.
inline std::uint64_t mix64(std::uint64_t a, std::uint64_t b) {
  base::SplitMix64 r(a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL));
  std::uint64_t v = r.next();
  return v ? v : 1;
}
inline net::Millis ms_of(double s) {
  return net::Millis(static_cast<net::Millis::rep>(std::llround(s * 1000.0)));
}

struct World::Peer {
  int index = 0;
  std::string id, addr;
  net::SimTransport* t = nullptr;
  // Its node's metric lines (no file: the sim writes events.jsonl), then gossip-peer's node over
  // its simulated transport (NodeThreads::Shared): membership, averaging, catch-up, --max-lag and
  // --max-ahead. Null while the peer is down.
  std::unique_ptr<core::Metrics> metrics;
  std::unique_ptr<gossip::Node> node;
  bool catching_up = false;        // a joiner fetching a live peer's vector: no exchange yet
  kernels::DeviceBuffer<float> x;  // kept over a crash: the restarted peer resumes from it
  std::int64_t step = 0;
  bool up = false;
  bool paused = false;  // up (its process exists) but stopped: nothing of it runs
  // A churn fault event's mode, kept over restarts until its end, as gossip-launch restarts the
  // peer with --fault.
  gossip::FaultConfig fault;
  bool ever_started = false;
  bool boundary_pending = false;
  std::uint64_t life = 0;  // bumped at every start: ticks of an older life are dropped
  double up_since = 0, down_since = 0;
  std::vector<std::int8_t> view;  // what this peer holds of each member (kUnseen or MemberState)
  int known_alive = 0;            // members it holds alive (not itself)
  std::uint64_t ok = 0, failed = 0, bytes = 0;
  // Its nodes' --max-lag and --max-ahead waits, over all its lives.
  std::uint64_t lag_waits = 0, pace_waits = 0;
  double lag_wait_s = 0, pace_wait_s = 0;

  // The train workload: the trainer over this peer's shard (gone while the peer is down; its
  // step hook is the node), and its last checkpoint, kept in memory over a crash as gossip-peer
  // keeps its own on disk.
  std::unique_ptr<core::Trainer> trainer;
  std::optional<core::Checkpoint> ckpt;
  double ckpt_at = 0;
  core::TrainResult res;
  bool training = false;  // taking steps (not waiting for its cohort, catching up or lingering)
  bool finished = false;  // trained every epoch, lingered, evaluated and left
  std::optional<double> final_acc;
};

}  // namespace gossiptrain::apps::sim
