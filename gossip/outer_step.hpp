// An outer optimizer over gossip (DiLoCo, Douillard et al. 2023; NoLoCo, Gensyn 2025): every H
// training steps, the pseudo-gradient g = anchor - x (the local steps since the last outer step,
// with the pairwise mixes the averager applied meanwhile: the partners' pseudo-gradients averaged
// in) takes one SGD step with Nesterov momentum and an outer learning rate:
//   m = mu m + g;  anchor -= lr (g + mu m);  x = anchor
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
  kernels::DeviceBuffer<float> anchor_, m_, g_, zero_;
};

}  // namespace gossiptrain::gossip
