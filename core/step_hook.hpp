// The one narrow hook through which anything outside core/ (gossip's averaging) touches training:
// called on the training thread between two steps, with the flat parameter arena.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/checkpoint.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::core {

// The whole training state (parameters, optimizer state, counters) as a checkpoint: what a hook
// hands a joining peer that catches up. Copies from the device; call on the training thread only.
class StateSource {
 public:
  virtual ~StateSource() = default;
  virtual Checkpoint state() = 0;
};

struct StepContext {
  kernels::Backend& backend;
  float* params;            // device pointer to the flat parameter arena (n_params floats)
  std::size_t n_params;
  std::int64_t step;        // optimizer steps done so far
  std::int64_t samples;     // training samples consumed so far
  std::int64_t shard_size;  // samples in this peer's shard
  int epoch;                // current epoch (0-based)
  bool training_done;       // true when called after the last step (the peer lingers to serve)
  // The trainer's whole state, valid during this call only; null where there is none (tests,
  // benchmarks that drive a bare parameter vector).
  StateSource* state = nullptr;
  std::int64_t total_steps = 0;  // steps of the whole run; 0: not known
  // Set by the hook: Trainer::run returns after this step (TrainResult::handed_back), so that
  // its caller can act on the whole state, as a peer far behind the swarm does when it fetches a
  // partner's (gossip::Node::catch_up_wanted), and then calls run() again. Ignored when lingering.
  bool hand_back = false;
};

// The fraction of its training a peer has done, steps over total_steps in [0, 1] (1 once done),
// or -1 when the run's length is not known.
inline double progress_of(const StepContext& ctx) {
  if (ctx.total_steps <= 0) return -1.0;
  const double p = double(ctx.step) / double(ctx.total_steps);
  return p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p);
}

class StepHook {
 public:
  virtual ~StepHook() = default;
  // May read and modify ctx.params through ctx.backend; must not block on the network.
  virtual void between_steps(StepContext& ctx) = 0;
};

}  // namespace gossiptrain::core
