// gossip-peer on one checkpoint folder, run again with another number of shards (the run goes on
// at its epoch) and with another run id or --epochs (refused with exit code 2, one clear line).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;
using Catch::Matchers::Contains;

namespace {

// The last `eval` line's epoch in a metrics file (0: none yet).
int last_eval_epoch(const std::string& metrics) {
  int e = 0;
  for (const auto& j : gt_test::read_metrics(metrics))
    if (j.value("event", "") == "eval" && j.contains("epoch")) e = j["epoch"].get<int>();
  return e;
}

// Starts gossip-peer alone on shard 1 of `shards`, waits until it has evaluated `until` epochs
// beyond what its metrics file held, stops it with SIGTERM (its checkpoint is written on the way
// out) and returns its exit code.
int train_then_stop(const std::vector<std::string>& flags, const std::string& metrics,
                    const std::string& log, int more_epochs) {
  const int before = last_eval_epoch(metrics);
  std::vector<std::string> argv{gt_test::peer_bin()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  gt_test::Process p(argv, log);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (p.running() && last_eval_epoch(metrics) < before + more_epochs &&
         std::chrono::steady_clock::now() < end) {
    p.wait_for(std::chrono::milliseconds(20));
  }
  INFO(gt_test::read_file(log));
  REQUIRE(p.running());
  REQUIRE(last_eval_epoch(metrics) >= before + more_epochs);
  p.signal(SIGTERM);
  REQUIRE(p.wait_for(std::chrono::seconds(30)));
  return p.exit_code();
}

nlohmann::json meta_of(const std::string& dir) {
  return nlohmann::json::parse(core::load_checkpoint(dir).meta);
}

}  // namespace

TEST_CASE("gossip-peer: the same run id with another number of shards continues at its epoch, "
          "another run id or --epochs is refused",
          "[apps][elastic]") {
  gt_test::TempDir dir("gt-apps-elastic");
  const std::string ckpt = dir / "ckpt", metrics = dir / "metrics.jsonl";
  auto flags = [&](int shards, const std::string& run_id, int epochs) {
    return std::vector<std::string>{
        "--data", "synthetic", "--model", "mlp:784-16-10", "--num-shards", std::to_string(shards),
        "--shard", "1", "--epochs", std::to_string(epochs), "--checkpoint-dir", ckpt, "--metrics",
        metrics, "--run-id", run_id, "--log-level", "info", "--progress-every", "0"};
  };
  // 4 shards of the 6,000 generated rows: 47 steps of 32 per epoch.
  CHECK(train_then_stop(flags(4, "exp-1", 1000), metrics, dir / "first.log", 2) == 130);
  const core::Checkpoint first = core::load_checkpoint(ckpt);
  const auto m1 = meta_of(ckpt);
  CHECK(m1["run_id"] == "exp-1");
  CHECK(m1["num_shards"] == 4);
  CHECK(m1["steps_per_epoch"] == 47);
  CHECK(m1["epochs"] == 1000);
  REQUIRE(first.epoch >= 2);

  // Another run id on this folder: exit 2, one line naming both ids and the ways out, and the
  // checkpoint untouched.
  std::string out;
  CHECK(gt_test::run_app("gossip-peer", flags(4, "exp-2", 1000), dir / "other.log", &out,
                         std::chrono::seconds(60)) == 2);
  CHECK_THAT(out, Contains("belongs to run 'exp-1', not to this run 'exp-2'") &&
                      Contains("pass --run-id exp-1") && Contains("empty --checkpoint-dir"));
  CHECK_THAT(out, !Contains("--help"));
  // Another --epochs: another run too.
  CHECK(gt_test::run_app("gossip-peer", flags(4, "exp-1", 999), dir / "epochs.log", &out,
                         std::chrono::seconds(60)) == 2);
  CHECK_THAT(out, Contains("--epochs 1000") && Contains("--epochs 999"));
  CHECK(core::load_checkpoint(ckpt).step == first.step);

  // The same run with 3 shards (63 steps per epoch): it goes on from the epoch it had reached.
  const std::size_t lines_before = gt_test::read_metrics(metrics).size();
  CHECK(train_then_stop(flags(3, "exp-1", 1000), metrics, dir / "second.log", 1) == 130);
  const auto log2 = gt_test::read_file(dir / "second.log");
  CHECK_THAT(log2, Contains("written with 4 shard(s), 47 steps per epoch; this run has 3 shard(s), "
                            "63 steps per epoch"));
  const auto lines = gt_test::read_metrics(metrics);
  std::vector<nlohmann::json> second(lines.begin() + std::ptrdiff_t(lines_before), lines.end());
  int first_eval = -1;
  for (const auto& j : second) {
    if (j.value("event", "") == "clock") CHECK(j["num_shards"] == 3);
    if (j.value("event", "") == "eval" && first_eval < 0) first_eval = j["epoch"].get<int>();
  }
  CHECK(first_eval == int(first.epoch) + 1);  // not epoch 1 of a new run
  const core::Checkpoint now = core::load_checkpoint(ckpt);
  const auto m2 = meta_of(ckpt);
  CHECK(m2["num_shards"] == 3);
  CHECK(m2["steps_per_epoch"] == 63);
  CHECK(m2["run_id"] == "exp-1");
  CHECK(now.epoch > first.epoch);
  CHECK(now.step >= now.epoch * 63);
  CHECK(now.step <= (now.epoch + 1) * 63);
}
