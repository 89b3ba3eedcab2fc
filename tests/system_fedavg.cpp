// FedAvg as real processes over loopback: a server and clients of gossip-peer on synthetic data.
// A crashed and a stalled client are dropped from their round and only whole updates are applied;
// a killed server resumes its round count and model; one client equals local training bit for bit.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/fedavg/wire.hpp"
#include "core/checkpoint.hpp"
#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fedavg = gossiptrain::apps::fedavg;

namespace {

// A setting that learns in a fraction of a second per round.
std::vector<std::string> common(int shards, int shard) {
  return {"--data",       "synthetic",
          "--backend",    "cpu",
          "--model",      "mlp:784-32-10",
          "--seed",       "5",
          "--lr",         "0.02",
          "--num-shards", std::to_string(shards),
          "--shard",      std::to_string(shard)};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<gt_test::Process> spawn(const gt_test::TempDir& d, const std::string& name,
                                        const std::vector<std::string>& args) {
  std::vector<std::string> argv = {gt_test::peer_bin()};
  argv = cat(argv, args);
  argv = cat(argv, {"--identity", d / (name + ".key"), "--metrics", d / (name + ".jsonl")});
  return std::make_unique<gt_test::Process>(argv, d / (name + ".log"));
}

std::vector<json> lines(const gt_test::TempDir& d, const std::string& name,
                        const std::string& event) {
  std::vector<json> out;
  for (auto& l : gt_test::read_metrics(d / (name + ".jsonl")))
    if (l["event"] == event) out.push_back(l);
  return out;
}

std::string fnv(const std::vector<float>& p) { return std::to_string(fedavg::params_fnv(p)); }

struct Env {  // a test-only fault for the processes spawned while it lives
  Env(const char* k, const char* v) : k_(k) { ::setenv(k, v, 1); }
  ~Env() { ::unsetenv(k_); }
  const char* k_;
};

}  // namespace

TEST_CASE("fedavg: a crashed and a stalled client are dropped, the round applies whole updates",
          "[system][fault]") {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir d("gt-fedavg-drop");
  const int port = gt_test::free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto server = spawn(
      d, "server",
      cat(common(3, 0), {"--fedavg-server", "--listen", addr, "--rounds", "2", "--min-clients", "3",
                         "--round-timeout", "4", "--checkpoint-dir", d / "ckpt"}));
  std::vector<std::unique_ptr<gt_test::Process>> clients;
  clients.push_back(spawn(d, "c0", cat(common(3, 0), {"--fedavg-server-addr", addr})));
  {
    Env crash("GT_TEST_FEDAVG_CRASH_ROUND", "1");
    clients.push_back(spawn(d, "c1", cat(common(3, 1), {"--fedavg-server-addr", addr})));
  }
  {
    Env stall("GT_TEST_FEDAVG_STALL_ROUND", "1");
    clients.push_back(spawn(d, "c2", cat(common(3, 2), {"--fedavg-server-addr", addr})));
  }
  REQUIRE(server->wait_for(60s));
  CHECK(server->exit_code() == 0);
  const auto rounds = lines(d, "server", "round");
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0]["asked"] == 3);
  CHECK(rounds[0]["answered"] == 3);
  CHECK(rounds[1]["asked"] == 3);
  CHECK(rounds[1]["answered"] == 1);
  CHECK(rounds[1]["dropped"] == 2);
  CHECK(rounds[1]["seconds"].get<double>() >= 3.5);  // it waited for the stalled one
  // The crashed client died before answering; the stalled one never answered.
  REQUIRE(clients[1]->wait_for(10s));
  CHECK(clients[1]->exit_code() == 9);
  CHECK(lines(d, "c1", "update").size() == 1);
  CHECK(lines(d, "c2", "update").size() == 1);
  // Round 2's global model is exactly c0's update, the one whole answer: nothing else was mixed
  // in. The checkpoint holds it with the round count.
  const auto c0 = lines(d, "c0", "update");
  REQUIRE(c0.size() == 2);
  CHECK(c0[1]["round"] == 1);
  CHECK(rounds[1]["global_fnv"] == c0[1]["params_fnv"]);
  const auto ck = gossiptrain::core::load_checkpoint(d / "ckpt");
  CHECK(ck.step == 2);
  CHECK(fnv(ck.params) == rounds[1]["global_fnv"].get<std::string>());
  REQUIRE(clients[0]->wait_for(10s));
  CHECK(clients[0]->exit_code() == 0);  // told the run is done
}

TEST_CASE("fedavg: a killed server resumes its round count and model, the client comes back",
          "[system][fault]") {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir d("gt-fedavg-restart");
  const int port = gt_test::free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const auto server_args =
      cat(common(2, 0), {"--fedavg-server", "--listen", addr, "--rounds", "40", "--min-clients",
                         "2", "--server-momentum", "0.5", "--checkpoint-dir", d / "ckpt"});
  auto server = spawn(d, "server", server_args);
  std::vector<std::unique_ptr<gt_test::Process>> clients;
  for (int i = 0; i < 2; ++i)
    clients.push_back(spawn(d, "c" + std::to_string(i),
                            cat(common(2, i), {"--fedavg-server-addr", addr, "--fedavg-wait", "30",
                                               "--local-epochs", "2"})));
  REQUIRE(gt_test::eventually(60s, [&] { return lines(d, "server", "round").size() >= 3; }));
  server->signal(SIGKILL);
  REQUIRE(server->wait_for(10s));
  const auto before = lines(d, "server", "round");
  const auto ck = gossiptrain::core::load_checkpoint(d / "ckpt");
  const std::int64_t k = ck.step;
  REQUIRE(k >= 3);
  REQUIRE(k < 40);
  // The checkpoint is the last completed round's model. The round's line follows its
  // checkpoint, so a kill in between leaves the checkpoint one round ahead of the lines.
  const std::int64_t last_line = before.back()["round"].get<std::int64_t>();
  CHECK((last_line == k || last_line == k - 1));
  if (last_line == k)
    CHECK(fnv(ck.params) == before[std::size_t(k - 1)]["global_fnv"].get<std::string>());

  auto again = spawn(d, "server", server_args);
  REQUIRE(again->wait_for(90s));
  CHECK(again->exit_code() == 0);
  const auto resume = lines(d, "server", "resume");
  REQUIRE(resume.size() == 1);
  CHECK(resume[0]["round"] == k);
  const auto all = lines(d, "server", "round");
  REQUIRE(all.size() == before.size() + std::size_t(40 - k));
  CHECK(all[before.size()]["round"] == k + 1);  // no round done twice, none skipped
  CHECK(all.back()["round"] == 40);
  // The clients got the checkpoint's model as the global model of round k (0-based), and both
  // were told the run is done.
  for (int i = 0; i < 2; ++i) {
    bool seen = false;
    for (const auto& u : lines(d, "c" + std::to_string(i), "update"))
      if (u["round"] == k) {
        CHECK(u["global_fnv"] == fnv(ck.params));
        seen = true;
      }
    CHECK(seen);
    REQUIRE(clients[std::size_t(i)]->wait_for(20s));
    CHECK(clients[std::size_t(i)]->exit_code() == 0);
  }
}

TEST_CASE("fedavg: one client and E local epochs equal local training of E epochs, bit for bit",
          "[system]") {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir d("gt-fedavg-local");
  const int port = gt_test::free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto server = spawn(d, "server",
                      cat(common(1, 0), {"--fedavg-server", "--listen", addr, "--rounds", "1",
                                         "--local-epochs", "3", "--checkpoint-dir", d / "fa"}));
  auto client = spawn(d, "c0", cat(common(1, 0), {"--fedavg-server-addr", addr}));
  REQUIRE(server->wait_for(60s));
  CHECK(server->exit_code() == 0);
  REQUIRE(client->wait_for(20s));
  CHECK(client->exit_code() == 0);
  std::string log;
  const int code = gt_test::run_app(
      "gossip-peer",
      cat(common(1, 0),
          {"--epochs", "3", "--checkpoint-dir", d / "local", "--metrics", d / "local.jsonl"}),
      d / "local.log", &log, 60s);
  REQUIRE(code == 0);
  const auto fa = gossiptrain::core::load_checkpoint(d / "fa");
  const auto local = gossiptrain::core::load_checkpoint(d / "local");
  REQUIRE(fa.params.size() == local.params.size());
  CHECK(std::memcmp(fa.params.data(), local.params.data(), fa.params.size() * sizeof(float)) ==
        0);  // every bit of every weight
  // And the same test accuracy and loss reported.
  const auto fa_eval = lines(d, "server", "eval");
  json local_eval;
  for (auto& l : gt_test::read_metrics(d / "local.jsonl"))
    if (l["event"] == "eval") local_eval = l;
  REQUIRE(!fa_eval.empty());
  CHECK(fa_eval.back()["test_acc"] == local_eval["test_acc"]);
  CHECK(fa_eval.back()["test_loss"] == local_eval["test_loss"]);
}

TEST_CASE("gossip-launch --mode fedavg: a server and N clients, summarized like any run",
          "[system]") {
  gt_test::TempDir d("gt-fedavg-launch");
  std::string log;
  const int code =
      gt_test::run_app("gossip-launch",
                       {"--peers", "3", "--mode", "fedavg", "--out", d / "run", "--no-plots",
                        "--data", "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10",
                        "--lr", "0.02", "--rounds", "3", "--partition", "dirichlet:0.5"},
                       d / "launch.log", &log, 120s);
  REQUIRE(code == 0);
  const json summary = json::parse(gt_test::read_file(d / "run/summary.json"));
  CHECK(summary["mode"] == "fedavg");
  CHECK(summary["num_peers"] == 3);  // 3 clients; the server is not a peer
  CHECK(summary["num_servers"] == 1);
  std::vector<json> evals;
  for (auto& l : gt_test::read_metrics(d / "run/peer0/metrics.jsonl"))
    if (l["event"] == "eval") evals.push_back(l);
  REQUIRE(evals.size() == 3);
  CHECK(summary["final_test_acc_mean"] == evals.back()["test_acc"]);
  CHECK(summary["bytes_sent"].get<double>() > 0);
  for (int i = 1; i <= 3; ++i) {
    int updates = 0, shard = -1;
    for (auto& l : gt_test::read_metrics(d / ("run/peer" + std::to_string(i) + "/metrics.jsonl"))) {
      if (l["event"] == "update") ++updates;
      if (l["event"] == "data") shard = int(l["shard_rows"].get<double>());
    }
    CHECK(updates == 3);
    CHECK(shard > 0);
  }
  const json cfg = json::parse(gt_test::read_file(d / "run/config.json"));
  CHECK(cfg["peer_list"][1]["shard"] == 0);  // client 1 trains gossip peer 0's shard
  CHECK(cfg["peer_list"][3]["shard"] == 2);
  CHECK(cfg["peer_list"][3]["num_shards"] == 3);
}

TEST_CASE("fedavg: a server's checkpoint names its run: another --run-id is refused, no --run-id "
          "carries the checkpoint's on",
          "[system]") {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir d("gt-fedavg-runid");
  const int port = gt_test::free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto server_args = [&](int rounds, const std::vector<std::string>& extra) {
    return cat(cat(common(1, 0), {"--fedavg-server", "--listen", addr, "--rounds",
                                  std::to_string(rounds), "--min-clients", "1",
                                  "--checkpoint-dir", d / "ckpt"}),
               extra);
  };
  auto run_rounds = [&](const std::string& name, int rounds, const std::vector<std::string>& extra) {
    auto server = spawn(d, name, server_args(rounds, extra));
    auto client = spawn(d, name + "-client",
                        cat(common(1, 0), {"--fedavg-server-addr", addr, "--fedavg-wait", "30",
                                           "--local-steps", "5"}));
    REQUIRE(server->wait_for(60s));
    CHECK(server->exit_code() == 0);
    REQUIRE(client->wait_for(30s));
  };
  run_rounds("first", 2, {"--run-id", "run-a"});
  auto meta = json::parse(gossiptrain::core::load_checkpoint(d / "ckpt").meta);
  CHECK(meta["run_id"] == "run-a");
  CHECK(meta["fedavg_round"] == 2);

  // Another run id on that folder: refused before anything listens, naming both ids.
  auto other = spawn(d, "other", server_args(4, {"--run-id", "run-b"}));
  REQUIRE(other->wait_for(30s));
  CHECK(other->exit_code() == 2);
  const std::string log = gt_test::read_file(d / "other.log");
  INFO(log);
  CHECK(log.find("belongs to run 'run-a', not to this run 'run-b'") != std::string::npos);
  CHECK(gossiptrain::core::load_checkpoint(d / "ckpt").step == 2);  // untouched

  // No --run-id: it resumes (rounds 3 and 4) and its checkpoints stay run-a's.
  run_rounds("again", 4, {});
  const auto ck = gossiptrain::core::load_checkpoint(d / "ckpt");
  CHECK(ck.step == 4);
  CHECK(json::parse(ck.meta)["run_id"] == "run-a");
  REQUIRE(lines(d, "again", "resume").size() == 1);
  CHECK(lines(d, "again", "resume")[0]["round"] == 2);
}
