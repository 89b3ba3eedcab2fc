// A peer restarted after its last step (churn runs restart peers at any moment): the real
// gossip-peer run twice on the same checkpoint reports the accuracy of the model it loaded, keeps
// its best accuracy, and gossip-launch's summary of its metrics file shows that figure, not 0.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "apps/launch/summary.hpp"
#include "core/checkpoint.hpp"
#include "tests/system_process.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct PeerRun {
  int code = -1;
  std::string log;
  json done;                 // the `done` line of this run
  std::vector<json> evals;   // its `eval` lines
};

// Runs gossip-peer alone to its end on folder dir (checkpoint and metrics there, metrics appended
// across runs); what this run wrote is the part of the metrics file past the previous runs.
PeerRun run_peer(const gt_test::TempDir& dir, const std::vector<std::string>& extra) {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  const std::size_t before = gt_test::read_metrics(dir / "metrics.jsonl").size();
  // A setting that learns (in a fraction of a second) and whose last epoch is not its best.
  std::vector<std::string> args = {"--data", "synthetic", "--backend", "cpu", "--model",
                                   "mlp:784-32-10", "--epochs", "3", "--seed", "5",
                                   "--schedule", "constant", "--lr", "0.02",
                                   "--checkpoint-dir", dir / "ckpt", "--metrics",
                                   dir / "metrics.jsonl"};
  args.insert(args.end(), extra.begin(), extra.end());
  PeerRun r;
  r.code = gt_test::run_app("gossip-peer", args, dir / "log.txt", &r.log, 120s);
  const auto lines = gt_test::read_metrics(dir / "metrics.jsonl");
  for (std::size_t k = before; k < lines.size(); ++k) {
    if (lines[k]["event"] == "done") r.done = lines[k];
    if (lines[k]["event"] == "eval") r.evals.push_back(lines[k]);
  }
  return r;
}

// Rewrites the checkpoint as one written before checkpoints carried the best accuracy.
void drop_best_from_checkpoint(const std::string& dir) {
  auto c = gossiptrain::core::load_checkpoint(dir);
  json meta = json::parse(c.meta);
  REQUIRE(meta.contains("best_test_acc"));
  meta.erase("best_test_acc");
  c.meta = meta.dump();
  gossiptrain::core::save_checkpoint(dir, c);
}

// What gossip-launch would summarize from this one peer's metrics file.
json summarize(const std::string& metrics) {
  gossiptrain::apps::PeerStats s;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) s.add_line(line, 0.99);
  gossiptrain::apps::LaunchOptions o;
  o.peers = 1;
  gossiptrain::apps::RunFacts facts;
  facts.options = &o;
  facts.epochs = 3;
  facts.batch = 32;
  gossiptrain::apps::PeerOutcome out;
  out.state = "done";
  out.exit_code = 0;
  return gossiptrain::apps::make_summary(facts, {s}, {out});
}

}  // namespace

TEST_CASE("a peer restarted after its last step reports the accuracy of the model it loaded",
          "[system]") {
  gt_test::TempDir dir("gt-restart-done");
  const PeerRun first = run_peer(dir, {});
  INFO("first run:\n" << first.log);
  REQUIRE(first.code == 0);
  REQUIRE(first.done.is_object());
  const double final_acc = first.done["final_test_acc"].get<double>();
  const double best_acc = first.done["best_test_acc"].get<double>();
  CHECK(final_acc > 0.1);  // above chance (10 classes): a figure worth keeping
  CHECK(best_acc >= final_acc);

  const PeerRun second = run_peer(dir, {});
  INFO("second run:\n" << second.log);
  REQUIRE(second.code == 0);
  CHECK(second.log.find("resumed from checkpoint") != std::string::npos);
  REQUIRE(second.done.is_object());
  CHECK(second.done["steps"] == first.done["steps"]);
  // The same parameters on the same test set: the same figure (evaluation is deterministic).
  CHECK(second.done["final_test_acc"].get<double>() == Approx(final_acc).margin(1e-9));
  CHECK(second.done["best_test_acc"].get<double>() == Approx(best_acc).margin(1e-9));
  // One eval of the loaded model; nothing was trained, so no training loss or rate is claimed.
  REQUIRE(second.evals.size() == 1);
  CHECK(second.evals[0]["test_acc"].get<double>() == Approx(final_acc).margin(1e-9));
  CHECK_FALSE(second.evals[0].contains("train_loss"));
  CHECK_FALSE(second.evals[0].contains("samples_per_s"));

  SECTION("gossip-launch's summary of the metrics file shows the real figures, not 0") {
    const json s = summarize(dir / "metrics.jsonl");
    CHECK(s["peers"][0]["final_test_acc"].get<double>() == Approx(final_acc).margin(1e-9));
    CHECK(s["peers"][0]["best_test_acc"].get<double>() == Approx(best_acc).margin(1e-9));
    CHECK(s["final_test_acc_mean"].get<double>() == Approx(final_acc).margin(1e-9));
    CHECK(s["final_test_acc_min"].get<double>() == Approx(final_acc).margin(1e-9));
  }

  SECTION("from a checkpoint without a best accuracy, best is unknown (null), never 0") {
    drop_best_from_checkpoint(dir / "ckpt");
    const PeerRun third = run_peer(dir, {});
    INFO("third run:\n" << third.log);
    REQUIRE(third.code == 0);
    REQUIRE(third.done.is_object());
    CHECK(third.done["final_test_acc"].get<double>() == Approx(final_acc).margin(1e-9));
    CHECK(third.done["best_test_acc"].is_null());
  }

  SECTION("with gossip it lingers alone and reports the same figure") {
    const PeerRun third =
        run_peer(dir, {"--listen", "127.0.0.1:" + std::to_string(gt_test::free_port()),
                       "--identity", dir / "identity.key", "--linger", "0.5"});
    INFO("gossip run:\n" << third.log);
    REQUIRE(third.code == 0);
    REQUIRE(third.done.is_object());
    CHECK(third.done["final_test_acc"].get<double>() == Approx(final_acc).margin(1e-9));
    CHECK(third.done["best_test_acc"].get<double>() == Approx(best_acc).margin(1e-9));
  }
}
