// The outer optimizer over gossip (see outer_step.hpp), through the backend's ops only.
#include "gossip/node/outer_step.hpp"

#include <stdexcept>

namespace gossiptrain::gossip {

OuterStep::OuterStep(OuterConfig cfg, kernels::Backend& be) : cfg_(cfg), be_(be) {
  if (cfg_.every < 0) throw std::invalid_argument("outer step: every must be >= 0");
  if (!(cfg_.lr > 0.0f) || cfg_.lr > 10.0f)
    throw std::invalid_argument("outer step: lr must be in (0, 10]");
  if (!(cfg_.momentum >= 0.0f && cfg_.momentum < 1.0f))
    throw std::invalid_argument("outer step: momentum must be in [0, 1)");
}

void OuterStep::allocate(std::size_t n) {
  if (n_ == n) return;
  n_ = n;
  anchor_ = kernels::DeviceBuffer<float>(be_, n);
  m_ = kernels::DeviceBuffer<float>(be_, n);
  g_ = kernels::DeviceBuffer<float>(be_, n);
  zero_ = kernels::DeviceBuffer<float>(be_, n);
  before_ = kernels::DeviceBuffer<float>(be_, n);
  be_.fill(m_.data(), n, 0.0f);
  be_.fill(zero_.data(), n, 0.0f);
}

void OuterStep::between_steps(core::StepContext& ctx) {
  if (cfg_.every <= 0 || ctx.training_done) return;
  allocate(ctx.n_params);
  if (!have_anchor_) {
    be_.copy(anchor_.data(), ctx.params, n_ * sizeof(float));
    have_anchor_ = true;
    last_step_ = ctx.step;
    return;
  }
  if (ctx.step == last_step_ || ctx.step % cfg_.every != 0) return;
  last_step_ = ctx.step;
  ++steps_;
  // g = anchor - x
  be_.copy(g_.data(), anchor_.data(), n_ * sizeof(float));
  be_.mix(g_.data(), zero_.data(), ctx.params, n_, 1.0f);
  // m = mu m + g; anchor -= lr mu m   (sgd_momentum: v = mu v + g; w -= lr' v, lr' = lr mu)
  if (cfg_.momentum > 0.0f)
    be_.sgd_momentum(anchor_.data(), g_.data(), m_.data(), n_, cfg_.lr * cfg_.momentum,
                     cfg_.momentum, 0.0f);
  // anchor -= lr g   (mix: x += w (r - s) with r = 0, s = g)
  be_.mix(anchor_.data(), zero_.data(), g_.data(), n_, cfg_.lr);
  be_.copy(ctx.params, anchor_.data(), n_ * sizeof(float));
}

void OuterStep::before_mix(const core::StepContext& ctx) {
  before_taken_ = false;
  if (cfg_.every <= 0 || !have_anchor_ || ctx.n_params != n_) return;
  be_.copy(before_.data(), ctx.params, n_ * sizeof(float));
  before_taken_ = true;
}

void OuterStep::mixed(const core::StepContext& ctx) {
  if (!before_taken_ || ctx.n_params != n_) return;
  before_taken_ = false;
  be_.mix(anchor_.data(), ctx.params, before_.data(), n_, 1.0f);  // anchor += x - before
}

std::vector<std::vector<float>> OuterStep::save() const {
  if (!have_anchor_) return {};
  std::vector<std::vector<float>> s(2, std::vector<float>(n_));
  be_.download(s[0].data(), anchor_.data(), n_ * sizeof(float));
  be_.download(s[1].data(), m_.data(), n_ * sizeof(float));
  return s;
}

bool OuterStep::restore(const std::vector<std::vector<float>>& state, std::size_t n_params) {
  if (state.size() != 2 || state[0].size() != n_params || state[1].size() != n_params) return false;
  allocate(n_params);
  be_.upload(anchor_.data(), state[0].data(), n_ * sizeof(float));
  be_.upload(m_.data(), state[1].data(), n_ * sizeof(float));
  have_anchor_ = true;
  return true;
}

}  // namespace gossiptrain::gossip
