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
};

class StepHook {
 public:
  virtual ~StepHook() = default;
  // May read and modify ctx.params through ctx.backend; must not block on the network.
  virtual void between_steps(StepContext& ctx) = 0;
};

}  // namespace gossiptrain::core
