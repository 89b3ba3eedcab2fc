// The outer optimizer over gossip (issue 34): every H steps one Nesterov step on the
// pseudo-gradient, matched against a reference computed in double; and the communication state
// (outer anchor and momentum, error feedback's residual) restored from its checkpoint.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "gossip/node/comm_state.hpp"
#include "gossip/node/outer_step.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "tests/gossip_averager_harness.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {

std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> N(0.0f, scale);
  std::vector<float> v(n);
  for (auto& f : v) f = N(rng);
  return v;
}

core::StepContext context(kernels::Backend& be, std::vector<float>& x, std::int64_t step,
                          int epoch) {
  return core::StepContext{be, x.data(), x.size(), step, step * 32, 1000, epoch, false};
}

}  // namespace

TEST_CASE("the outer step matches a reference Nesterov step on the local pseudo-gradient, mixes added outside the momentum",
          "[gossip]") {
  const int H = 3;
  const double lr = 0.7, mu = 0.9;
  const std::size_t n = 1000;
  kernels::CpuBackend be;
  OuterStep outer({H, float(lr), float(mu)}, be);
  std::vector<float> x = gaussian(n, 1);
  std::vector<double> anchor(x.begin(), x.end()), m(n, 0.0), ref(x.begin(), x.end());
  for (std::int64_t step = 0; step <= 4 * H; ++step) {
    if (step > 0) {  // a local step: every peer's x moves (training, mixes)
      const auto d = gaussian(n, 100 + step, 0.01f);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] += d[i];
        ref[i] += d[i];
      }
    }
    auto ctx = context(be, x, step, 0);
    if (step % 2 == 1) {  // a pairwise mix at this boundary: it goes to the anchor as well
      outer.before_mix(ctx);
      const auto d = gaussian(n, 500 + step, 0.05f);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] += d[i];
        ref[i] += d[i];
        anchor[i] += d[i];
      }
      outer.mixed(ctx);
    }
    outer.between_steps(ctx);
    if (step > 0 && step % H == 0) {
      for (std::size_t i = 0; i < n; ++i) {
        const double g = anchor[i] - ref[i];
        m[i] = mu * m[i] + g;
        anchor[i] -= lr * (g + mu * m[i]);
        ref[i] = anchor[i];
      }
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(x[i]) - ref[i]));
    INFO("step " << step);
    CHECK(worst < 1e-5);
  }
  CHECK(outer.outer_steps() == 4);
  // A repeated call at the same step takes no second step.
  auto ctx = context(be, x, 4 * H, 0);
  const auto before = x;
  outer.between_steps(ctx);
  CHECK(x == before);
  // lr 1 and momentum 0: the outer step leaves x where the local steps took it.
  OuterStep plain({H, 1.0f, 0.0f}, be);
  std::vector<float> y = gaussian(n, 2);
  auto c0 = context(be, y, 0, 0);
  plain.between_steps(c0);
  for (auto& v : y) v += 0.5f;
  const auto moved = y;
  auto c1 = context(be, y, H, 0);
  plain.between_steps(c1);
  for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == Approx(moved[i]).margin(1e-6));
  CHECK_THROWS_AS(OuterStep({H, 0.0f, 0.5f}, be), std::invalid_argument);
  CHECK_THROWS_AS(OuterStep({H, 0.7f, 1.0f}, be), std::invalid_argument);
}

TEST_CASE("a checkpoint restores the outer state and the error feedback residual", "[gossip]") {
  gt_test::TempDir dir("gt-comm-state");
  AveragerConfig cfg = base_config();
  cfg.wire = WireFormat::Int8;
  cfg.error_feedback = true;
  const std::size_t d = 700;
  Cluster c(2, d, cfg, 71);
  c.train_then_settle(Millis(400), 20, 3);  // exchanges: the residuals are not zero
  REQUIRE(c[0].avg->stats().ok > 0);
  const std::vector<float> residual = c[0].avg->residual();
  REQUIRE(residual.size() == d);
  double r2 = 0;
  for (float v : residual) r2 += double(v) * v;
  REQUIRE(r2 > 0);

  const int H = 2;
  std::vector<float> x = c[0].values(c.be);
  std::vector<std::vector<float>> saved;
  {
    CommState state(dir.path.string(), 0xfeedbeef, *c[0].avg,
                    std::make_unique<OuterStep>(OuterConfig{H, 0.7f, 0.9f}, c.be));
    for (std::int64_t step = 0; step <= 2 * H; ++step) {
      for (auto& v : x) v -= 0.01f;
      auto ctx = context(c.be, x, step, 0);
      state.between_steps(ctx);
    }
    REQUIRE(state.outer()->outer_steps() == 2);
    saved = state.outer()->save();
    auto end = context(c.be, x, 2 * H + 1, 1);  // the epoch ended: the state is written
    state.between_steps(end);
  }
  REQUIRE(std::filesystem::exists(dir.path / "comm_state" / "checkpoint.bin"));

  // A restarted peer: a fresh averager and outer step, the same folder.
  Cluster fresh(2, d, cfg, 72);
  std::vector<float> x2 = fresh[0].values(fresh.be);
  auto ctx = context(fresh.be, x2, 2 * H + 1, 1);
  fresh[0].avg->between_steps(ctx);
  CHECK(fresh[0].avg->residual() != residual);
  CommState again(dir.path.string(), 0xfeedbeef, *fresh[0].avg,
                  std::make_unique<OuterStep>(OuterConfig{H, 0.7f, 0.9f}, fresh.be));
  again.between_steps(ctx);
  CHECK(again.restored());
  CHECK(fresh[0].avg->residual() == residual);
  REQUIRE(saved.size() == 2);
  CHECK(again.outer()->save() == saved);

  // Another model's state (another fingerprint) is not used.
  Cluster other(2, d, cfg, 73);
  std::vector<float> x3 = other[0].values(other.be);
  auto c3 = context(other.be, x3, 0, 0);
  other[0].avg->between_steps(c3);
  CommState foreign(dir.path.string(), 0x1234, *other[0].avg,
                    std::make_unique<OuterStep>(OuterConfig{H, 0.7f, 0.9f}, other.be));
  foreign.between_steps(c3);
  CHECK_FALSE(foreign.restored());
  CHECK(other[0].avg->residual() != residual);
}
