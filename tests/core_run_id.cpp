// A run's identity in its checkpoints: the run id (another run's checkpoint is refused), the
// --epochs, and the steps per epoch it was written with (a swarm restarted with another number of
// shards continues at the same epoch and fraction of it).
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/metrics.hpp"
#include "core/trainer.hpp"
#include "tests/core_test_util.hpp"
#include "kernels/backend.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;

namespace {

// Sets the stop flag once the trainer has taken `at` steps.
struct StopAtStep : core::StepHook {
  std::int64_t at = 0;
  std::atomic<bool>* stop = nullptr;
  void between_steps(core::StepContext& ctx) override {
    if (ctx.step >= at) stop->store(true);
  }
};

struct RunDir {
  RunDir() {
    cfg.model = "mlp:12-10-4";
    cfg.batch = 16;
    cfg.epochs = 3;
    cfg.checkpoint_dir = ckpt.str();
  }
  // A trainer on cfg stopped after `steps` steps (its checkpoint written on stop), or run to its
  // end when steps is 0.
  core::TrainResult train_until(std::int64_t steps) {
    std::atomic<bool> stop{false};
    StopAtStep hook;
    hook.at = steps;
    hook.stop = &stop;
    core::Trainer t(*be, cfg, d, d, metrics, steps > 0 ? &hook : nullptr);
    t.resume();
    return t.run(stop);
  }
  nlohmann::json meta() { return nlohmann::json::parse(core::load_checkpoint(ckpt.str()).meta); }
  void edit_meta(const std::function<void(nlohmann::json&)>& f) {
    auto c = core::load_checkpoint(ckpt.str());
    auto m = nlohmann::json::parse(c.meta);
    f(m);
    c.meta = m.dump();
    core::save_checkpoint(ckpt.str(), c);
  }
  std::unique_ptr<kernels::Backend> be = kernels::make_backend("cpu");
  const core::Dataset d = core::test::tiny_dataset();
  core::TrainConfig cfg;
  core::Metrics metrics{"", "test"};
  gt_test::TempDir ckpt{"gt-core-run-id-ckpt", /*create=*/false};
};

std::string refusal(core::Trainer& t) {
  try {
    t.resume();
  } catch (const core::CheckpointRunError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("map_step keeps the completed epochs and the fraction through the open one",
          "[core][elastic]") {
  CHECK(core::map_step(18, 1, 12, 8) == 12);  // half through epoch 1: 8 + 4
  CHECK(core::map_step(17, 1, 12, 8) == 11);  // 5/12 of 8 = 3.33: floor
  CHECK(core::map_step(12, 1, 12, 8) == 8);   // at the start of epoch 1
  CHECK(core::map_step(36, 3, 12, 8) == 24);  // a finished run stays finished
  CHECK(core::map_step(6, 0, 12, 18) == 9);   // to more steps per epoch (fewer shards)
  CHECK(core::map_step(5, 0, 12, 12) == 5);   // the same: unchanged
}

TEST_CASE_METHOD(RunDir,
                 "a checkpoint written with another number of shards continues at the same epoch "
                 "and fraction of it",
                 "[core][elastic]") {
  cfg.steps_per_epoch = 12;  // a swarm of 4 shards, say
  cfg.num_shards = 4;
  cfg.run_id = "run-7";
  const auto r1 = train_until(18);  // half through the second epoch
  REQUIRE(r1.stopped);
  REQUIRE(r1.steps == 18);
  const core::Checkpoint saved = core::load_checkpoint(ckpt.str());
  CHECK(meta()["steps_per_epoch"] == 12);
  CHECK(meta()["num_shards"] == 4);
  CHECK(meta()["epochs"] == 3);
  CHECK(meta()["run_id"] == "run-7");

  cfg.steps_per_epoch = 8;  // the same run restarted with 6 shards
  cfg.num_shards = 6;
  core::Trainer t(*be, cfg, d, d, metrics, nullptr);
  REQUIRE(t.resume());
  const core::Checkpoint now = t.state();
  CHECK(now.epoch == 1);
  CHECK(now.step == 12);  // 1 * 8 + 6/12 * 8
  CHECK(now.samples == saved.samples);
  CHECK(now.params == saved.params);
  CHECK(now.opt_state == saved.opt_state);
  std::atomic<bool> never{false};
  const auto r2 = t.run(never);
  CHECK(r2.steps == 24);  // the 12 left of 3 x 8
  CHECK(r2.epochs_done == 3);
  CHECK(nlohmann::json::parse(t.state().meta)["steps_per_epoch"] == 8);

  SECTION("and a finished run of the same id is still done under another size") {
    cfg.steps_per_epoch = 10;
    core::Trainer again(*be, cfg, d, d, metrics, nullptr);
    REQUIRE(again.resume());
    CHECK(again.state().step == 30);
    const auto r3 = again.run(never);
    CHECK(r3.steps == 30);
    CHECK(r3.epochs_done == 3);
    CHECK(r3.final_test_acc);  // it reports the model it holds
  }
}

TEST_CASE_METHOD(RunDir, "a checkpoint of another run id is refused, naming both and the ways out",
                 "[core][elastic]") {
  cfg.epochs = 1;
  cfg.run_id = "first";
  const auto r1 = train_until(0);
  REQUIRE(r1.epochs_done == 1);
  const auto params = core::load_checkpoint(ckpt.str()).params;

  cfg.run_id = "second";
  core::Trainer other(*be, cfg, d, d, metrics, nullptr);
  const std::string why = refusal(other);
  CHECK_THAT(why, Catch::Contains("run 'first'") && Catch::Contains("this run 'second'") &&
                      Catch::Contains("--run-id first") &&
                      Catch::Contains("empty --checkpoint-dir"));
  CHECK(other.state().step == 0);  // nothing taken
  CHECK(other.state().params != params);
  CHECK(core::load_checkpoint(ckpt.str()).params == params);  // nor overwritten

  // The same run id: a finished run is done, as before run ids.
  cfg.run_id = "first";
  core::Trainer same(*be, cfg, d, d, metrics, nullptr);
  REQUIRE(same.resume());
  std::atomic<bool> never{false};
  const auto r2 = same.run(never);
  CHECK(r2.steps == r1.steps);
  CHECK(r2.final_test_acc == r1.final_test_acc);
}

TEST_CASE_METHOD(RunDir,
                 "a checkpoint without a run id continues under one, and a peer without one keeps "
                 "the checkpoint's",
                 "[core][elastic]") {
  cfg.run_id = "";
  REQUIRE(train_until(5).stopped);
  CHECK_FALSE(meta().contains("run_id"));
  // An older build's checkpoint: no run id, no epochs, no steps per epoch.
  edit_meta([](nlohmann::json& m) {
    m.erase("epochs");
    m.erase("steps_per_epoch");
    m.erase("num_shards");
  });
  cfg.run_id = "adopted";
  REQUIRE(train_until(9).stopped);
  CHECK(meta()["run_id"] == "adopted");
  CHECK(core::load_checkpoint(ckpt.str()).step == 9);

  cfg.run_id = "";  // no --run-id: continues whatever run the checkpoint belongs to
  REQUIRE(train_until(12).stopped);
  CHECK(meta()["run_id"] == "adopted");
  CHECK(core::load_checkpoint(ckpt.str()).step == 12);
}

TEST_CASE_METHOD(RunDir, "another --epochs is another run: refused when the checkpoint says its own",
                 "[core][elastic]") {
  REQUIRE(train_until(5).stopped);
  cfg.epochs = 4;
  core::Trainer longer(*be, cfg, d, d, metrics, nullptr);
  const std::string why = refusal(longer);
  CHECK_THAT(why, Catch::Contains("--epochs 3") && Catch::Contains("--epochs 4"));

  SECTION("an older build's checkpoint, which does not say, continues where its counters fit") {
    edit_meta([](nlohmann::json& m) { m.erase("epochs"); });
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    REQUIRE(t.resume());
    CHECK(t.state().step == 5);
  }
  SECTION("and one whose counters do not fit this run's steps per epoch is refused as before") {
    edit_meta([](nlohmann::json& m) {
      m.erase("epochs");
      m.erase("steps_per_epoch");
    });
    auto c = core::load_checkpoint(ckpt.str());
    c.step = 30, c.epoch = 1;  // not within epoch 1 of 13 steps
    core::save_checkpoint(ckpt.str(), c);
    core::Trainer t(*be, cfg, d, d, metrics, nullptr);
    try {
      t.resume();
      FAIL("resumed");
    } catch (const core::CheckpointRunError&) {
      FAIL("a run error");
    } catch (const core::CheckpointError& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("counters outside this run") &&
                                            Catch::Contains("older build"));
    }
  }
}

TEST_CASE("run ids are 1-64 characters of letters, digits, dot, underscore and dash",
          "[core][elastic]") {
  CHECK_NOTHROW(core::check_run_id("a"));
  CHECK_NOTHROW(core::check_run_id("job-1234_v2.resumed"));
  CHECK_NOTHROW(core::check_run_id(std::string(64, 'x')));
  CHECK_THROWS_AS(core::check_run_id(""), std::invalid_argument);
  CHECK_THROWS_AS(core::check_run_id(std::string(65, 'x')), std::invalid_argument);
  CHECK_THROWS_AS(core::check_run_id("a b"), std::invalid_argument);
  CHECK_THROWS_AS(core::check_run_id("a/b"), std::invalid_argument);
  CHECK_THROWS_AS(core::check_run_id("ünï"), std::invalid_argument);
  core::TrainConfig c;
  c.run_id = "bad id";
  CHECK_THROWS_AS(core::validate(c), std::invalid_argument);
}
