// System tests of gossip-launch --churn (issue 10) with real peer processes: a crash, a restart
// from the checkpoint and a join over loopback; and, with --netns (root), a partition of four
// peers on four hosts and its heal.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/system_process.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// The first line of events.jsonl matching pred, or null.
template <typename Pred>
json find_event(const std::vector<json>& ev, Pred pred) {
  for (const auto& e : ev)
    if (pred(e)) return e;
  return nullptr;
}

bool is(const json& e, const char* event) { return e.value("event", "") == event; }
bool applied(const json& e, const char* kind, int peer) {
  if (!is(e, "churn") || e.value("kind", "") != kind) return false;
  for (const auto& p : e["applied_to"])
    if (p == peer) return true;
  return false;
}

std::string tail_of(const std::string& path, std::size_t n = 3000) {
  const std::string s = gt_test::read_file(path);
  return s.size() > n ? s.substr(s.size() - n) : s;
}

// A peer's id: the "peer" field of its metrics lines ("local" before it has one).
std::string peer_id(const std::string& metrics) {
  for (const auto& j : gt_test::read_metrics(metrics))
    if (j.contains("peer") && j["peer"].is_string() && j["peer"] != "local") return j["peer"];
  return "";
}

// Why gossip-launch --netns cannot run here, or null where it can.
const char* netns_missing() {
  if (::geteuid() != 0) return "--netns needs root";
  if (std::system("command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1") != 0)
    return "--netns needs `ip` (iproute2) and `nft` (nftables)";
  return nullptr;
}

// The `ip netns list` names, one per line (what follows the name cut off).
std::vector<std::string> netns_names() {
  std::vector<std::string> out;
  FILE* f = ::popen("ip netns list 2>/dev/null", "r");
  if (!f) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    std::string l(buf);
    out.push_back(l.substr(0, l.find_first_of(" \n")));
  }
  ::pclose(f);
  return out;
}

// Writes a churn scenario (its JSON text) to tmp/name; returns the path.
std::string write_scenario(const gt_test::TempDir& tmp, const std::string& name,
                           const std::string& text) {
  const std::string path = tmp / name;
  std::ofstream(path) << text;
  return path;
}

// Peer i's log lines of run that contain any of the needles, each prefixed "peer i: ".
std::string log_lines(const std::string& run, int i, std::initializer_list<const char*> needles) {
  std::string out;
  std::ifstream f(run + "/peer" + std::to_string(i) + "/log.txt");
  for (std::string l; std::getline(f, l);)
    for (const char* n : needles)
      if (l.find(n) != std::string::npos) {
        out += "peer " + std::to_string(i) + ": " + l + "\n";
        break;
      }
  return out;
}

// How many lines of text contain needle.
int count_lines(const std::string& text, const char* needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// Runs gossip-launch with args to its end (the test fails past 240 s) and warns how long the
// `what` run took; returns its exit code, and its output (also left in the file log) in *out.
int run_launch(const std::vector<std::string>& args, const std::string& log, std::string* out,
               const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = gt_test::run_app("gossip-launch", args, log, out, 240s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN(what << " run took " << secs << " s");
  return rc;
}

}  // namespace

TEST_CASE("churn: gossip-launch crashes, restarts and joins peers over loopback",
          "[system][churn][slow]") {
  gt_test::TempDir tmp("gt-churn-sys");
  const std::string run = tmp / "run";
  // Peer 3 crashes after its first checkpoints (epoch ends), is restarted after the survivors
  // had time to mark it dead, and a fifth peer joins halfway through training. Training speed
  // varies threefold with the load on the machine (1000 epochs: 12 to 14 s of training on 2 idle
  // cores; with 300, training on an idle machine ended 5 s in, before the crash was detected), so
  // the restart may come after the others are done; --min-peers-timeout bounds
  // how long the restarted peer then waits for its cohort (it is given --min-peers 4 again: see
  // the [!mayfail] test below).
  const std::string churn = "crash:3@4,restart:3@16,join:1@50%";
  std::vector<std::string> args = {"--peers", "4", "--data", "synthetic", "--model",
                                   "mlp:784-32-10", "--lr", "0.01", "--epochs", "GT_EPOCHS",
                                   "--backend", "cpu", "--no-plots", "--out", run, "--churn", churn,
                                   "--linger", "3", "--min-peers-timeout", "8"};
  const char* epochs = std::getenv("GT_CHURN_EPOCHS");
  std::replace(args.begin(), args.end(), std::string("GT_EPOCHS"),
               std::string(epochs ? epochs : "1000"));
  std::string out;
  const int rc = run_launch(args, tmp / "launch.log", &out, "churn");
  INFO("gossip-launch output:\n" << out);
  CHECK(rc == 0);
  // Each churn event is printed as it happens (issue 26, item 13).
  for (const char* said : {": crash peer 3", ": restart peer 3", ": join peer 4"})
    CHECK(out.find(said) != std::string::npos);

  const auto ev = gt_test::read_metrics(run + "/events.jsonl");
  REQUIRE_FALSE(ev.empty());
  {
    std::string all;
    for (const auto& e : ev) all += e.dump() + "\n";
    INFO("events.jsonl:\n" << all);
    const json crash = find_event(ev, [](const json& e) { return applied(e, "crash", 3); });
    REQUIRE(crash.is_object());
    const double t_crash = crash["t"];
    const json exit3 = find_event(ev, [&](const json& e) {
      return is(e, "exit") && e["peer"] == 3 && e["t"].get<double>() >= t_crash;
    });
    REQUIRE(exit3.is_object());
    CHECK(exit3["by_churn"] == true);
    CHECK(exit3["signal"] == "SIGKILL");
    const json restart = find_event(ev, [](const json& e) { return applied(e, "restart", 3); });
    REQUIRE(restart.is_object());
    CHECK(restart["t"].get<double>() >= exit3["t"].get<double>());
    int starts3 = 0;
    for (const auto& e : ev)
      if (is(e, "start") && e["peer"] == 3) ++starts3;
    CHECK(starts3 == 2);
    CHECK(find_event(ev, [&](const json& e) {
            return is(e, "start") && e["peer"] == 3 && e["t"].get<double>() >= restart["t"].get<double>();
          }).is_object());
    const json join = find_event(ev, [](const json& e) { return applied(e, "join", 4); });
    REQUIRE(join.is_object());
    CHECK(find_event(ev, [](const json& e) { return is(e, "start") && e["peer"] == 4; }).is_object());
    // Every churn event fell inside training: nothing was skipped.
    for (const auto& e : ev)
      if (is(e, "churn")) {
        INFO(e.dump());
        CHECK_FALSE(e.contains("skipped"));
      }
    // No exit but the crash was the scenario's, and none was a failure.
    for (const auto& e : ev)
      if (is(e, "exit") && e["t"] != exit3["t"]) {
        INFO(e.dump());
        CHECK(e["by_churn"] == false);
        CHECK(e["exit_code"] == 0);
      }
  }

  const json s = read_json_file(run + "/summary.json");
  INFO("summary.json:\n" << s.dump(1));
  REQUIRE(s["peers"].size() == 5);
  CHECK(s["peers"][4]["peer"] == 4);
  CHECK(s["failed_peers"] == json::array());
  for (const auto& p : s["peers"]) {
    INFO("peer " << p["peer"]);
    CHECK(p["failed"] == false);
    CHECK(p["state"] == "done");
    CHECK(p["alive_at_end"] == true);
  }
  CHECK(s["peers"][3]["final_test_acc"].is_number());
  CHECK(s["peers"][4]["final_test_acc"].is_number());

  const json& churn_s = s["churn"];
  CHECK(churn_s["scenario"] == churn);
  CHECK(churn_s["applied"] == json{{"crash", 1}, {"restart", 1}, {"join", 1}});
  json crash_entry, join_entry;
  for (const auto& e : churn_s["events"]) {
    if (e["kind"] == "crash" && e["peer"] == 3) crash_entry = e;
    if (e["kind"] == "join" && e["peer"] == 4) join_entry = e;
  }
  REQUIRE(crash_entry.is_object());
  // At least one survivor marked peer 3 dead before its restart came back.
  CHECK_FALSE(crash_entry["detected_by_s"].empty());
  for (const auto& [who, when] : crash_entry["detected_by_s"].items()) {
    INFO("detected by " << who);
    CHECK(when.get<double>() > 0.0);
    CHECK(when.get<double>() <= churn_s["detection_bound_s"].get<double>() + 5.0);
  }
  REQUIRE(join_entry.is_object());
  CHECK(join_entry["first_eval_acc"].is_number());
  CHECK(join_entry["catch_up"].is_object());
  // Alive over time: four peers at most before the join, five after the restart and the join,
  // zero at the end.
  const json& alive = churn_s["peers_alive_over_time"];
  REQUIRE_FALSE(alive.empty());
  int most = 0;
  for (const auto& a : alive) most = std::max(most, a[1].get<int>());
  CHECK(most <= 5);
  CHECK(alive.back()[1] == 0);

  // Peer 3 came back from its own checkpoint; peer 4 fetched a live peer's state.
  const std::string log3 = gt_test::read_file(run + "/peer3/log.txt");
  {
    INFO("peer 3 log:\n" << log3.substr(log3.size() > 4000 ? log3.size() - 4000 : 0));
    CHECK(log3.find("resumed from checkpoint in") != std::string::npos);
  }
  bool caught_up = false;
  for (const auto& j : gt_test::read_metrics(run + "/peer4/metrics.jsonl"))
    if (j["event"] == "catch_up" && j["ok"] == true) caught_up = true;
  INFO("peer 4 log:\n" << tail_of(run + "/peer4/log.txt"));
  CHECK(caught_up);
}

TEST_CASE("churn: gossip-launch --netns partitions four peers and heals them", "[system][churn][netns][slow]") {
  if (const char* why = netns_missing()) {
    WARN("skipped: " << why);
    return;
  }
  gt_test::TempDir tmp("gt-churn-netns");
  const std::string run = tmp / "run";
  // Partitioned early for 8 s: long enough for each side to suspect the other, short enough that
  // nobody is declared dead (suspicion with one confirmation lasts about 11 s), and training goes
  // on after the heal even on an idle machine (1400 epochs: 700 took 10 s on an idle machine on
  // 2026-11-27, and ended before the heal; 350 had taken 14 s before; about 100 s a 700 on busy
  // cores).
  const double at = 3.0, dur = 8.0;
  const std::string scenario =
      write_scenario(tmp, "part.json",
                     R"({"events":[{"at":)" + std::to_string(at) +
                         R"(,"event":"partition","groups":[[0,1],[2,3]],"for":)" +
                         std::to_string(dur) + "}]}");
  const char* epochs = std::getenv("GT_CHURN_NETNS_EPOCHS");
  const std::vector<std::string> args = {
      "--peers", "4", "--data", "synthetic", "--model", "mlp:784-32-10",
      "--lr", "0.01", "--epochs", epochs ? epochs : "1400", "--backend", "cpu",
      "--no-plots", "--out", run, "--netns", "--churn", scenario, "--linger", "5"};
  std::string out;
  const int rc = run_launch(args, tmp / "launch.log", &out, "netns partition");
  INFO("gossip-launch output:\n" << out);
  CHECK(rc == 0);

  const auto ev = gt_test::read_metrics(run + "/events.jsonl");
  std::string all;
  for (const auto& e : ev) all += e.dump() + "\n";
  INFO("events.jsonl:\n" << all);
  const json ns = find_event(ev, [](const json& e) { return is(e, "netns"); });
  REQUIRE(ns.is_object());
  const std::string run_id = ns["run_id"];
  const json part = find_event(ev, [](const json& e) {
    return is(e, "churn") && e.value("kind", "") == "partition";
  });
  const json heal = find_event(ev, [](const json& e) {
    return is(e, "churn") && e.value("kind", "") == "heal";
  });
  REQUIRE(part.is_object());
  REQUIRE(heal.is_object());
  const double tp = part["t"], th = heal["t"];
  CHECK(th - tp == Approx(dur).margin(1.0));

  const json s = read_json_file(run + "/summary.json");
  REQUIRE(s["peers"].size() == 4);
  CHECK(s["failed_peers"] == json::array());
  // The run outlasted the partition (otherwise nothing below says anything).
  double last_exit = 0;
  for (const auto& e : ev)
    if (is(e, "exit")) last_exit = std::max(last_exit, e["t"].get<double>());
  REQUIRE(last_exit > th + 5.0);

  auto group = [](int i) { return i < 2 ? 0 : 1; };
  // Peer ids and each peer's clock offset (launch time of its t = 0).
  std::vector<std::string> ids;
  std::map<std::string, int> index;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(peer_id(run + "/peer" + std::to_string(i) + "/metrics.jsonl"));
    REQUIRE_FALSE(ids.back().empty());
    index[ids.back()] = i;
  }
  // Each peer's exchange and member lines with launch times (peer clock + its clock offset).
  struct Line {
    double t;
    int peer, other;
    json j;
  };
  std::vector<Line> exchanges, members;
  for (int i = 0; i < 4; ++i) {
    const json& p = s["peers"][std::size_t(i)];
    REQUIRE(p["clock_offset_s"].is_number());
    const double off = p["clock_offset_s"];
    for (const auto& j : gt_test::read_metrics(run + "/peer" + std::to_string(i) + "/metrics.jsonl")) {
      const std::string e = j["event"];
      if (e != "exchange" && e != "member") continue;
      const auto it = index.find(j[e == "exchange" ? "partner" : "member"].get<std::string>());
      if (it == index.end()) continue;
      (e == "exchange" ? exchanges : members).push_back({off + j["t"].get<double>(), i, it->second, j});
    }
  }
  // No exchange succeeded across the groups while the partition held (with a margin for the
  // clock estimate and transfers under way at its start), and some did after the heal.
  const double margin = 2.0;
  int cross_during = 0, cross_after = 0, within_during = 0;
  std::string cross_lines;
  for (const auto& x : exchanges) {
    if (x.j["ok"] != true) continue;
    const bool cross = group(x.peer) != group(x.other);
    if (x.t > tp + margin && x.t < th - margin) {
      if (cross) {
        ++cross_during;
        cross_lines += "peer " + std::to_string(x.peer) + " at " + std::to_string(x.t) + ": " +
                       x.j.dump() + "\n";
      } else {
        ++within_during;
      }
    }
    if (cross && x.t > th) ++cross_after;
  }
  INFO("cross-group exchanges during the partition:\n" << cross_lines);
  CHECK(cross_during == 0);
  CHECK(cross_after > 0);
  // Not asserted: each side averaging within itself meanwhile. Partners that do not answer are
  // backed off and the answer deadline is fitted (tests/gossip_partition.cpp tests that on the
  // in-memory network), but an exchange across whose transfer was under way at the split holds
  // both its peers until the transfer deadline (10 s, longer than the partition): with two peers a
  // side, that leaves each side one free peer and nobody to average with. On 2026-11-27 at load
  // 8-12, 6 runs of this test: 0 within a side in 4 (3 of them inspected: each had such an
  // exchange, 9.3 to 10 s), 1432 and 2452 in the other 2.
  int held_across = 0;  // exchanges across the split that lasted through most of it
  for (const auto& x : exchanges) {
    const double start = x.t - x.j.value("ms", 0.0) / 1000.0;
    if (group(x.peer) != group(x.other) && start < tp + margin && x.t > th - margin) ++held_across;
  }
  WARN("successful exchanges within a side during the partition: "
       << within_during << "; exchange ends held across it through the partition: " << held_across);

  // Membership: during the partition some peer suspected (or declared dead) one across it; after
  // the heal each peer's last word on every other (before they leave at the end) is "alive".
  bool suspected_across = false;
  std::map<std::pair<int, int>, std::string> last_state;
  std::sort(members.begin(), members.end(), [](const Line& a, const Line& b) { return a.t < b.t; });
  for (const auto& m : members) {
    const std::string st = m.j["state"];
    if (m.t >= tp - 0.5 && m.t <= th + margin && group(m.peer) != group(m.other) &&
        (st == "suspect" || st == "dead"))
      suspected_across = true;
    // A peer done training leaves: what counts is how the others saw it before.
    if (st != "left") last_state[{m.peer, m.other}] = st;
  }
  CHECK(suspected_across);
  for (int q = 0; q < 4; ++q)
    for (int m = 0; m < 4; ++m) {
      if (q == m) continue;
      INFO("peer " << q << " about peer " << m);
      CHECK(last_state[{q, m}] == "alive");
    }

  // Nothing of this run is left in `ip netns list`.
  for (const auto& n : netns_names()) {
    INFO("left behind: " << n);
    CHECK(n.find("gt-" + run_id + "-") != 0);
  }
}

// Defects issue, item 3: a partition that heals after every peer finished training was crossed
// only if the sides were still there at the heal; with the default --linger (10 s) they had left
// (consensus 0.18 in this run on 2026-11-29 with --linger-heal 0, the sides apart for half of
// training). --linger-heal keeps a peer that sees a third of the swarm silent (dead or suspected)
// without leaving.
TEST_CASE("churn: a partition that heals after training is crossed by the lingering sides",
          "[system][churn][netns][slow]") {
  if (const char* why = netns_missing()) {
    WARN("skipped: " << why);
    return;
  }
  gt_test::TempDir tmp("gt-churn-heal-late");
  const std::string run = tmp / "run";
  // Split at half of training for 25 s: about 10 s of training on an idle 2-core machine, so the
  // second half ends about 5 s after the split and the default linger 10 s later, before the heal.
  const std::string scenario = write_scenario(
      tmp, "part.json",
      R"({"events":[{"at_progress":0.5,"event":"partition","groups":[[0,1],[2,3]],"for":25}]})");
  const std::vector<std::string> args = {
      "--peers", "4", "--data", "synthetic", "--model", "mlp:784-32-10", "--epochs", "700",
      "--backend", "cpu", "--no-plots", "--out", run, "--netns", "--churn", scenario};
  std::string out;
  const int rc = run_launch(args, tmp / "launch.log", &out, "late heal");
  INFO("gossip-launch output:\n" << out);
  REQUIRE(rc == 0);
  const json s = read_json_file(run + "/summary.json");
  CHECK(s["failed_peers"] == json::array());
  std::string lines;
  for (int i = 0; i < 4; ++i) lines += log_lines(run, i, {"linger: "});
  INFO("the peers' linger lines:\n" << lines);
  const int held = count_lines(lines, "silent without leaving");
  const int back = count_lines(lines, "members back");
  if (held == 0) {
    // The heal came before any peer's linger ended (a slow machine): the settle exchanges of the
    // linger cross it, which the partition test above covers; the consensus below still holds.
    WARN("no peer lingered for the heal: training outlasted the partition here");
  } else {
    CHECK(back == held);  // every peer that waited saw the other side back
  }
  REQUIRE(s["consensus_distance"].is_number());
  CHECK(s["consensus_distance"].get<double>() <= 0.05);
}

// Defects issue, item 4: a peer paused (SIGSTOP) for a third of the run came back where it stopped,
// far from the swarm; robust mixing clipped every exchange of it, and it trained the rest of its run
// alone (consensus 1.22 with --catch-up-behind off, 2026-11-30). With the default it sees partners
// well ahead clip it away, hands back from the step hook, fetches a partner's state and trains on
// from there.
TEST_CASE("churn: a paused peer left far behind catches up from a partner mid-run",
          "[system][churn][slow]") {
  if (!gt_test::fashion_mnist_present()) {
    WARN("skipped: Fashion-MNIST is not installed (dataset-fashion-mnist)");
    return;
  }
  gt_test::TempDir tmp("gt-churn-paused");
  const std::string run = tmp / "run";
  const std::string scenario = write_scenario(
      tmp, "pause.json", R"({"events":[{"at_progress":0.2,"event":"pause","peers":[3],"for":10}]})");
  // Fashion-MNIST (robust mixing needs real distances: on the synthetic task the models agree
  // too soon for a clip to say anything); 6 epochs train in about 14 s on an idle 2-core machine.
  const std::vector<std::string> args = {
      "--peers", "4", "--model", "mlp:784-64-10", "--epochs", "6", "--seed", "1",
      "--backend", "cpu", "--no-plots", "--out", run, "--churn", scenario};
  std::string out;
  const int rc = run_launch(args, tmp / "launch.log", &out, "paused peer");
  INFO("gossip-launch output:\n" << out);
  REQUIRE(rc == 0);
  const json s = read_json_file(run + "/summary.json");
  CHECK(s["failed_peers"] == json::array());
  const std::string lines = log_lines(run, 3, {"left behind", "caught up", "linger: "});
  INFO("peer 3's catch-up lines:\n" << lines);
  const bool left_behind = count_lines(lines, "left behind: ") > 0;
  const bool caught_up = count_lines(lines, "caught up with ") > 0;
  if (!left_behind) {
    // The others finished before peer 3 resumed (a slow machine): it took a finished partner's
    // state at the end instead, or the settle exchanges met it; the consensus below still holds.
    WARN("peer 3 was not left behind mid-run here");
  } else {
    CHECK(caught_up);
  }
  REQUIRE(s["consensus_distance"].is_number());
  CHECK(s["consensus_distance"].get<double>() <= 0.05);
  REQUIRE(s["final_test_acc_min"].is_number());
  CHECK(s["final_test_acc_max"].get<double>() - s["final_test_acc_min"].get<double>() <= 0.005);
}

// Defects issue, item 8: in a local launch every process of a restarted peer was shifted by its
// latest start, so its first evaluations were drawn after its crash. summary.json now gives each
// process's start (life_offsets_s); on them, the first process's evaluations fall before the crash,
// where the launcher saw them, and its time to the target is the first time it got there.
TEST_CASE("churn: each process of a crashed and restarted peer is on the run's one clock",
          "[system][churn][slow]") {
  gt_test::TempDir tmp("gt-churn-clock");
  const std::string run = tmp / "run";
  const char* epochs = std::getenv("GT_CHURN_EPOCHS");
  const std::vector<std::string> args = {
      "--peers", "3", "--data", "synthetic", "--model", "mlp:784-32-10", "--lr", "0.01",
      "--epochs", epochs ? epochs : "800", "--backend", "cpu", "--no-plots", "--out", run,
      "--churn", "crash:1@30%,restart:1@50%", "--target-acc", "0.3", "--linger", "0",
      "--min-peers-timeout", "8"};
  std::string out;
  const int rc = run_launch(args, tmp / "launch.log", &out, "crash-restart clock");
  INFO("gossip-launch output:\n" << out);
  REQUIRE(rc == 0);
  const auto ev = gt_test::read_metrics(run + "/events.jsonl");
  const json crash = find_event(ev, [](const json& e) { return applied(e, "crash", 1); });
  const json restart = find_event(ev, [](const json& e) { return applied(e, "restart", 1); });
  REQUIRE(crash.is_object());
  REQUIRE(restart.is_object());
  const double t_crash = crash["t"], t_restart = restart["t"];
  // What the launcher saw of peer 1's evaluations before the crash, on its clock (each read
  // within a poll tick of being written: never earlier than the evaluation itself).
  std::vector<double> seen;
  for (const auto& e : ev)
    if (is(e, "eval") && e["peer"] == 1 && e["t"].get<double>() < t_crash)
      seen.push_back(e["t"].get<double>());
  // 800 epochs: with 400 a quiet machine ran the whole run in 6.7 s (2026-11-29, a clean-clone
  // rehearsal) and peer 1, started last, was crashed at 2.9 s before the launcher had read any of
  // its evaluations.
  INFO("crash at " << t_crash << " s, restart at " << t_restart << " s");
  REQUIRE_FALSE(seen.empty());

  const json s = read_json_file(run + "/summary.json");
  const json& p = s["peers"][1];
  INFO("summary.json peer 1:\n" << p.dump(1));
  REQUIRE(p.contains("life_offsets_s"));
  REQUIRE(p["life_offsets_s"].is_array());
  REQUIRE(p["life_offsets_s"].size() == 2);
  const double life0 = p["life_offsets_s"][0], life1 = p["life_offsets_s"][1];
  CHECK(life0 < t_crash);
  CHECK(life1 >= t_restart);
  CHECK(p["clock_offset_s"].get<double>() == Approx(life1));

  // Peer 1's first process's evaluations, each on the run's clock by that process's start.
  std::vector<double> mine;
  std::optional<double> first_at_target;
  double last_t = -1.0;
  for (const auto& j : gt_test::read_metrics(run + "/peer1/metrics.jsonl")) {
    if (!j.contains("t") || !j["t"].is_number()) continue;
    const double t = j["t"].get<double>();
    if (last_t >= 0 && t < last_t) break;  // the restarted process
    last_t = t;
    if (j["event"] != "eval" || !j["test_acc"].is_number()) continue;
    mine.push_back(life0 + t);
    if (!first_at_target && j["test_acc"].get<double>() >= 0.3) first_at_target = life0 + t;
  }
  // (The launcher may have read the last one or two after the crash.)
  REQUIRE(mine.size() >= seen.size());
  for (double m : mine) CHECK(m < t_crash);
  for (std::size_t k = 0; k < seen.size(); ++k) {
    INFO("evaluation " << k << ": " << mine[k] << " s on the run's clock, seen at " << seen[k]);
    CHECK(mine[k] <= seen[k] + 0.05);
    CHECK(mine[k] >= seen[k] - 5.0);  // a poll tick, stretched by a loaded machine
  }
  if (first_at_target) {
    CHECK(p["time_to_target_launch_s"].get<double>() == Approx(*first_at_target).margin(1e-6));
  } else {
    WARN("peer 1 did not reach 30% before its crash: its time to target is not checked");
  }
}
