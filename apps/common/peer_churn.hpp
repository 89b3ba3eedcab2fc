// gossip-peer --churn FILE: a peer plays its own shard's events of a churn scenario, for engines
// (SLURM, containers, Kubernetes) where no gossip-launch stands over the peers to apply them.
// crash: the process dies at once (SIGKILL to itself, no clean-up); pause: it stops (SIGSTOP)
// for the event's "for" seconds; stop: it leaves the swarm cleanly. Each is a `churn` metrics
// line first, so that gossip-launch --report builds the churn section of a local launch.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "core/churn/scenario.hpp"
#include "core/metrics.hpp"
#include "core/step_hook.hpp"

namespace gossiptrain::apps {

// This shard's events of the scenario at path (file or shorthand), in the order they come due.
// Restart, resume and join events are the engine's to apply and are left out. Throws
// core::ScenarioError for a scenario this peer cannot play alone (a random model, partitions,
// links, faults, a pause without "for").
std::vector<core::ChurnEvent> peer_churn_events(const std::string& path, int shard, int num_shards);

// Indices of the events already played, kept in state_file (one per line) so that a peer
// restarted after its crash does not crash again at the same point.
class PeerChurn final : public core::StepHook {
 public:
  PeerChurn(std::vector<core::ChurnEvent> events, std::string state_file, int shard,
            core::Metrics& metrics, std::atomic<bool>& stop);
  void set_inner(core::StepHook* inner) { inner_ = inner; }
  void between_steps(core::StepContext& ctx) override;
  // Events left to play (tests).
  std::size_t pending() const;

 private:
  void play(std::size_t i, const core::StepContext& ctx);
  void mark_played(std::size_t i);

  std::vector<core::ChurnEvent> events_;
  std::vector<bool> played_;
  std::string state_file_;
  int shard_;
  core::Metrics& metrics_;
  std::atomic<bool>& stop_;
  core::StepHook* inner_ = nullptr;
};

}  // namespace gossiptrain::apps
