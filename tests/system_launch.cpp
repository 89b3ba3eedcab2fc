// System tests of gossip-launch: when it samples the consensus, 3-peer runs end to end (local and
// gossip mode) checked against the peers' own metrics and checkpoints, --compare, Ctrl-C with a
// peer killed mid-run, and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "apps/launch/summary.hpp"
#include "core/checkpoint.hpp"
#include "tests/system_process.hpp"

using namespace std::chrono_literals;
using gt_test::Process;
using nlohmann::json;

namespace {

std::string launch_bin() { return gt_test::app_bin("gossip-launch"); }

// Runs gossip-launch to the end (bounded); returns its exit code, output in *out.
int run_launch(const std::vector<std::string>& args, const std::string& log, std::string* out) {
  return gt_test::run_app("gossip-launch", args, log, out, 180s);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  return json::parse(in);
}

bool matplotlib_available() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

// The peers' checkpoint folders of a gossip-launch run of n peers.
std::vector<std::string> checkpoint_dirs(const std::string& run, int n) {
  std::vector<std::string> dirs;
  for (int i = 0; i < n; ++i) dirs.push_back(run + "/peer" + std::to_string(i) + "/ckpt");
  return dirs;
}

// Everything a finished run folder must hold, cross-checked against the peers' own files.
json check_run_folder(const std::string& run, int n, const std::string& mode, double target) {
  INFO("run folder " << run);
  CHECK(gt_test::read_file(run + "/command.txt").find("--peers") != std::string::npos);
  const json cfg = read_json(run + "/config.json");
  CHECK(cfg["mode"] == mode);
  REQUIRE(cfg["peer_list"].size() == std::size_t(n));
  for (const auto& p : cfg["peer_list"]) CHECK(p["argv"].size() > 1);

  const json s = read_json(run + "/summary.json");
  for (const char* k :
       {"mode", "partition", "num_peers", "final_test_acc_mean", "final_test_acc_min",
        "final_test_acc_max", "final_test_acc_spread", "best_test_acc", "time_to_target_s",
        "samples", "exchanges_ok", "exchanges_failed", "exchanges_failed_by_reason", "bytes_sent",
        "consensus_distance", "peers", "target_acc", "plots"}) {
    INFO("summary field " << k);
    CHECK(s.contains(k));
  }
  CHECK(s["mode"] == mode);
  CHECK(s["num_peers"] == n);
  CHECK(s["target_acc"].get<double>() == Approx(target));
  REQUIRE(s["peers"].size() == std::size_t(n));

  std::int64_t samples = 0, bytes = 0;
  int ok = 0, failed = 0;
  double min_final = 2, max_final = -1, sum_final = 0, best = -1, sum_dist = 0;
  for (int i = 0; i < n; ++i) {
    INFO("peer " << i);
    const std::string dir = run + "/peer" + std::to_string(i);
    CHECK(std::filesystem::exists(dir + "/log.txt"));
    CHECK(gossiptrain::core::checkpoint_exists(dir + "/ckpt"));
    if (mode == "gossip") CHECK(std::filesystem::exists(dir + "/identity.key"));

    // Every line is a JSON object with t, peer and event; gather what the summary should say.
    std::ifstream in(dir + "/metrics.jsonl");
    int lines = 0, evals = 0, ex_ok = 0, ex_failed = 0;
    std::int64_t ex_bytes = 0;
    json done;
    std::optional<double> first_target_t, final_eval;
    double best_eval = -1;
    for (std::string line; std::getline(in, line);) {
      ++lines;
      INFO("metrics line: " << line);
      const json j = json::parse(line);  // throws (fails the test) on a broken line
      REQUIRE(j.is_object());
      REQUIRE(j["t"].is_number());
      REQUIRE(j["peer"].is_string());
      REQUIRE(j["event"].is_string());
      const std::string ev = j["event"];
      if (ev == "eval") {
        ++evals;
        const double acc = j["test_acc"];
        CHECK(acc >= 0.0);
        CHECK(acc <= 1.0);
        if (!first_target_t && acc >= target) first_target_t = j["t"].get<double>();
        best_eval = std::max(best_eval, acc);
        if (j.value("final", false)) final_eval = acc;
      } else if (ev == "done") {
        done = j;
      } else if (ev == "exchange") {
        (j["ok"].get<bool>() ? ex_ok : ex_failed) += 1;
        ex_bytes += j.contains("bytes_sent") ? j["bytes_sent"].get<std::int64_t>()
                                             : j["bytes"].get<std::int64_t>();
      }
    }
    CHECK(lines > 0);
    CHECK(evals > 0);
    REQUIRE(done.is_object());

    const json& p = s["peers"][std::size_t(i)];
    for (const char* k : {"final_test_acc", "best_test_acc", "time_to_target_s", "samples",
                          "exchanges_ok", "exchanges_failed", "exchanges_failed_by_reason",
                          "bytes_sent", "consensus_distance", "state"}) {
      INFO("peer field " << k);
      CHECK(p.contains(k));
    }
    CHECK(p["state"] == "done");
    // Final: the peer's eval marked final (the model as it ended), else what `done` says.
    CHECK(p["final_test_acc"].get<double>() ==
          Approx(final_eval.value_or(done["final_test_acc"].get<double>())));
    CHECK(p["best_test_acc"].get<double>() ==
          Approx(std::max(best_eval, done["best_test_acc"].get<double>())));
    if (first_target_t)
      CHECK(p["time_to_target_s"].get<double>() == Approx(*first_target_t));
    else
      CHECK(p["time_to_target_s"].is_null());
    CHECK(p["exchanges_ok"] == ex_ok);
    CHECK(p["exchanges_failed"] == ex_failed);
    CHECK(p["bytes_sent"] == ex_bytes);
    // The final checkpoint counts the samples trained on.
    CHECK(p["samples"] == gossiptrain::core::load_checkpoint(dir + "/ckpt").samples);
    CHECK(p["samples"].get<std::int64_t>() > 0);

    const double f = p["final_test_acc"];
    min_final = std::min(min_final, f);
    max_final = std::max(max_final, f);
    sum_final += f;
    best = std::max(best, p["best_test_acc"].get<double>());
    sum_dist += p["consensus_distance"].get<double>();
    samples += p["samples"].get<std::int64_t>();
    bytes += p["bytes_sent"].get<std::int64_t>();
    ok += p["exchanges_ok"].get<int>();
    failed += p["exchanges_failed"].get<int>();
  }
  CHECK(s["final_test_acc_min"].get<double>() == Approx(min_final));
  CHECK(s["final_test_acc_max"].get<double>() == Approx(max_final));
  CHECK(s["final_test_acc_mean"].get<double>() == Approx(sum_final / n));
  CHECK(s["final_test_acc_spread"].get<double>() == Approx(sum_final / n - min_final));
  CHECK(s["best_test_acc"].get<double>() == Approx(best));
  CHECK(s["samples"] == samples);
  CHECK(s["bytes_sent"] == bytes);
  CHECK(s["exchanges_ok"] == ok);
  CHECK(s["exchanges_failed"] == failed);
  CHECK(s["consensus_distance"].get<double>() == Approx(sum_dist / n));
  CHECK(s["consensus_distance"].get<double>() ==
        Approx(gt_test::consensus_distance(checkpoint_dirs(run, n))).epsilon(1e-6));

  // At least one consensus point over time, each with t and distance.
  std::ifstream cj(run + "/consensus.jsonl");
  int points = 0;
  for (std::string line; std::getline(cj, line); ++points) {
    const json j = json::parse(line);
    CHECK(j["t"].is_number());
    CHECK(j["distance"].get<double>() >= 0.0);
  }
  CHECK(points >= 1);

  if (matplotlib_available()) {
    CHECK(s["plots"]["ok"] == true);
    for (const char* png : {"accuracy.png", "loss.png", "consensus.png", "bytes.png"}) {
      INFO(png);
      const std::string data = gt_test::read_file(run + "/" + png);
      REQUIRE(data.size() > 8);
      CHECK(data.compare(1, 3, "PNG") == 0);
    }
  } else {
    WARN("/usr/bin/python3 has no matplotlib: plot files not checked (apt-get install "
         "python3-matplotlib)");
  }
  return s;
}

// A .npy file of uint8 ('|u1') or int32 ('<i4') elements, as numpy writes it.
template <class T>
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::uint64_t>& shape, const std::vector<T>& data) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ",";
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  dict += std::string((64 - (10 + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::ofstream f(path, std::ios::binary);
  f << "\x93NUMPY" << char(1) << char(0) << char(dict.size() & 0xff) << char(dict.size() >> 8)
    << dict;
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(T)));
  REQUIRE(f.good());
}

// A small 784-feature, 10-class set in DIR/{x,y}_{train,test}.npy (what npy:DIR reads).
void write_npy_set(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& [split, rows] :
       {std::pair<std::string, std::uint64_t>{"train", 200}, {"test", 50}}) {
    std::vector<std::uint8_t> x(rows * 784);
    std::vector<std::int32_t> y(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      y[r] = std::int32_t(r % 10);
      for (std::size_t c = 0; c < 784; ++c) x[r * 784 + c] = std::uint8_t((c % 10 == r % 10) * 200);
    }
    write_npy(dir + "/x_" + split + ".npy", "|u1", {rows, 784}, x);
    write_npy(dir + "/y_" + split + ".npy", "<i4", {rows}, y);
  }
}

const std::vector<std::string> kQuickRun = {"--data", "synthetic", "--epochs", "2",
                                            "--linger", "1", "--consensus-every", "1",
                                            "--target-acc", "0.3"};

}  // namespace

TEST_CASE("gossip-launch samples the consensus during a run as --consensus-every says",
          "[system]") {
  using gossiptrain::apps::CheckpointScan;
  using gossiptrain::apps::consensus_sample_due;
  const CheckpointScan some{3, true, true, false};  // one peer wrote a new checkpoint
  CHECK_FALSE(consensus_sample_due(some, 4.9, 5.0));
  CHECK(consensus_sample_due(some, 5.0, 5.0));
  CHECK_FALSE(consensus_sample_due(some, 1.9, 2.0));  // the flag's value, not a constant
  CHECK(consensus_sample_due(some, 2.0, 2.0));
  // Every peer has a new checkpoint (e.g. all finished an epoch): sampled at once.
  CHECK(consensus_sample_due({3, true, true, true}, 0.1, 5.0));
  // Nothing new, a checkpoint missing, or a single peer: never, however long it has been.
  CHECK_FALSE(consensus_sample_due({3, true, false, false}, 1e9, 5.0));
  CHECK_FALSE(consensus_sample_due({3, false, true, false}, 1e9, 5.0));
  CHECK_FALSE(consensus_sample_due({1, true, true, true}, 1e9, 5.0));
}

TEST_CASE("gossip-launch runs 3 peers end to end in local and gossip mode, and --compare reads both",
          "[system][slow]") {
  gt_test::TempDir tmp("gt-launch-e2e");
  std::string out;

  std::vector<std::string> local = {"--peers", "3", "--mode", "local", "--out", tmp / "local"};
  local.insert(local.end(), kQuickRun.begin(), kQuickRun.end());
  {
    INFO(out);
    REQUIRE(run_launch(local, tmp / "local.log", &out) == 0);
  }
  const json ls = check_run_folder(tmp / "local", 3, "local", 0.3);
  CHECK(ls["exchanges_ok"] == 0);  // no averaging without the network

  // Started together: two epochs take a few ms here, so without --min-peers the first peer is
  // done before the others start, and they catch up to its finished state (nothing left to
  // train, nothing to exchange).
  std::vector<std::string> gossip = {"--peers", "3", "--mode", "gossip", "--out", tmp / "gossip",
                                     "--min-peers", "3"};
  gossip.insert(gossip.end(), kQuickRun.begin(), kQuickRun.end());
  {
    INFO(out);
    REQUIRE(run_launch(gossip, tmp / "gossip.log", &out) == 0);
  }
  const json gs = check_run_folder(tmp / "gossip", 3, "gossip", 0.3);
  CHECK(gs["exchanges_ok"].get<int>() > 0);
  CHECK(gs["bytes_sent"].get<std::int64_t>() > 0);
  // Every peer was passed the run's generated network key.
  const json cfg = read_json(tmp / "gossip/config.json");
  const std::string key = cfg["network_key"];
  CHECK(gt_test::read_file(key).size() >= 64);
  for (const auto& p : cfg["peer_list"]) {
    const auto& a = p["argv"];
    CHECK(std::find(a.begin(), a.end(), json(key)) != a.end());
  }

  REQUIRE(run_launch({"--compare", tmp / "local", tmp / "gossip", "--markdown"}, tmp / "cmp.log",
                     &out) == 0);
  INFO(out);
  CHECK(out.find("| run |") != std::string::npos);
  CHECK(out.find("| local | local |") != std::string::npos);
  CHECK(out.find("| gossip | gossip |") != std::string::npos);
}

TEST_CASE("gossip-launch reports a peer killed mid-run and stops the rest cleanly on SIGTERM",
          "[system]") {
  gt_test::TempDir tmp("gt-launch-stop");
  const std::string run = tmp / "run";
  // Enough epochs that nobody finishes before the test stops the run.
  Process launch({launch_bin(), "--peers", "3", "--mode", "local", "--out", run, "--data",
                  "synthetic", "--epochs", "1000", "--no-plots", "--stop-timeout", "20"},
                 tmp / "launch.log");
  // Wait until every peer has written an eval line (a checkpoint then exists too).
  REQUIRE(gt_test::eventually(60s, [&] {
    for (int i = 0; i < 3; ++i) {
      bool eval = false;
      for (const auto& j : gt_test::read_metrics(run + "/peer" + std::to_string(i) + "/metrics.jsonl"))
        eval |= j["event"] == "eval";
      if (!eval) return false;
    }
    return true;
  }));
  const json cfg = read_json(run + "/config.json");
  const pid_t victim = cfg["peer_list"][1]["pid"].get<pid_t>();
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(gt_test::eventually(20s, [&] {
    return gt_test::read_file(tmp / "launch.log").find("peer 1 killed by SIGKILL") !=
           std::string::npos;
  }));
  launch.signal(SIGTERM);
  REQUIRE(launch.wait_for(60s));
  const std::string out = gt_test::read_file(tmp / "launch.log");
  INFO(out);
  CHECK(launch.exit_code() == 1);  // a peer failed on its own: not hidden behind the interruption

  const json s = read_json(run + "/summary.json");
  CHECK(s["interrupted"] == true);
  CHECK(s["failed_peers"] == json::array({1}));
  CHECK(s["peers"][1]["state"] == "killed by SIGKILL");
  CHECK(s["peers"][1]["failed"] == true);
  for (int i : {0, 2}) {
    INFO("peer " << i);
    CHECK(s["peers"][std::size_t(i)]["state"] == "stopped");
    CHECK(s["peers"][std::size_t(i)]["exit_code"] == 130);
    CHECK(s["peers"][std::size_t(i)]["final_test_acc"].is_number());
  }
  // No peer process is left behind.
  for (const auto& p : cfg["peer_list"]) CHECK(::kill(p["pid"].get<pid_t>(), 0) != 0);
}

// Issue 26, item 1: the launcher refused npy data with a plain folder check of its own.
TEST_CASE("gossip-launch takes --data npy:DIR and the four-file form, as gossip-peer does",
          "[system]") {
  gt_test::TempDir tmp("gt-launch-npy");
  const std::string dir = tmp / "set";
  write_npy_set(dir);
  const std::vector<std::string> forms = {"npy:" + dir, "npy:" + dir + "/x_train.npy," + dir +
                                                            "/y_train.npy," + dir + "/x_test.npy," +
                                                            dir + "/y_test.npy"};
  for (const auto& data : forms) {
    INFO("--data " << data);
    std::string out;
    const int rc = run_launch({"--peers", "2", "--mode", "local", "--data", data, "--epochs", "1",
                               "--linger", "0", "--no-plots", "--out", tmp / "run"},
                              tmp / "npy.log", &out);
    INFO(out);
    CHECK(rc == 0);
    if (rc == 0) CHECK(read_json(tmp / "run/summary.json")["num_peers"] == 2);
    std::filesystem::remove_all(tmp / "run");
    std::filesystem::remove(tmp / "npy.log");
  }
  // A wrong npy path is still refused before anything starts, with the loader's message.
  std::string out;
  CHECK(run_launch({"--peers", "2", "--data", "npy:" + dir + "/nothing", "--out", tmp / "run"},
                   tmp / "bad.log", &out) == 2);
  CHECK(out.find("not a folder") != std::string::npos);
}

// Issue 26, item 14: an interrupted launch could not be resumed: its --out was refused.
TEST_CASE("gossip-launch --resume continues an interrupted run from the peers' checkpoints",
          "[system]") {
  gt_test::TempDir tmp("gt-launch-resume");
  const std::string run = tmp / "run";
  const int epochs = 60;
  Process launch(
      {launch_bin(), "--peers", "2", "--out", run, "--data", "synthetic", "--epochs",
       std::to_string(epochs), "--model", "mlp:784-32-10", "--no-plots", "--linger", "0"},
      tmp / "first.log");
  // Interrupted once both peers have a checkpoint (an eval line comes with each epoch's).
  REQUIRE(gt_test::eventually(90s, [&] {
    for (int i = 0; i < 2; ++i) {
      bool eval = false;
      for (const auto& j :
           gt_test::read_metrics(run + "/peer" + std::to_string(i) + "/metrics.jsonl"))
        eval |= j["event"] == "eval";
      if (!eval) return false;
    }
    return true;
  }));
  launch.signal(SIGTERM);
  REQUIRE(launch.wait_for(60s));
  const json first = read_json(run + "/summary.json");
  CHECK(first["interrupted"] == true);
  auto ids = [&] {
    std::vector<std::string> v;
    for (int i = 0; i < 2; ++i)
      v.push_back(gt_test::read_file(run + "/peer" + std::to_string(i) + "/identity.key"));
    return v;
  };
  const auto ids_before = ids();
  const std::string key_before = gt_test::read_file(run + "/network.key");
  std::string out;
  // The run folder's own command again is refused, and says how to resume.
  {
    const int rc =
        run_launch({"--peers", "2", "--out", run, "--data", "synthetic"}, tmp / "again.log", &out);
    CHECK(rc == 2);
    CHECK(out.find("gossip-launch --resume " + run) != std::string::npos);
  }
  const auto resume_t0 = std::chrono::steady_clock::now();
  {
    const int rc = run_launch({"--resume", run}, tmp / "resume.log", &out);
    INFO(out);
    REQUIRE(rc == 0);
  }
  const double resume_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - resume_t0).count();
  CHECK(ids() == ids_before);
  CHECK(gt_test::read_file(run + "/network.key") == key_before);
  const json s = read_json(run + "/summary.json");
  CHECK_FALSE(s["interrupted"].get<bool>());
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i);
    const std::string log = gt_test::read_file(run + "/peer" + std::to_string(i) + "/log.txt");
    CHECK(log.find("resumed from") != std::string::npos);
    CHECK(s["peers"][std::size_t(i)]["epochs"] == epochs);
  }
  CHECK(gt_test::read_file(run + "/command.txt").find("# resumed") != std::string::npos);

  // Defects issue, item 8: the resumed launch's clock started again at 0. The run's one clock:
  // the resumed launch goes on where the first stopped, and each peer's two processes are placed
  // by their own starts, so its evaluations never run back in time.
  INFO("first summary:\n" << first.dump(1) << "\nresumed summary:\n" << s.dump(1));
  const double first_s = first["seconds"].get<double>();
  CHECK(s["seconds"].get<double>() >= first_s + resume_s - 3.0);
  CHECK(s["seconds"].get<double>() <= first_s + resume_s + 0.5);
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i);
    const json& p = s["peers"][std::size_t(i)];
    REQUIRE(p.contains("life_offsets_s"));
    REQUIRE(p["life_offsets_s"].is_array());
    REQUIRE(p["life_offsets_s"].size() == 2);
    const double life0 = p["life_offsets_s"][0].get<double>();
    const double life1 = p["life_offsets_s"][1].get<double>();
    CHECK(life0 >= 0.0);
    CHECK(life0 < first_s);
    CHECK(life1 >= first_s);
    CHECK(life1 < s["seconds"].get<double>());
    // Its eval lines on the run's clock, each process by its own start: in order.
    std::vector<double> evals;
    double last_t = -1.0;
    int life = 0;
    for (const auto& j : gt_test::read_metrics(run + "/peer" + std::to_string(i) + "/metrics.jsonl")) {
      if (!j.contains("t") || !j["t"].is_number()) continue;
      const double t = j["t"].get<double>();
      if (last_t >= 0 && t < last_t) ++life;
      last_t = t;
      if (j["event"] == "eval") evals.push_back(t + (life == 0 ? life0 : life1));
    }
    CHECK(life == 1);
    CHECK(std::is_sorted(evals.begin(), evals.end()));
    // Its seconds: from its first process's start to its latest's end.
    CHECK(p["seconds"].get<double>() > life1 - life0);
  }
  int launches = 0;
  for (const auto& e : gt_test::read_metrics(run + "/events.jsonl"))
    if (e["event"] == "launch") {
      ++launches;
      if (e["resumed"] == true) CHECK(e["t"].get<double>() >= first_s);
    }
  CHECK(launches == 2);
}

TEST_CASE("gossip-launch refuses bad input with exit code 2 and a message", "[system]") {
  gt_test::TempDir tmp("gt-launch-bad");
  std::string out;
  auto expect_usage_error = [&](std::vector<std::string> args, const std::string& needle) {
    args.insert(args.end(), {"--out", tmp / "run"});
    const int rc = run_launch(args, tmp / "bad.log", &out);
    INFO(out);
    CHECK(rc == 2);
    CHECK(out.find(needle) != std::string::npos);
    std::filesystem::remove(tmp / "bad.log");
    std::filesystem::remove_all(tmp / "run");
  };
  ::unsetenv("GOSSIPTRAIN_ALLOW_FAULTS");
  std::ofstream(tmp / "part.json")
      << R"({"events":[{"at":1,"event":"partition","groups":[[0,1],[2,3]]}]})";
  // Each bad command line and a part of the message it must be refused with.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--peers", "3", "--data", "synthetic", "--partition", "bogus"}, "--partition"},
      {{"--peers", "3", "--mode", "sideways"}, "--mode"},
      {{"--peers", "3", "--data", tmp / "no-such-dataset"}, "dataset-fashion-mnist"},
      {{"--peers", "3", "--data", "synthetic", "--listen", "127.0.0.1:1"}, "set by gossip-launch"},
      {{"--peers", "3", "--data", "synthetic", "--no-such-flag", "1"}, "--no-such-flag"},
      {{"--peers", "2", "--data", "synthetic", "--peer-bin", tmp / "nothing"},
       "gossip-peer not found"},
      // --peer-flags: an existing peer, a flag the launcher does not own, the peer's own parser,
      // and a fault without GOSSIPTRAIN_ALLOW_FAULTS.
      {{"--peers", "3", "--data", "synthetic", "--peer-flags", "3:--lr=8"}, "no peer 3"},
      {{"--peers", "3", "--data", "synthetic", "--peer-flags", "1:--shard=0"},
       "set by gossip-launch"},
      {{"--peers", "3", "--data", "synthetic", "--peer-flags", "1:--lr=99"}, "--lr"},
      {{"--peers", "3", "--data", "synthetic", "--peer-flags", "2:--fault=random"},
       "GOSSIPTRAIN_ALLOW_FAULTS=1"},
      // Churn scenarios are checked whole before anything starts.
      {{"--peers", "4", "--data", "synthetic", "--churn", "crash:9@5"}, "out of range"},
      {{"--peers", "4", "--data", "synthetic", "--churn", "random:crash,uptime=30"},
       "mean_downtime_s"},
      {{"--peers", "4", "--mode", "local", "--data", "synthetic", "--churn", "crash:1@5"},
       "--churn needs --mode gossip"},
      {{"--peers", "4", "--data", "synthetic", "--churn", tmp / "part.json"}, "--netns"},
  };
  for (const auto& [args, needle] : bad) {
    INFO("refused with: " << needle);
    expect_usage_error(args, needle);
  }
  // --help is the whole text, churn shorthands included.
  {
    const int rc = run_launch({"--help"}, tmp / "help.log", &out);
    CHECK(rc == 0);
    CHECK(out.find("--churn FILE|SHORTHAND") != std::string::npos);
    CHECK(out.find("random:KIND") != std::string::npos);
    CHECK(out.find("Exit codes:") != std::string::npos);
  }

  // A busy --base-port: something listens on it.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    const int port = ntohs(a.sin_port);
    if (port >= 1024)
      expect_usage_error({"--peers", "2", "--data", "synthetic", "--base-port",
                          std::to_string(port)},
                         "in use");
    ::close(fd);
  }

  // A mistyped flag, the launcher's or a peer's, is answered with the nearest one.
  expect_usage_error({"--peer", "3", "--data", "synthetic"}, "did you mean '--peers'?");
  expect_usage_error({"--peers", "3", "--data", "synthetic", "--epoch", "1"},
                     "did you mean '--epochs'?");
}

// Issue 10: an impossible partition was found by the peers once they had started: exit code 2,
// but a run folder with empty plots that --compare then listed.
TEST_CASE("gossip-launch refuses an impossible partition in every mode before a run folder or a "
          "peer exists",
          "[system]") {
  gt_test::TempDir tmp("gt-launch-part");
  const std::vector<std::vector<std::string>> bad = {
      {"--mode", "fedavg", "--peers", "8", "--partition", "classes:2"},  // a label held by none
      {"--mode", "gossip", "--peers", "3", "--partition", "classes:20"},  // 10 labels
      {"--mode", "local", "--peers", "3", "--partition", "classes:20"},
      {"--mode", "central", "--peers", "3", "--partition", "classes:20"},
      {"--mode", "fedavg", "--peers", "3", "--partition", "classes:20"},
      {"--mode", "local", "--peers", "3", "--partition", "shards:5000"},  // > 6000 samples
  };
  for (auto args : bad) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    INFO(shown);
    args.insert(args.end(), {"--data", "synthetic", "--epochs", "1", "--no-plots", "--out",
                             tmp / "run"});
    std::string out;
    const int rc = run_launch(args, tmp / "bad.log", &out);
    INFO(out);
    CHECK(rc == 2);
    CHECK(out.find("--partition") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(tmp / "run"));
    std::filesystem::remove_all(tmp / "run");
  }
}
