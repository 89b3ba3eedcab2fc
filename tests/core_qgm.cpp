// Tests of quasi-global momentum (--optimizer qgm): the kernel against its definition, the
// momentum built from the model's change across a step and a mix, and refusals of another
// optimizer's state. Its checkpoint restart and catch-up are in core_model.cpp (GENERATE).
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <vector>

#include "base/rng.hpp"
#include "core/checkpoint.hpp"
#include "core/trainer.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "tests/core_test_util.hpp"

using namespace gossiptrain;

namespace {

std::vector<float> rv(std::size_t n, std::uint64_t seed) {
  base::SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(2 * r.uniform() - 1);
  return v;
}

}  // namespace

TEST_CASE("cpu qgm step matches its definition", "[core][qgm]") {
  kernels::CpuBackend be;
  const std::size_t n = 37;  // a vector tail
  auto w = rv(n, 1), g = rv(n, 2), m = rv(n, 3), xp = rv(n, 4);
  const float lr = 0.05f, lr_prev = 0.06f, beta = 0.9f, mu = 0.8f, wd = 1e-3f;
  auto w2 = w, m2 = m, xp2 = xp;
  be.qgm(w2.data(), g.data(), m2.data(), xp2.data(), n, lr, 1.0f / lr_prev, beta, mu, wd);
  for (std::size_t i = 0; i < n; ++i) {
    const double mk = mu * double(m[i]) + (1 - mu) * (double(xp[i]) - w[i]) / lr_prev;
    CHECK(m2[i] == Approx(mk).epsilon(1e-5).margin(1e-6));
    CHECK(xp2[i] == w[i]);
    CHECK(w2[i] == Approx(w[i] - lr * (g[i] + wd * w[i] + beta * mk)).epsilon(1e-5).margin(1e-6));
  }
  // The first step: mu = 1 and no previous lr leave the momentum as it is.
  auto m3 = m, w3 = w, xp3 = xp;
  be.qgm(w3.data(), g.data(), m3.data(), xp3.data(), n, lr, 0.0f, beta, 1.0f, wd);
  CHECK(m3 == m);
}

namespace {

// After every step: records the trainer's state, and after step mix_at mixes the parameters
// halfway towards a fixed "partner" vector, as an exchange would.
struct MixAndRecord : core::StepHook {
  std::int64_t mix_at = 0;
  std::vector<float> partner;
  std::vector<core::Checkpoint> states;  // after each step, before any mix
  std::vector<float> mixed;              // the parameters right after the mix
  void between_steps(core::StepContext& ctx) override {
    states.push_back(ctx.state->state());
    if (ctx.step != mix_at) return;
    kernels::DeviceBuffer<float> r(ctx.backend, ctx.n_params);
    ctx.backend.upload(r.data(), partner.data(), partner.size() * 4);
    const auto& s = states.back().params;
    kernels::DeviceBuffer<float> sb(ctx.backend, ctx.n_params);
    ctx.backend.upload(sb.data(), s.data(), s.size() * 4);
    ctx.backend.mix(ctx.params, r.data(), sb.data(), ctx.n_params, 0.5f);
    mixed.resize(ctx.n_params);
    ctx.backend.download(mixed.data(), ctx.params, mixed.size() * 4);
  }
};

}  // namespace

TEST_CASE("qgm momentum is built from the model's change, the mix included", "[core][qgm]") {
  auto be = kernels::make_backend("cpu");
  const auto d = core::test::tiny_dataset();
  core::TrainConfig cfg;
  cfg.model = "mlp:12-10-4";
  cfg.optimizer = core::Optimizer::Qgm;
  cfg.batch = 16;
  cfg.epochs = 1;
  cfg.lr = 0.05f;
  cfg.momentum = 0.9f;
  core::Metrics metrics("", "test");
  MixAndRecord hook;
  hook.mix_at = 5;
  core::Trainer t(*be, cfg, d, d, metrics, &hook);
  hook.partner = rv(t.model().num_params(), 77);
  std::atomic<bool> never{false};
  t.run(never);
  REQUIRE(hook.states.size() == 13);
  // states[k] is after step k+1. Step 6 starts from the mixed parameters: its x_prev is exactly
  // them, and its momentum took in (x_prev of step 5 - the mixed x) / lr of step 5.
  const auto& s5 = hook.states[4];
  const auto& s6 = hook.states[5];
  REQUIRE(s6.opt_state.size() == 2);
  CHECK(s6.opt_state[1] == hook.mixed);
  const std::int64_t total = 13;
  const double lr5 =
      0.05 * 0.5 * (1 + std::cos(std::numbers::pi * 4.0 / total));  // step 5 is index 4
  double moved = 0;
  for (std::size_t i = 0; i < hook.mixed.size(); ++i) {
    const double want =
        0.9 * s5.opt_state[0][i] + 0.1 * (double(s5.opt_state[1][i]) - hook.mixed[i]) / lr5;
    INFO("param " << i);
    CHECK(s6.opt_state[0][i] == Approx(want).epsilon(1e-4).margin(1e-5));
    moved += std::abs(double(hook.mixed[i]) - s5.params[i]);
  }
  CHECK(moved > 1.0);  // the mix really moved the model (so the check above is not vacuous)
}

TEST_CASE("a qgm trainer refuses an adam state (same vector count) and an sgd one", "[core][qgm]") {
  auto be = kernels::make_backend("cpu");
  const auto d = core::test::tiny_dataset();
  core::TrainConfig cfg;
  cfg.model = "mlp:12-10-4";
  core::Metrics metrics("", "test");
  cfg.optimizer = core::Optimizer::Adam;
  core::Trainer adam(*be, cfg, d, d, metrics, nullptr);
  cfg.optimizer = core::Optimizer::Sgd;
  core::Trainer sgd(*be, cfg, d, d, metrics, nullptr);
  cfg.optimizer = core::Optimizer::Qgm;
  core::Trainer qgm(*be, cfg, d, d, metrics, nullptr);
  CHECK(qgm.optimizer_state_count() == 2);
  CHECK_THROWS_AS(qgm.restore(adam.state(), "adam state"), core::CheckpointError);
  CHECK_THROWS_AS(qgm.restore(sgd.state(), "sgd state"), core::CheckpointError);
  CHECK_NOTHROW(qgm.restore(qgm.state(), "own state"));
}
