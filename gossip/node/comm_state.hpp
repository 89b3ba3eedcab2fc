// The communication state of a peer that is not in the trainer's checkpoint: the outer
// optimizer's anchor and momentum (outer_step.hpp) and error feedback's residual (the averager's
// snapshot buffers, the main wire's and the slow link wire's). Kept in
// CHECKPOINT_DIR/comm_state/checkpoint.bin, the checkpoint format with
// opt_state = {anchor, momentum, residual, slow link residual} (each empty when off; a file of
// three, written before the fourth was kept, is read with the fourth empty), written at every epoch end and
// when training ends, and read back before the first step of a restarted peer.
#pragma once

#include <memory>
#include <string>

#include "core/step_hook.hpp"
#include "gossip/exchange/averager.hpp"
#include "gossip/node/outer_step.hpp"

namespace gossiptrain::gossip {

class CommState {
 public:
  // outer may be null (no outer optimizer); dir empty: nothing saved or restored.
  CommState(std::string dir, std::uint64_t fingerprint, Averager& averager,
            std::unique_ptr<OuterStep> outer);
  // Training thread, before the averager's between_steps: when it may apply a mix (it is in an
  // exchange), the outer step keeps x to add the mix to its anchor.
  void before_averager(core::StepContext& ctx);
  // Training thread, after the averager's between_steps: restores at the first call, takes the
  // outer step when one is due, saves when an epoch ended or training is done.
  void between_steps(core::StepContext& ctx);
  // Writes the state now (training thread). Throws core::CheckpointError.
  void save(const core::StepContext& ctx);
  bool restored() const { return restored_; }
  const OuterStep* outer() const { return outer_.get(); }

 private:
  void restore(const core::StepContext& ctx);
  std::string dir_;
  std::uint64_t fingerprint_;
  Averager& averager_;
  std::unique_ptr<OuterStep> outer_;
  bool first_ = true, restored_ = false, saved_done_ = false;
  int epoch_ = -1;
};

}  // namespace gossiptrain::gossip
