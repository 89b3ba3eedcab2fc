// Many peers on one machine (issue 16): a run that cannot fit is refused before anything starts,
// and a peer keeps its own shard of the training set in memory and nothing more.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/partition.hpp"
#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Runs gossip-launch with GOSSIPTRAIN_MEM_LIMIT_MB=400 set for this run only.
int launch_in_400mb(const std::vector<std::string>& args, const std::string& log, std::string* out,
                    std::chrono::seconds timeout) {
  ::setenv("GOSSIPTRAIN_MEM_LIMIT_MB", "400", 1);
  const int rc = gt_test::run_app("gossip-launch", args, log, out, timeout);
  ::unsetenv("GOSSIPTRAIN_MEM_LIMIT_MB");
  return rc;
}

}  // namespace

TEST_CASE("gossip-launch refuses a run that cannot fit in memory, before any peer starts",
          "[system]") {
  gt_test::TempDir tmp("gt-launch-fit");
  std::string out;
  const std::string run = tmp / "run";
  const int rc =
      launch_in_400mb({"--peers", "64", "--data", "synthetic", "--epochs", "1", "--out", run},
                      tmp / "refused.log", &out, 120s);
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find("needs about") != std::string::npos);
  CHECK(out.find("GOSSIPTRAIN_MEM_LIMIT_MB") != std::string::npos);
  // The largest --peers that fits is named, and it is below what was asked for.
  const auto at = out.find("--peers ");
  REQUIRE(at != std::string::npos);
  const int fit = std::atoi(out.c_str() + at + 8);
  CHECK(fit >= 1);
  CHECK(fit < 64);
  // Nothing started: no run folder, so no peer and no file of one.
  CHECK_FALSE(std::filesystem::exists(run));

  // The run it says would fit passes the same check and runs (local mode: no network).
  const int rc2 =
      launch_in_400mb({"--peers", std::to_string(fit), "--mode", "local", "--data", "synthetic",
                       "--epochs", "1", "--no-plots", "--out", tmp / "fits"},
                      tmp / "fits.log", &out, 300s);
  INFO(out);
  CHECK(rc2 == 0);
  CHECK(out.find("memory estimate") != std::string::npos);
  CHECK(out.find("OpenBLAS thread") != std::string::npos);
}

TEST_CASE("a peer keeps its own shard of the training set in memory and nothing more", "[system]") {
  if (!gt_test::fashion_mnist_present()) {
    WARN("skipped: Fashion-MNIST is not installed (dataset-fashion-mnist)");
    return;
  }
  namespace core = gossiptrain::core;
  gt_test::TempDir tmp("gt-peer-shard");
  for (const std::string partition : {"iid", "dirichlet:0.1"}) {
    INFO(partition);
    const int shards = 16, shard = 5;
    std::string out;
    const std::string metrics = tmp / (partition.substr(0, 3) + ".jsonl");
    const int rc = gt_test::run_app(
        "gossip-peer",
        {"--num-shards", std::to_string(shards), "--shard", std::to_string(shard), "--partition",
         partition, "--seed", "7", "--epochs", "1", "--backend", "cpu", "--metrics", metrics},
        tmp / "peer.log", &out, 240s);
    INFO(out);
    REQUIRE(rc == 0);
    json data;
    for (const auto& m : gt_test::read_metrics(metrics))
      if (m["event"] == "data") data = m;
    REQUIRE(data.is_object());
    // The expected shard, computed here from the whole training set the peer never loads.
    const core::TrainTest all = core::load_dataset("");
    const auto parts = core::partition(all.train.y, all.train.classes, shards,
                                       core::parse_partition(partition), 7);
    const auto& idx = parts[std::size_t(shard)];
    const core::Dataset expect = core::subset(all.train, idx);
    std::uint64_t h = 1469598103934665603ull;
    for (std::int32_t y : expect.y) h = (h ^ std::uint64_t(std::uint32_t(y))) * 1099511628211ull;
    CHECK(data["shard_rows"] == idx.size());
    CHECK(data["train_rows"] == all.train.size());
    CHECK(data["test_rows"] == all.test.size());
    CHECK(data["shard_labels_fnv"] == std::to_string(h));
    // Its own rows and nothing more: the training data it holds is exactly the shard's images
    // and labels (capacity, not just size), far below the 188 MB of the whole set.
    CHECK(data["shard_bytes"] == idx.size() * (784 * 4 + 4));
    CHECK(data["test_bytes"] == all.test.size() * (784 * 4 + 4));
    // The whole process, after loading: the test set (31 MB), the shard and the program. A
    // build with CUDA loads the CUDA module only for a CUDA backend, so this bound holds in
    // every build (52 MB measured for a 1/16 peer of a CUDA build; 221 MB when cuBLAS was linked).
    CHECK(data["rss_mb"].get<double>() < 120.0);
  }
}
