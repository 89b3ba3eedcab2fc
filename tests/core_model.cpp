// Tests of the MLP and the training loop: finite-difference gradient checks of every layer and of
// the loss, the golden first losses of a fixed-seed run, model spec parsing and fingerprints.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/rng.hpp"
#include "core/checkpoint.hpp"
#include "core/model.hpp"
#include "core/trainer.hpp"
#include "tests/core_test_util.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;
using core::Mlp;
using core::test::random_vec;

namespace {

bool close(double a, double b, double abs_tol, double rel_tol) {
  return std::abs(a - b) <= abs_tol + rel_tol * std::max(std::abs(a), std::abs(b));
}

// What most trainer tests start from: the CPU backend, tiny_dataset(), an mlp:12-10-4 config and
// a metrics sink that writes nothing.
struct TinyRun {
  TinyRun() { cfg.model = "mlp:12-10-4"; }
  // Points cfg at a checkpoint folder that does not exist yet and is removed with the fixture.
  std::string use_checkpoints() {
    cfg.checkpoint_dir = ckpt.str();
    return ckpt.str();
  }
  // A fresh trainer on cfg, run to its end or, with stop set, stopped before its first step.
  core::TrainResult run_fresh(bool stop_at_once = false) {
    std::atomic<bool> stop{stop_at_once};
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    return t.run(stop);
  }
  // A fresh trainer on cfg, resumed from the checkpoint (which must load) and run to its end.
  core::TrainResult run_resumed() {
    std::atomic<bool> never{false};
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    REQUIRE(t.resume());
    return t.run(never);
  }
  std::unique_ptr<kernels::Backend> be = kernels::make_backend("cpu");
  const core::Dataset d = core::test::tiny_dataset();
  core::TrainConfig cfg;
  core::Metrics metrics{"", "test"};
  gt_test::TempDir ckpt{"gt-core-model-ckpt", /*create=*/false};
};

}  // namespace

TEST_CASE("model spec parsing", "[core]") {
  CHECK(core::parse_model_spec("mlp:784-256-256-10") == std::vector<int>{784, 256, 256, 10});
  CHECK(core::parse_model_spec("mlp:3-2") == std::vector<int>{3, 2});
  for (const char* bad : {"", "mlp:", "mlp:784", "mlp:784--10", "cnn:1-2", "mlp:0-10",
                          "mlp:784-10-", "mlp:99999999-1", "mlp:7a-3"})
    CHECK_THROWS_AS(core::parse_model_spec(bad), std::invalid_argument);
}

TEST_CASE("fingerprint depends on the layer list and shapes only", "[core]") {
  auto be = kernels::make_backend("cpu");
  Mlp a(*be, "mlp:784-256-10", 8), b(*be, "mlp:784-256-10", 64), c(*be, "mlp:784-128-10", 8),
      d(*be, "mlp:784-256-256-10", 8);
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.fingerprint() != c.fingerprint());
  CHECK(a.fingerprint() != d.fingerprint());
  CHECK(a.num_params() == 784 * 256 + 256 + 256 * 10 + 10);
}

TEST_CASE("finite-difference gradient check of every layer", "[core]") {
  auto be = kernels::make_backend("cpu");
  Mlp m(*be, "mlp:7-6-5-4", 5);
  CHECK(core::test::check_gradients(*be, m, {0, 3, 1, 2, 3}) == int(m.num_params()));
}

TEST_CASE("finite-difference gradient check of the softmax cross-entropy loss", "[core]") {
  auto be = kernels::make_backend("cpu");
  const int B = 4, C = 6;
  auto logits = random_vec(std::size_t(B) * C, 21, -3.f, 3.f);
  std::vector<std::int32_t> yh = {5, 0, 2, 2};
  kernels::DeviceBuffer<float> l(*be, logits.size()), dl(*be, logits.size());
  kernels::DeviceBuffer<std::int32_t> y(*be, B);
  be->upload(y.data(), yh.data(), yh.size() * 4);
  auto loss = [&](const std::vector<float>& v) {
    be->upload(l.data(), v.data(), v.size() * 4);
    return double(be->softmax_xent(l.data(), y.data(), dl.data(), B, C));
  };
  // The loss itself against a direct computation in double.
  double want = 0;
  for (int r = 0; r < B; ++r) {
    double mx = -1e30, s = 0;
    for (int c = 0; c < C; ++c) mx = std::max(mx, double(logits[r * C + c]));
    for (int c = 0; c < C; ++c) s += std::exp(logits[r * C + c] - mx);
    want += std::log(s) + mx - logits[r * C + yh[r]];
  }
  CHECK(loss(logits) == Approx(want / B).epsilon(1e-5));
  std::vector<float> g(logits.size());
  be->download(g.data(), dl.data(), g.size() * 4);
  const float eps = 1e-3f;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    auto p = logits, m = logits;
    p[i] += eps;
    m[i] -= eps;
    const double fd = (loss(p) - loss(m)) / (2.0 * eps);
    INFO("logit " << i);
    CHECK(close(fd, g[i], 1e-4, 1e-2));
  }
}

TEST_CASE("golden: first training losses of a fixed-seed run", "[core]") {
  // Recorded from this code (CPU backend): a change in initialisation, data order, forward,
  // backward or the optimizer moves these numbers.
  auto be = kernels::make_backend("cpu");
  const core::Dataset d =
      core::test::lit_dataset(96, 20, 3, 7, [](int f, int c) { return f % 3 == c; });
  core::TrainConfig cfg = core::test::golden_config("mlp:20-16-3");
  cfg.weight_decay = 0.0f;
  core::test::check_golden_losses(
      core::test::step_losses(*be, cfg, d, "core_model_golden_metrics.jsonl"),
      {1.178195, 1.187286, 1.028798, 1.134028, 0.9642264, 1.032126});
}

namespace {

using core::test::tiny_dataset;

// Records the hook calls and raises the stop flag after a given step.
struct StopAt : core::StepHook {
  std::int64_t stop_after;
  std::atomic<bool>* stop;
  std::vector<std::int64_t> steps;
  void between_steps(core::StepContext& ctx) override {
    steps.push_back(ctx.step);
    if (ctx.step == stop_after) stop->store(true);
  }
};

std::vector<float> params_of(core::Trainer& t, kernels::Backend& be) {
  std::vector<float> p(t.model().num_params());
  be.download(p.data(), t.model().params(), p.size() * 4);
  return p;
}

}  // namespace

TEST_CASE_METHOD(TinyRun,
                 "a run stopped mid-epoch and resumed from its checkpoint equals an unbroken run",
                 "[core]") {
  cfg.optimizer = GENERATE(core::Optimizer::Sgd, core::Optimizer::Qgm);
  cfg.batch = 16;  // 13 steps per epoch
  cfg.epochs = 3;
  cfg.seed = 5;

  std::atomic<bool> never{false};
  core::Trainer whole(*be, cfg, d, d, metrics, nullptr);
  const auto r_whole = whole.run(never);
  CHECK(r_whole.steps == 39);
  CHECK(r_whole.epochs_done == 3);
  const auto want = params_of(whole, *be);

  const std::string dir = use_checkpoints();
  std::atomic<bool> stop{false};
  StopAt hook;
  hook.stop_after = 17;  // in the middle of the second epoch
  hook.stop = &stop;
  {
    core::Trainer first(*be, cfg, d, d, metrics, &hook);
    CHECK_FALSE(first.resume());
    const auto r = first.run(stop);
    CHECK(r.stopped);
    CHECK(r.steps == 17);
  }
  // The hook saw every step, in order, once.
  REQUIRE(hook.steps.size() == 17);
  for (std::size_t i = 0; i < hook.steps.size(); ++i) CHECK(hook.steps[i] == std::int64_t(i + 1));

  std::atomic<bool> go{false};
  core::Trainer second(*be, cfg, d, d, metrics, nullptr);
  REQUIRE(second.resume());
  const auto r2 = second.run(go);
  CHECK(r2.steps == 39);
  CHECK(r2.epochs_done == 3);
  CHECK(params_of(second, *be) == want);
  // The same figures as the unbroken run: the best of the first epoch came back in the checkpoint.
  REQUIRE(r2.best_test_acc);
  CHECK(r2.best_test_acc == r_whole.best_test_acc);
  CHECK(r2.final_test_acc == r_whole.final_test_acc);
}

TEST_CASE_METHOD(TinyRun,
                 "a trainer resumed after its last step reports the model it loaded, not 0",
                 "[core]") {
  cfg.batch = 16;
  cfg.epochs = 2;
  const std::string dir = use_checkpoints();
  const auto r1 = run_fresh();
  REQUIRE(r1.final_test_acc);
  REQUIRE(r1.best_test_acc);

  const auto r2 = run_resumed();
  CHECK_FALSE(r2.stopped);
  CHECK(r2.steps == r1.steps);
  CHECK(r2.final_test_acc == r1.final_test_acc);
  CHECK(r2.final_test_loss == r1.final_test_loss);
  CHECK(r2.best_test_acc == r1.best_test_acc);

  SECTION("from a checkpoint without best_test_acc in its meta (older builds) best is unknown") {
    auto c = core::load_checkpoint(dir);
    auto meta = nlohmann::json::parse(c.meta);
    meta.erase("best_test_acc");
    c.meta = meta.dump();
    core::save_checkpoint(dir, c);
    const auto r3 = run_resumed();
    CHECK(r3.final_test_acc == r1.final_test_acc);
    CHECK_FALSE(r3.best_test_acc);
  }
}

TEST_CASE_METHOD(TinyRun, "a run stopped before its first evaluation reports no accuracy, not 0",
                 "[core]") {
  cfg.epochs = 1;
  const std::string dir = use_checkpoints();
  const auto r = run_fresh(/*stop_at_once=*/true);
  CHECK(r.stopped);
  CHECK_FALSE(r.final_test_acc);
  CHECK_FALSE(r.final_test_loss);
  CHECK_FALSE(r.best_test_acc);
  // Its checkpoint says no evaluation happened yet (null), which a resumed run keeps as known.
  const auto meta = nlohmann::json::parse(core::load_checkpoint(dir).meta);
  REQUIRE(meta.contains("best_test_acc"));
  CHECK(meta["best_test_acc"].is_null());
  const auto r2 = run_resumed();
  REQUIRE(r2.final_test_acc);
  CHECK(r2.best_test_acc == r2.final_test_acc);
}

TEST_CASE_METHOD(TinyRun, "a checkpoint of another model is refused on resume", "[core]") {
  cfg.epochs = 1;
  const std::string dir = use_checkpoints();
  std::atomic<bool> never{false};
  {
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    t.run(never);
  }
  cfg.model = "mlp:12-8-4";
  core::Trainer other(*be, cfg, d, d, metrics, nullptr);
  CHECK_THROWS_AS(other.resume(), core::CheckpointError);
}

TEST_CASE_METHOD(TinyRun, "trainer refuses data that does not fit the model", "[core]") {
  cfg.model = "mlp:10-8-4";
  CHECK_THROWS_AS(core::Trainer(*be, cfg, d, d, metrics, nullptr), std::invalid_argument);
  cfg.model = "mlp:12-8-2";
  CHECK_THROWS_AS(core::Trainer(*be, cfg, d, d, metrics, nullptr), std::invalid_argument);
}

TEST_CASE_METHOD(TinyRun, "a fixed number of steps per epoch cycles through a small shard",
                 "[core]") {
  // tiny_dataset(): 200 samples
  cfg.batch = 16;
  cfg.epochs = 2;
  cfg.steps_per_epoch = 30;  // 480 samples an epoch: more than two passes over the shard
  std::atomic<bool> never{false};
  StopAt hook;
  hook.stop_after = -1;
  hook.stop = &never;
  core::Trainer t(*be, cfg, d, d, metrics, &hook);
  const auto r = t.run(never);
  CHECK(r.steps == 60);
  CHECK(r.epochs_done == 2);
  CHECK(hook.steps.size() == 60);
}

namespace {
// Takes the trainer's state through the step context, as the catch-up server does, at one step.
struct TakeStateAt : core::StepHook {
  std::int64_t at;
  std::atomic<bool>* stop;
  std::vector<std::uint8_t> bytes;
  void between_steps(core::StepContext& ctx) override {
    if (ctx.step != at) return;
    REQUIRE(ctx.state != nullptr);
    bytes = core::encode_checkpoint(ctx.state->state());
    stop->store(true);
  }
};

// The state of a fresh run of r.cfg at step `at`, taken as the catch-up server takes it and sent
// as bytes (the run stops there).
core::Checkpoint state_at(TinyRun& r, std::int64_t at) {
  std::atomic<bool> stop{false};
  TakeStateAt hook;
  hook.at = at;
  hook.stop = &stop;
  core::Trainer server(*r.be, r.cfg, r.d, r.d, r.metrics, &hook);
  server.run(stop);
  REQUIRE_FALSE(hook.bytes.empty());
  return core::decode_checkpoint(hook.bytes.data(), hook.bytes.size());
}
}  // namespace

TEST_CASE_METHOD(
    TinyRun, "a trainer restored from another's state, sent as bytes, continues as that one would",
    "[core][catchup]") {
  cfg.optimizer = GENERATE(core::Optimizer::Sgd, core::Optimizer::Adam, core::Optimizer::Qgm);
  cfg.lr = cfg.optimizer == core::Optimizer::Adam ? 0.01f : 0.05f;
  cfg.batch = 16;  // 13 steps per epoch
  cfg.epochs = 3;
  cfg.seed = 5;
  std::atomic<bool> never{false};
  core::Trainer whole(*be, cfg, d, d, metrics, nullptr);
  whole.run(never);
  const auto want = params_of(whole, *be);

  const core::Checkpoint st = state_at(*this, 17);  // in the middle of the second epoch
  core::Trainer joiner(*be, cfg, d, d, metrics, nullptr);
  CHECK(st.step == 17);
  CHECK(st.epoch == 1);
  CHECK(st.opt_state.size() == joiner.optimizer_state_count());
  joiner.restore(st, "test state");
  const auto r = joiner.run(never);
  CHECK(r.steps == 39);
  CHECK(r.epochs_done == 3);
  CHECK(params_of(joiner, *be) == want);
}

TEST_CASE_METHOD(TinyRun, "restore refuses counters that do not fit this run and changes nothing",
                 "[core][catchup]") {
  cfg.batch = 16;  // 13 steps per epoch
  cfg.epochs = 3;
  core::Trainer t(*be, cfg, d, d, metrics, nullptr);
  const auto before = params_of(t, *be);
  core::Checkpoint good = t.state();
  good.params.assign(good.params.size(), 0.5f);

  auto refused = [&](core::Checkpoint c) {
    CHECK_THROWS_AS(t.restore(c, "test state"), core::CheckpointError);
    CHECK(params_of(t, *be) == before);
    CHECK(t.state().step == 0);
  };
  core::Checkpoint c = good;
  c.step = 5, c.epoch = 1;  // epoch 1 starts at step 13
  refused(c);
  c = good;
  c.step = 40, c.epoch = 3;  // past the 39 steps of this run
  refused(c);
  c = good;
  c.opt_state.push_back(c.opt_state[0]);  // adam's state for an sgd run
  refused(c);
  c = good;
  c.params.pop_back();
  refused(c);

  c = good;
  c.step = 20, c.epoch = 1, c.samples = 320;
  t.restore(c, "test state");
  const core::Checkpoint now = t.state();
  CHECK(now.step == 20);
  CHECK(now.epoch == 1);
  CHECK(now.samples == 320);
  CHECK(now.params == good.params);
}

TEST_CASE_METHOD(TinyRun,
                 "a neighbour's state from a longer run gives its weights and optimizer state, "
                 "and the joiner keeps its own schedule",
                 "[core][catchup]") {
  cfg.batch = 16;  // 13 steps per epoch
  cfg.epochs = 1;
  core::Trainer t(*be, cfg, d, d, metrics, nullptr);
  core::Checkpoint c = t.state();
  c.params.assign(c.params.size(), 0.25f);
  for (auto& v : c.opt_state) v.assign(v.size(), 0.125f);
  c.step = 40, c.epoch = 3, c.samples = 640;  // a run of more epochs than this one's 1
  // Our own checkpoint from another run is still refused.
  CHECK_THROWS_AS(t.restore(c, "own checkpoint"), core::CheckpointError);
  CHECK(t.restore(c, "state from peer", /*own=*/false) == false);
  const core::Checkpoint now = t.state();
  CHECK(now.params == c.params);
  CHECK(now.opt_state == c.opt_state);
  CHECK(now.step == 0);
  CHECK(now.epoch == 0);
  CHECK(now.samples == 0);
  std::atomic<bool> never{false};
  const auto r = t.run(never);
  CHECK(r.steps == 13);  // its own one epoch, not none
  CHECK(r.epochs_done == 1);
}

TEST_CASE("how often the loss is read back does not change training", "[core]") {
  // The trainer reads the accumulated loss only at metric lines and epoch ends: a run that reads
  // it every step and one that reads it every 5 steps train the same model.
  auto be = kernels::make_backend("cpu");
  const core::Dataset d = tiny_dataset();
  std::vector<std::vector<float>> params;
  std::vector<double> losses;
  for (int every : {1, 5, 0}) {
    core::TrainConfig cfg;
    cfg.model = "mlp:12-8-4";
    cfg.batch = 16;
    cfg.epochs = 2;
    cfg.log_every_steps = every;
    core::Metrics metrics("", "test");
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    double last_loss = -1.0;
    t.on_epoch = [&](int, std::optional<double> loss, const core::EvalResult&,
                     std::optional<double>) { last_loss = loss.value_or(-2.0); };
    std::atomic<bool> stop{false};
    t.run(stop);
    params.push_back(params_of(t, *be));
    losses.push_back(last_loss);
  }
  REQUIRE(losses[0] > 0.0);
  REQUIRE(params[1] == params[0]);
  REQUIRE(params[2] == params[0]);
  REQUIRE(losses[1] == losses[0]);
  REQUIRE(losses[2] == losses[0]);
}

TEST_CASE("optimizer and schedule names read and write through one table", "[core]") {
  core::Optimizer o = core::Optimizer::Sgd;
  for (auto want : {core::Optimizer::Sgd, core::Optimizer::Adam, core::Optimizer::Qgm}) {
    core::from_string(core::to_string(want), o);
    CHECK(o == want);
  }
  core::Schedule s = core::Schedule::Cosine;
  core::from_string("constant", s);
  CHECK(s == core::Schedule::Constant);
  CHECK(core::to_string(core::Schedule::Cosine) == "cosine");
  CHECK_THROWS_MATCHES(core::from_string("lamb", o), std::invalid_argument,
                       gt_test::WhatContains("--optimizer must be sgd, adam or qgm, got 'lamb'"));
  CHECK_THROWS_MATCHES(core::from_string("", s), std::invalid_argument,
                       gt_test::WhatContains("--schedule must be cosine or constant"));
  CHECK(o == core::Optimizer::Qgm);  // unchanged by the refusal
}

TEST_CASE("logit prior: log max(p, 1/C), one value per class, nothing for an IID shard to move",
          "[core]") {
  const std::vector<float> skew = core::logit_prior({0, 0, 0, 1, 7, -1}, 4);  // 7, -1: no class
  REQUIRE(skew.size() == 4);
  CHECK(skew[0] == Approx(std::log(3.0 / 6.0)));
  CHECK(skew[1] == Approx(std::log(0.25)));  // 1/6 is under a uniform share: floored
  CHECK(skew[2] == Approx(std::log(0.25)));  // absent
  CHECK(skew[3] == Approx(std::log(0.25)));
  const std::vector<float> iid = core::logit_prior({0, 1, 2, 3, 3, 2, 1, 0}, 4);
  for (float v : iid) CHECK(v == Approx(std::log(0.25)));
  CHECK(core::logit_prior({}, 3) == std::vector<float>(3, 0.0f));
}

TEST_CASE("a training logit offset changes the training loss and its gradient, not forward()",
          "[core]") {
  auto be = kernels::make_backend("cpu");
  const int B = 5, C = 4;
  Mlp m(*be, "mlp:7-6-4", B);
  m.init(3);
  const auto xh = random_vec(std::size_t(B) * 7, 5, -1.f, 1.f);
  const std::vector<std::int32_t> yh = {0, 0, 1, 3, 0};
  kernels::DeviceBuffer<float> x(*be, xh.size());
  kernels::DeviceBuffer<std::int32_t> y(*be, B);
  be->upload(x.data(), xh.data(), xh.size() * 4);
  be->upload(y.data(), yh.data(), yh.size() * 4);
  std::vector<float> z(std::size_t(B) * C);
  be->download(z.data(), m.forward(x.data(), B), z.size() * 4);
  const std::vector<float> off = {-0.2f, -1.5f, -1.5f, -3.0f};
  m.set_train_logit_offset(off);
  const float loss = m.forward_backward(x.data(), y.data(), B);
  // The loss and the last layer's bias gradient of softmax(z + off), in double.
  double want = 0;
  std::vector<double> db(C, 0.0);
  for (int r = 0; r < B; ++r) {
    double mx = -1e30, s = 0;
    for (int c = 0; c < C; ++c) mx = std::max(mx, double(z[r * C + c] + off[c]));
    for (int c = 0; c < C; ++c) s += std::exp(z[r * C + c] + off[c] - mx);
    want += std::log(s) + mx - (z[r * C + yh[r]] + off[yh[r]]);
    for (int c = 0; c < C; ++c)
      db[c] += (std::exp(z[r * C + c] + off[c] - mx) / s - (c == yh[r] ? 1.0 : 0.0)) / B;
  }
  CHECK(loss == Approx(want / B).epsilon(1e-5));
  const core::Layer& last = m.layers().back();
  std::vector<float> g(C);
  be->download(g.data(), m.grads() + last.b_offset, C * 4);
  for (int c = 0; c < C; ++c) CHECK(g[c] == Approx(db[c]).margin(1e-5));
  // forward() (evaluation) still gives z itself.
  std::vector<float> z2(z.size());
  be->download(z2.data(), m.forward(x.data(), B), z2.size() * 4);
  CHECK(z2 == z);
  CHECK_THROWS_AS(m.set_train_logit_offset({1.0f, 2.0f}), std::invalid_argument);
  m.set_train_logit_offset({});
  CHECK(m.forward_backward(x.data(), y.data(), B) != Approx(loss));
}

namespace {
// Asks run() to hand back after one given step (StepContext::hand_back), and counts the calls.
struct HandBackAt : core::StepHook {
  std::int64_t at = -1;
  std::vector<std::int64_t> steps;
  void between_steps(core::StepContext& ctx) override {
    steps.push_back(ctx.step);
    if (ctx.step == at) ctx.hand_back = true;
  }
};
}  // namespace

TEST_CASE_METHOD(TinyRun,
                 "a hook that hands back ends run() after that step, and run() again goes on, or from a "
                 "state restored mid-epoch",
                 "[core][catchup]") {
  cfg.batch = 16;  // 13 steps per epoch
  cfg.epochs = 3;
  cfg.seed = 5;
  std::atomic<bool> never{false};
  core::Trainer whole(*be, cfg, d, d, metrics, nullptr);
  const auto r_whole = whole.run(never);
  const auto want = params_of(whole, *be);

  HandBackAt hook;
  hook.at = 5;  // in the first epoch
  core::Trainer t(*be, cfg, d, d, metrics, &hook);
  const auto r1 = t.run(never);
  CHECK(r1.handed_back);
  CHECK_FALSE(r1.stopped);
  CHECK(r1.steps == 5);
  CHECK(t.step() == 5);

  SECTION("run() again trains on as if nothing happened") {
    const auto r2 = t.run(never);
    CHECK_FALSE(r2.handed_back);
    CHECK(r2.steps == 39);
    CHECK(params_of(t, *be) == want);
    CHECK(r2.final_test_acc == r_whole.final_test_acc);
    REQUIRE(hook.steps.size() == 39);  // each step's hook once
  }
  SECTION("a state restored mid-run (a peer left behind catching up) continues as that one would") {
    const core::Checkpoint st = state_at(*this, 17);  // in the middle of the second epoch
    REQUIRE(t.restore(st, "test state", /*own=*/false));
    CHECK(t.step() == 17);
    const auto r2 = t.run(never);
    CHECK_FALSE(r2.handed_back);
    CHECK(r2.steps == 39);
    CHECK(r2.epochs_done == 3);
    CHECK(params_of(t, *be) == want);
  }
  SECTION("restored at the end of the run, run() again only evaluates") {
    core::Checkpoint st = whole.state();
    REQUIRE(t.restore(st, "test state", /*own=*/false));
    const auto r2 = t.run(never);
    CHECK(r2.steps == 39);
    CHECK(r2.final_test_acc == r_whole.final_test_acc);
    CHECK(hook.steps.size() == 5);  // no step taken
  }
}
