// An outer optimizer over gossip (DiLoCo, Douillard et al. 2023; NoLoCo, Gensyn 2025): every H
// training steps, the pseudo-gradient g = anchor - x of the local steps since the last outer step
// takes one SGD step with Nesterov momentum and an outer learning rate:
//   m = mu m + g;  anchor -= lr (g + mu m);  x = anchor
// A pairwise mix the averager applies to x meanwhile is applied to the anchor too (mixed()), so
// it reaches x at weight 1 and outside the momentum: momentum on the pull towards a partner
// amplifies it (about lr (1 + mu / (1 - mu)) = 7x at 0.7 and 0.9) and the peers' distance grows
// instead of shrinking, as NoLoCo's modified Nesterov step also avoids.
// lr 1 and mu 0 leave x as it is (plain gossip). The state (anchor, m) is the peer's: save() and
// restore() carry it across restarts (docs/communication.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/step_hook.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::gossip {

struct OuterConfig {
  int every = 0;         // H: training steps between outer steps; 0: off
  float lr = 1.0f;       // outer learning rate
  float momentum = 0.0f; // Nesterov momentum mu
};

class OuterStep {
 public:
  // Throws std::invalid_argument on a bad config (every < 0, lr <= 0, momentum outside [0, 1)).
  OuterStep(OuterConfig cfg, kernels::Backend& be);
  // Training thread, between steps: takes the anchor at the first call, then every H steps
  // (ctx.step a multiple of H) takes the outer step. Nothing once training is done.
  void between_steps(core::StepContext& ctx);
  std::int64_t outer_steps() const { return steps_; }
  // Around a step boundary where the averager may apply a mix: before_mix() keeps x, mixed() adds
  // what the boundary changed in x to the anchor. Training thread.
  void before_mix(const core::StepContext& ctx);
  void mixed(const core::StepContext& ctx);
  // The state, {anchor, momentum} (empty before the first call), and setting it (sizes must be
  // the model's; anything else is ignored and false returned). Training thread.
  std::vector<std::vector<float>> save() const;
  bool restore(const std::vector<std::vector<float>>& state, std::size_t n_params);

 private:
  void allocate(std::size_t n);
  OuterConfig cfg_;
  kernels::Backend& be_;
  std::size_t n_ = 0;
  bool have_anchor_ = false;
  std::int64_t last_step_ = -1;
  std::int64_t steps_ = 0;
  bool before_taken_ = false;
  kernels::DeviceBuffer<float> anchor_, m_, g_, zero_, before_;
};

}  // namespace gossiptrain::gossip
