// A peer's communication state across restarts (see comm_state.hpp).
#include "gossip/node/comm_state.hpp"

#include <spdlog/spdlog.h>

#include "core/checkpoint.hpp"

namespace gossiptrain::gossip {

CommState::CommState(std::string dir, std::uint64_t fingerprint, Averager& averager,
                     std::unique_ptr<OuterStep> outer)
    : dir_(dir.empty() ? std::string() : dir + "/comm_state"),
      fingerprint_(fingerprint),
      averager_(averager),
      outer_(std::move(outer)) {}

void CommState::restore(const core::StepContext& ctx) {
  if (dir_.empty() || !core::checkpoint_exists(dir_)) return;
  try {
    core::Checkpoint c = core::load_checkpoint(dir_);
    // 3 entries: written before the slow link wire's residual was kept.
    if (c.fingerprint != fingerprint_ || (c.opt_state.size() != 3 && c.opt_state.size() != 4))
      throw core::CheckpointError("another model or layout");
    bool outer_ok = true;
    if (outer_ && !c.opt_state[0].empty())
      outer_ok = outer_->restore({std::move(c.opt_state[0]), std::move(c.opt_state[1])},
                                 ctx.n_params);
    if (!c.opt_state[2].empty()) averager_.set_residual(std::move(c.opt_state[2]));
    if (c.opt_state.size() == 4 && !c.opt_state[3].empty())
      averager_.set_slow_residual(std::move(c.opt_state[3]));
    restored_ = outer_ok;
    spdlog::info("communication state restored from {} (step {}{})", dir_, c.step,
                 outer_ok ? "" : "; its outer state does not fit this model, not used");
  } catch (const core::CheckpointError& e) {
    spdlog::warn("communication state in {} not used: {}", dir_, e.what());
  }
}

void CommState::save(const core::StepContext& ctx) {
  if (dir_.empty()) return;
  core::Checkpoint c;
  c.fingerprint = fingerprint_;
  c.step = ctx.step;
  c.epoch = ctx.epoch;
  c.samples = ctx.samples;
  std::vector<std::vector<float>> outer = outer_ ? outer_->save() : std::vector<std::vector<float>>{};
  outer.resize(2);
  c.opt_state = {std::move(outer[0]), std::move(outer[1]), averager_.residual(),
                 averager_.slow_residual()};
  core::save_checkpoint(dir_, c);
}

void CommState::before_averager(core::StepContext& ctx) {
  // Without an exchange in flight or a committed mix pending, this boundary applies no mix (one
  // the averager starts now commits later), so nothing is copied.
  if (outer_ && averager_.in_exchange()) outer_->before_mix(ctx);
}

void CommState::between_steps(core::StepContext& ctx) {
  if (first_) {
    first_ = false;
    epoch_ = ctx.epoch;
    restore(ctx);
  }
  if (outer_) {
    outer_->mixed(ctx);
    outer_->between_steps(ctx);
  }
  const bool epoch_ended = ctx.epoch != epoch_;
  epoch_ = ctx.epoch;
  if ((epoch_ended || (ctx.training_done && !saved_done_)) && !dir_.empty()) {
    saved_done_ = ctx.training_done;
    try {
      save(ctx);
    } catch (const core::CheckpointError& e) {
      spdlog::warn("communication state not saved: {}", e.what());
    }
  }
}

}  // namespace gossiptrain::gossip
