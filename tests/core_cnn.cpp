// Tests of the convolutional model: spec parsing and sizes, fingerprints, finite-difference
// gradient checks of every layer (convolution, max-pool, dense), chunked im2col, and the golden
// first losses of a fixed-seed run through the trainer.
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
#include "core/model.hpp"
#include "core/trainer.hpp"
#include "tests/core_test_util.hpp"

using namespace gossiptrain;
using core::LayerKind;
using core::Model;
using core::test::random_vec;

TEST_CASE("cnn spec parsing: the FedAvg CNN and its sizes", "[core][cnn]") {
  const auto layers = core::parse_model_layers("cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10");
  REQUIRE(layers.size() == 6);
  CHECK(layers[0].kind == LayerKind::Conv);
  CHECK(layers[0].out_h == 28);
  CHECK(layers[0].pad == 2);
  CHECK(layers[0].in == 25);
  CHECK(layers[1].kind == LayerKind::Pool);
  CHECK(layers[1].out_h == 14);
  CHECK(layers[2].in == 25 * 32);
  CHECK(layers[3].out_size() == 7 * 7 * 64);
  CHECK(layers[4].in == 3136);
  CHECK(layers[5].act == kernels::Act::None);
  // 1,663,370 parameters, as the FedAvg paper states for this network.
  CHECK(layers[5].b_offset + layers[5].out == 1663370);
  CHECK(core::parse_model_spec("cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10") ==
        std::vector<int>{784, 25088, 6272, 12544, 3136, 512, 10});
  CHECK(core::parse_model_spec("cnn:8x8x3-c4k3-p2-10") == std::vector<int>{192, 256, 64, 10});
  CHECK(core::parse_model_spec("cnn:4x4x1-10") == std::vector<int>{16, 10});
  for (const char* bad :
       {"cnn:", "cnn:28x28-10", "cnn:28x28x1", "cnn:28x28x1-", "cnn:28x28x1-c32k5", "cnn:0x28x1-10",
        "cnn:28x28x1-c32-10", "cnn:28x28x1-c0k5-10", "cnn:28x28x1-c32k0-10", "cnn:28x28x1-p1-10",
        "cnn:28x28x1-p29-10", "cnn:28x28x1-f10-c8k3-10", "cnn:28x28x1-f10-p2-10",
        "cnn:28x28x1-x5-10", "cnn:28x28x1-c8k5-p2-10a", "cnn:1x1x1-c4k4-10", "cnn:28x28x1-c8k16-10",
        "cnn:4096x4096x4096-10", "cnn:28x28x1--10"}) {
    INFO(bad);
    CHECK_THROWS_AS(core::parse_model_spec(bad), std::invalid_argument);
  }
}

// One count per spec: what the launcher and the buffer pool size from is the trainer's model's.
TEST_CASE("model_param_count of a spec is the built model's parameter count", "[core][cnn]") {
  auto be = kernels::make_backend("cpu");
  for (const char* spec : {"cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10", "cnn:8x8x3-c4k3-p2-10",
                           "cnn:4x4x1-10", "mlp:784-256-256-10", "mlp:3-2"}) {
    INFO(spec);
    const Model m(*be, spec, 1);
    CHECK(core::model_param_count(spec) == m.num_params());
    CHECK(core::param_count(core::parse_model_layers(spec)) == m.num_params());
  }
  // The CNN's count is its layers', far below what its layer sizes read as an MLP's would give.
  CHECK(core::model_param_count("cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10") == 1663370);
  CHECK_THROWS_AS(core::model_param_count("cnn:28x28x1"), std::invalid_argument);
}

TEST_CASE("cnn fingerprints differ by shape, the mlp fingerprint is the one of older builds",
          "[core][cnn]") {
  auto be = kernels::make_backend("cpu");
  Model a(*be, "cnn:12x12x1-c4k3-p2-10", 4), b(*be, "cnn:12x12x1-c4k3-p2-10", 32),
      c(*be, "cnn:12x12x1-c5k3-p2-10", 4), d(*be, "cnn:12x12x1-c4k5-p2-10", 4),
      e(*be, "cnn:12x12x1-c4k3-p3-10", 4), f(*be, "cnn:12x12x1-c4k3-p2-f10-10", 4),
      g(*be, "mlp:144-10", 4), h(*be, "cnn:144x1x1-10", 4);
  CHECK(a.fingerprint() == b.fingerprint());
  for (auto* o : {&c, &d, &e, &f, &g, &h}) CHECK(a.fingerprint() != o->fingerprint());
  CHECK(g.fingerprint() != h.fingerprint());  // the same dense layer, another input geometry
  // The MLP keeps its earlier fingerprint, so checkpoints and peers of older builds still match.
  Model m(*be, "mlp:784-256-10", 4);
  std::uint64_t want = base::fnv1a(base::kFnvOffset, "mlp", 3);
  std::int32_t l1[3] = {784, 256, 1}, l2[3] = {256, 10, 0};
  want = base::fnv1a(want, l1, sizeof l1);
  want = base::fnv1a(want, l2, sizeof l2);
  CHECK(m.fingerprint() == want);
  CHECK_FALSE(m.convolutional());
  CHECK(a.convolutional());
}

namespace {

// Checks the gradients of model spec (batch images, im2col chunks of chunk_limit images, 0: the
// whole batch) with labels taking turns; returns the number of parameters checked.
int gradient_check(const std::string& spec, int batch, int chunk_limit, float eps = 1e-3f) {
  auto be = kernels::make_backend("cpu");
  Model m(*be, spec, batch);
  m.limit_conv_chunk(chunk_limit);
  std::vector<std::int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 7 + 1) % m.num_classes();
  return core::test::check_gradients(*be, m, y, eps);
}

}  // namespace

TEST_CASE("finite-difference gradient check of every cnn layer", "[core][cnn]") {
  // conv (padded) -> max-pool -> conv (padded, several input channels) -> max-pool (3x3 window,
  // edge dropped) -> dense + ReLU -> output: every parameter of every layer.
  const std::string spec = "cnn:8x7x2-c3k3-p2-c4k3-f5-3";
  auto be = kernels::make_backend("cpu");
  Model probe(*be, spec, 1);
  const int want = int(probe.num_params());
  SECTION("whole batch in one im2col pass") { CHECK(gradient_check(spec, 3, 0) == want); }
  SECTION("one image per im2col pass") { CHECK(gradient_check(spec, 3, 1) == want); }
  SECTION("a 3x3 pool with a dropped edge and a 5x5 conv") {
    // eps 3e-4: at 1e-3 one weight's step crosses a ReLU/pool kink (fd -0.0287, exact -0.0314).
    CHECK(gradient_check("cnn:7x7x1-c2k5-p3-c2k1-4", 2, 0, 3e-4f) > 0);
  }
}

TEST_CASE("cnn forward: chunked im2col gives the same logits", "[core][cnn]") {
  auto be = kernels::make_backend("cpu");
  const int B = 9;
  Model a(*be, "cnn:10x10x3-c6k5-p2-c8k3-p2-f12-5", B),
      b(*be, "cnn:10x10x3-c6k5-p2-c8k3-p2-f12-5", B);
  a.init(7);
  b.init(7);
  b.limit_conv_chunk(2);  // 2+2+2+2+1 images
  auto x = random_vec(std::size_t(B) * a.input_dim(), 8, 0.f, 1.f);
  const float* la = a.forward(x.data(), B);
  const float* lb = b.forward(x.data(), B);
  for (int i = 0; i < B * 5; ++i) CHECK(la[i] == Approx(lb[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("golden: first training losses of a fixed-seed cnn run", "[core][cnn]") {
  // Recorded from this code (CPU backend); every step's loss also agrees with finite differences
  // above, and the losses fall as the net learns the pattern. A change in initialisation, data
  // order, the conv or pool kernels, their backward passes or the optimizer moves these numbers.
  auto be = kernels::make_backend("cpu");
  // The class lights one channel/row pattern.
  const core::Dataset d =
      core::test::lit_dataset(96, 6 * 6 * 2, 3, 7, [](int f, int c) { return (f / 12) % 3 == c; });
  const core::TrainConfig cfg = core::test::golden_config("cnn:6x6x2-c4k3-p2-f8-3");
  core::test::check_golden_losses(
      core::test::step_losses(*be, cfg, d, "core_cnn_golden_metrics.jsonl"),
      {1.233092, 1.133393, 1.028530, 1.127827, 0.9508639, 0.9215991});
}

TEST_CASE("trainer refuses data whose size does not fit the cnn's input", "[core][cnn]") {
  auto be = kernels::make_backend("cpu");
  core::Dataset d;
  d.features = 784;
  d.classes = 10;
  d.x.assign(784 * 4, 0.5f);
  d.y = {0, 1, 2, 3};
  core::TrainConfig cfg;
  cfg.model = "cnn:28x28x3-c4k3-p2-10";  // 2352 inputs
  core::Metrics metrics("", "test");
  CHECK_THROWS_AS(core::Trainer(*be, cfg, d, d, metrics, nullptr), std::invalid_argument);
  cfg.model = "cnn:28x28x1-c4k3-p2-10";
  CHECK_NOTHROW(core::Trainer(*be, cfg, d, d, metrics, nullptr));
}

namespace {
struct StopAfter : core::StepHook {
  std::int64_t at = 0;
  std::atomic<bool>* stop = nullptr;
  void between_steps(core::StepContext& ctx) override {
    if (ctx.step == at) stop->store(true);
  }
};
}  // namespace

TEST_CASE("a cnn run stopped mid-epoch and resumed from its checkpoint equals an unbroken run",
          "[core][cnn]") {
  auto be = kernels::make_backend("cpu");
  core::Dataset d;
  d.features = 6 * 6 * 2;
  d.classes = 3;
  base::SplitMix64 r(3);
  for (int i = 0; i < 90; ++i) {
    d.y.push_back(i % 3);
    for (int f = 0; f < d.features; ++f) d.x.push_back(float(r.uniform()));
  }
  core::TrainConfig cfg;
  cfg.model = "cnn:6x6x2-c4k3-p2-f8-3";
  cfg.optimizer = GENERATE(core::Optimizer::Sgd, core::Optimizer::Qgm);
  cfg.batch = 16;  // 6 steps per epoch
  cfg.epochs = 2;
  core::Metrics metrics("", "test");
  std::atomic<bool> never{false};
  core::Trainer whole(*be, cfg, d, d, metrics, nullptr);
  whole.run(never);
  std::vector<float> want(whole.model().num_params());
  be->download(want.data(), whole.model().params(), want.size() * 4);

  const std::string dir = "core_cnn_resume_ckpt";
  std::filesystem::remove_all(dir);
  cfg.checkpoint_dir = dir;
  std::atomic<bool> stop{false};
  StopAfter hook;
  hook.at = 8;
  hook.stop = &stop;
  {
    core::Trainer first(*be, cfg, d, d, metrics, &hook);
    CHECK(first.run(stop).stopped);
  }
  core::Trainer second(*be, cfg, d, d, metrics, nullptr);
  REQUIRE(second.resume());
  CHECK(second.run(never).steps == 12);
  std::vector<float> got(second.model().num_params());
  be->download(got.data(), second.model().params(), got.size() * 4);
  CHECK(got == want);
  std::filesystem::remove_all(dir);
}
