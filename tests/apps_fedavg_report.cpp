// Issue 33 without processes: a crash or stop with "for" restarts the peer that long after it
// was applied; the FedAvg server's outage report from hand-written events.jsonl lines; the
// figures that compare FedAvg and gossip runs (roles, rounds and exchanges to the target).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "apps/launch/churn.hpp"
#include "apps/launch/fedavg_report.hpp"
#include "apps/launch/options.hpp"
#include "core/churn/scenario.hpp"

using namespace gossiptrain::apps;
using gossiptrain::core::ChurnKind;
using Catch::Contains;
using nlohmann::json;

namespace {

std::vector<json> ev(const std::string& jsonl_list) {
  std::vector<json> out;
  for (const auto& e : json::parse(jsonl_list)) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("churn: a crash with /FOR restarts its peer FOR seconds after it was applied",
          "[churn]") {
  const auto s = gossiptrain::core::load_churn_scenario("crash:0@40%/20", 3);
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].kind == ChurnKind::Crash);
  CHECK(s.events[0].by_progress);
  CHECK(s.events[0].for_s == 20.0);
  ChurnDriver d(s, 1000);
  CHECK_FALSE(d.start_pending());  // nothing to restart before the crash
  CHECK(d.due(5.0, 0.39).empty());
  auto a = d.due(7.0, 0.4);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == ChurnKind::Crash);
  CHECK(d.start_pending());  // the launcher waits for the restart although no peer may run
  CHECK(d.due(26.9, 1.0).empty());
  auto b = d.due(27.0, 1.0);
  REQUIRE(b.size() == 1);
  CHECK(b[0].kind == ChurnKind::Restart);
  CHECK(b[0].peers == std::vector<int>{0});
  CHECK_FALSE(d.start_pending());
  // In the file format too, and the lifecycle check knows the peer is up again after it.
  const auto f = gossiptrain::core::parse_churn_scenario(
      json::parse(R"({"events":[{"at":5,"event":"stop","peers":[1],"for":4},
                                {"at":12,"event":"crash","peers":[1]}]})"),
      3);
  CHECK(f.events.size() == 2);
  CHECK_THROWS_WITH(gossiptrain::core::parse_churn_scenario(
                        json::parse(R"({"events":[{"at":5,"event":"crash","peers":[1],"for":4},
                                                  {"at":12,"event":"restart","peers":[1]}]})"),
                        3),
                    Contains("peer 1 was not crashed or stopped"));
  CHECK_THROWS_WITH(gossiptrain::core::load_churn_scenario("restart:0@5/3", 3),
                    Contains("only crash, stop and pause take /FOR"));
  CHECK_THROWS_WITH(gossiptrain::core::load_churn_scenario("crash:0@5/0", 3),
                    Contains("\"for\" must be > 0"));
}

TEST_CASE("fedavg report: a crashed server's outage, from the last round before to the first "
          "after its restart",
          "[churn]") {
  const auto events = ev(R"([
    {"t":0.1,"event":"start","peer":0},
    {"t":1.0,"event":"eval","peer":0,"step":1,"test_acc":0.5},
    {"t":2.0,"event":"eval","peer":0,"step":2,"test_acc":0.6},
    {"t":2.5,"event":"eval","peer":1,"step":3,"test_acc":0.6},
    {"t":3.0,"event":"churn","kind":"crash","applied_to":[0],"source":"scenario"},
    {"t":3.2,"event":"exit","peer":0,"exit_code":null,"signal":"SIGKILL","by_churn":true},
    {"t":2.9,"event":"eval","peer":0,"step":3,"test_acc":0.65},
    {"t":23.0,"event":"churn","kind":"restart","applied_to":[0],"source":"scenario"},
    {"t":23.0,"event":"start","peer":0},
    {"t":27.0,"event":"eval","peer":0,"step":4,"test_acc":0.7},
    {"t":28.0,"event":"eval","peer":0,"step":5,"test_acc":0.72},
    {"t":29.0,"event":"exit","peer":0,"exit_code":0,"signal":null,"by_churn":false}])");
  // Round 3's line is timed 0.1 s after the crash (the clock estimate), but the restart resumed
  // from it: it was done before the crash.
  auto late = events;
  late[6]["t"] = 3.1;
  const json l = fedavg_report(late, 30.0);
  CHECK(l["server_outages"][0]["last_round_before"] == 3);
  CHECK(l["server_outages"][0]["last_round_before_at_s"] == 3.0);
  const json r = fedavg_report(events, 30.0);
  CHECK(r["rounds_completed"] == 5);
  REQUIRE(r["server_outages"].size() == 1);
  const json& o = r["server_outages"][0];
  CHECK(o["how"] == "crash");
  CHECK(o["down_at_s"] == 3.0);  // the crash, not when its exit was reaped
  CHECK(o["back_at_s"] == 23.0);
  CHECK(o["down_s"] == 20.0);
  // Round 3 was done before the crash although the launcher read it after (its own clock).
  CHECK(o["last_round_before"] == 3);
  CHECK(o["first_round_after"] == 4);
  CHECK(o["resumed_at_round"] == 3);
  CHECK(o["no_progress_s"].get<double>() == Approx(27.0 - 2.9));
  CHECK(o["recovered"] == true);
  CHECK(r["no_progress_s_total"].get<double>() == Approx(24.1));
  const auto lines = describe_fedavg_outages(r);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Contains("no round completed for 24.1 s"));
  CHECK_THAT(lines[0], Contains("resumed at round 3"));
}

TEST_CASE("fedavg report: a server that never comes back stalls the run to its end, a clean "
          "exit or a Ctrl-C is no outage",
          "[churn]") {
  const json gone = fedavg_report(ev(R"([
    {"t":0.1,"event":"start","peer":0},
    {"t":1.0,"event":"eval","peer":0,"step":1,"test_acc":0.5},
    {"t":4.0,"event":"exit","peer":0,"exit_code":1,"signal":null,"by_churn":false}])"),
                                  10.0);
  REQUIRE(gone["server_outages"].size() == 1);
  CHECK(gone["server_outages"][0]["how"] == "exit");
  CHECK(gone["server_outages"][0]["recovered"] == false);
  CHECK(gone["server_outages"][0]["back_at_s"].is_null());
  CHECK(gone["server_outages"][0]["no_progress_s"] == 9.0);
  CHECK_THAT(describe_fedavg_outages(gone)[0], Contains("no round completed after it"));
  for (const char* code : {"0", "130"}) {
    const json clean = fedavg_report(
        ev(std::string(R"([{"t":0.1,"event":"start","peer":0},
                           {"t":4.0,"event":"exit","peer":0,"signal":null,"by_churn":false,
                            "exit_code":)") + code + "}]"),
        5.0);
    CHECK(clean["server_outages"].empty());
  }
  // A paused server is down from its pause to its resume.
  const json paused = fedavg_report(ev(R"([
    {"t":0.1,"event":"start","peer":0},
    {"t":1.0,"event":"eval","peer":0,"step":1,"test_acc":0.5},
    {"t":2.0,"event":"churn","kind":"pause","applied_to":[0]},
    {"t":7.0,"event":"churn","kind":"resume","applied_to":[0]},
    {"t":8.0,"event":"eval","peer":0,"step":2,"test_acc":0.5}])"),
                                    9.0);
  REQUIRE(paused["server_outages"].size() == 1);
  CHECK(paused["server_outages"][0]["down_s"] == 5.0);
  CHECK(paused["server_outages"][0]["no_progress_s"] == 7.0);
}

TEST_CASE("summary: a FedAvg server is not a peer, rounds or exchanges to the target", "[launch]") {
  std::vector<PeerStats> st(3);
  st[0].target_epoch = 4;  // the server reached the target in round 4
  json s = {{"peers", json::array({{{"peer", 0}, {"time_to_target_launch_s", 12.5}},
                                    {{"peer", 1}}, {{"peer", 2}}})},
            {"time_to_target_s", nullptr}};
  add_target_figures(s, LaunchMode::Fedavg, 10, st);
  CHECK(s["time_to_target_s"] == 12.5);  // the server's global model, whatever the clients did
  CHECK(s["num_peers"] == 2);
  CHECK(s["num_servers"] == 1);
  CHECK(s["peers"][0]["role"] == "server");
  CHECK(s["peers"][2]["role"] == "client");
  CHECK(s["rounds_to_target"] == 4);
  CHECK(s["epochs_to_target"] == 40);
  CHECK(s["exchanges_to_target"].is_null());
  CHECK(to_target_cell(s) == "4 rounds");
  CHECK(peers_cell(s) == "2 + server");

  std::vector<PeerStats> g(2);
  g[0].target_epoch = 3;
  g[0].target_exchanges = 10;
  json t = {{"peers", json::array({{{"peer", 0}}, {{"peer", 1}}})}};
  add_target_figures(t, LaunchMode::Gossip, 1, g);
  CHECK(t["exchanges_to_target"].is_null());  // peer 1 never reached it
  CHECK(to_target_cell(t) == "-");
  g[1].target_epoch = 5;
  g[1].target_exchanges = 7;
  add_target_figures(t, LaunchMode::Gossip, 1, g);
  CHECK(t["num_peers"] == 2);
  CHECK(t["num_servers"] == 0);
  CHECK(t["peers"][1]["role"] == "peer");
  CHECK(t["exchanges_to_target"] == 17);
  CHECK(t["epochs_to_target"] == 5);
  CHECK(t["rounds_to_target"].is_null());
  CHECK(to_target_cell(t) == "17 exch");
  CHECK(peers_cell(t) == "2");
}

TEST_CASE("gossip-launch --mode fedavg takes churn scenarios on the server (peer 0) and clients, "
          "but no fault events",
          "[launch]") {
  const auto o = parse_launch_args({"--mode", "fedavg", "--peers", "4", "--data", "synthetic",
                                    "--churn", "crash:0@40%/20,join:1@50%"});
  REQUIRE(o.churn);
  CHECK(o.peers == 5);    // the server and 4 clients
  CHECK(o.slots() == 6);  // and one joining client
  const auto plans = plan_peers(o, "/tmp/x", {1, 2, 3, 4, 5, 6}, "");
  REQUIRE(plans.size() == 6);
  CHECK(plans[5].config.shard == 4);  // the joiner trains the next shard, as in gossip
  CHECK(plans[5].config.num_shards == 5);
  CHECK(plans[5].config.fedavg.server_addr == "127.0.0.1:1");
  CHECK(fedavg_restart_args(0) == std::vector<std::string>{"--min-clients-timeout", "10"});
  CHECK(fedavg_restart_args(3).empty());
}
