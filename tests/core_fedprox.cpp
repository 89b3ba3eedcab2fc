// Tests of FedProx's proximal term (Trainer::set_proximal): one SGD step with it moves the weights
// by exactly -lr * mu * (w - anchor) more than the same step without it.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "base/rng.hpp"
#include "core/trainer.hpp"
#include "kernels/backend.hpp"
#include "tests/core_test_util.hpp"

using namespace gossiptrain;

TEST_CASE("fedprox: the proximal term adds mu (w - anchor) to the gradient", "[core]") {
  auto be = kernels::make_backend("cpu");
  const auto d = core::test::tiny_dataset();
  core::TrainConfig cfg;
  cfg.model = "mlp:12-10-4";
  cfg.batch = 16;
  cfg.epochs = 1;
  cfg.lr = 0.05f;
  cfg.momentum = 0.0f;  // the step is then w -= lr * g
  cfg.schedule = core::Schedule::Constant;
  cfg.eval_each_epoch = false;
  core::Metrics metrics("", "test");
  core::Trainer plain(*be, cfg, d, d, metrics, nullptr);
  core::Trainer prox(*be, cfg, d, d, metrics, nullptr);
  const std::vector<float> w0 = prox.state().params;
  REQUIRE(w0 == plain.state().params);  // same seed, same start
  std::vector<float> anchor(w0.size());
  base::SplitMix64 r(9);
  for (auto& a : anchor) a = float(2 * r.uniform() - 1);
  const float mu = 0.5f;
  prox.set_proximal(anchor, mu);
  plain.set_proximal(anchor, 0.0f);  // mu 0: off
  core::TrainResult res;
  plain.train_step(res);
  prox.train_step(res);
  const auto a = plain.state().params, b = prox.state().params;
  double moved = 0.0;
  for (std::size_t i = 0; i < w0.size(); ++i) {
    const double want = -double(cfg.lr) * mu * (double(w0[i]) - anchor[i]);
    INFO("param " << i);
    CHECK(double(b[i]) - a[i] == Approx(want).margin(1e-6));
    moved += std::abs(want);
  }
  CHECK(moved > 0.1);  // the anchor is far enough for the check to mean something
  CHECK_THROWS_AS(prox.set_proximal(std::vector<float>(3), mu), std::invalid_argument);
}
