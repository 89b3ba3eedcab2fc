// gossip-launch --churn without processes (issue 10): when ChurnDriver says each event is due
// (timed, by progress, and the end of an effect given with "for"), what ChurnRunner does to a fake
// set of peers and writes to events.jsonl, churn_report on hand-written event lines, and the
// refusals of parse_launch_args for scenarios the launcher cannot run.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "apps/launch/churn.hpp"
#include "apps/launch/netns.hpp"
#include "apps/launch/options.hpp"
#include "core/churn/scenario.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::apps;
using gossiptrain::core::ChurnEvent;
using gossiptrain::core::ChurnKind;
using gossiptrain::core::ChurnScenario;
using Catch::Contains;
using nlohmann::json;

namespace {

ChurnScenario scenario(const std::string& json_text, int peers) {
  return gossiptrain::core::parse_churn_scenario(json::parse(json_text), peers);
}
ChurnScenario shorthand(const std::string& s, int peers) {
  return gossiptrain::core::load_churn_scenario(s, peers);
}

// A scenario the parser would refuse (it checks that each event finds its peers in the right
// state): the runner must still guard against it, as against timing it cannot foresee.
ChurnScenario unchecked(int peers, std::vector<ChurnEvent> events) {
  ChurnScenario s;
  s.initial_peers = peers;
  s.events = std::move(events);
  return s;
}
ChurnEvent ev(ChurnKind k, double at, std::vector<int> peers) {
  ChurnEvent e;
  e.kind = k;
  e.at = at;
  e.peers = std::move(peers);
  return e;
}

std::vector<ChurnKind> kinds(const std::vector<ChurnEvent>& v) {
  std::vector<ChurnKind> k;
  for (const auto& e : v) k.push_back(e.kind);
  return k;
}

// Records every call; running() is what the test sets (the launcher's reaping is the test's job).
struct FakePeers : ChurnPeers {
  explicit FakePeers(int slots) : up(std::size_t(slots), false) {}
  bool running(int i) const override { return up.at(std::size_t(i)); }
  void send_signal(int i, int sig) override { signals.push_back({i, sig}); }
  void start_peer(int i) override {
    starts.push_back(i);
    up.at(std::size_t(i)) = true;
  }
  void partition(const std::vector<std::vector<int>>& groups) override { partitions.push_back(groups); }
  void heal() override { ++heals; }
  void set_link(int i, std::optional<double> rate, std::optional<double> loss) override {
    links.push_back({i, rate, loss});
  }
  void set_fault(int i, const std::string& mode) override { faults.push_back({i, mode}); }
  struct Link {
    int peer;
    std::optional<double> rate, loss;
  };
  std::vector<bool> up;
  std::vector<std::pair<int, int>> signals;
  std::vector<int> starts;
  std::vector<std::vector<std::vector<int>>> partitions;
  int heals = 0;
  std::vector<Link> links;
  std::vector<std::pair<int, std::string>> faults;
};

}  // namespace

TEST_CASE("ChurnRunner: a fault restarts the peer with the mode, and honest again after for",
          "[churn]") {
  EventLog log;
  ChurnRunner r(gossiptrain::core::parse_churn_scenario(nlohmann::json::parse(
                    R"({"events":[{"at":2,"event":"fault","peers":[1],"mode":"scale:1000","for":5}]})"),
                                     3),
                1000, log);
  FakePeers p(3);
  for (int i = 0; i < 3; ++i) {
    p.up[std::size_t(i)] = true;
    r.started(i);
  }
  r.tick(2.0, 0, p);
  REQUIRE(p.faults == std::vector<std::pair<int, std::string>>{{1, "scale:1000"}});
  CHECK(p.signals == std::vector<std::pair<int, int>>{{1, SIGTERM}});
  CHECK(p.starts.empty());  // not while the stopped process is still there
  CHECK(r.waiting_for_restart());
  p.up[1] = false;
  CHECK(r.exited(1));  // the scenario's own stop: not a failure
  r.tick(2.2, 0, p);
  CHECK(p.starts == std::vector<int>{1});
  CHECK(r.state(1) == SlotState::Up);
  r.tick(6.9, 0, p);
  CHECK(p.faults.size() == 1);
  r.tick(7.1, 0, p);  // 2 + for 5
  REQUIRE(p.faults.size() == 2);
  CHECK(p.faults[1] == std::pair<int, std::string>{1, ""});
  p.up[1] = false;
  CHECK(r.exited(1));
  r.tick(7.3, 0, p);
  CHECK(p.starts == std::vector<int>{1, 1});
}

namespace {

// Peers 0..n-1 started and running, as the launcher leaves them before the first tick.
void start_all(ChurnRunner& r, FakePeers& p, int n) {
  for (int i = 0; i < n; ++i) {
    p.up[std::size_t(i)] = true;
    r.started(i);
  }
}

// A runner of a scenario over `slots` fake peers, the first `started` of them running.
struct Churn {
  Churn(gossiptrain::core::ChurnScenario s, int slots, int started)
      : r(std::move(s), 1000, log), p(slots) {
    start_all(r, p, started);
  }
  EventLog log;
  ChurnRunner r;
  FakePeers p;
};

// The churn lines of the log.
std::vector<json> churn_lines(const EventLog& log) {
  std::vector<json> out;
  for (const auto& j : log.lines())
    if (j["event"] == "churn") out.push_back(j);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ChurnDriver

TEST_CASE("ChurnDriver: timed events come out at their time, in time order, stamped with when "
          "they are applied", "[churn]") {
  ChurnDriver d(scenario(R"({"events":[{"at":5,"event":"crash","peers":[1]},
                                      {"at":2,"event":"stop","peers":[0]},
                                      {"at":9,"event":"restart","peers":[1]}]})",
                         4),
                1000);
  CHECK_FALSE(d.empty());
  CHECK(d.start_pending());
  CHECK(d.due(0.0, 0.0).empty());
  CHECK(d.due(1.99, 0.9).empty());  // progress does not move timed events
  auto a = d.due(2.0, 0.0);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == ChurnKind::Stop);
  CHECK(a[0].peers == std::vector<int>{0});
  CHECK(a[0].at == 2.0);
  CHECK(d.due(4.9, 0.0).empty());
  // A late tick gets every event that has come due, in time order, each stamped with now.
  auto b = d.due(10.0, 0.0);
  REQUIRE(b.size() == 2);
  CHECK(kinds(b) == std::vector<ChurnKind>{ChurnKind::Crash, ChurnKind::Restart});
  CHECK(b[0].at == 10.0);
  CHECK(b[1].at == 10.0);
  CHECK_FALSE(b[0].by_progress);
  CHECK(d.due(100.0, 1.0).empty());  // nothing comes out twice
  CHECK(d.empty());
  CHECK_FALSE(d.start_pending());
}

TEST_CASE("ChurnDriver: progress events when the swarm's progress reaches them", "[churn]") {
  ChurnDriver d(shorthand("join:1@50%,crash:0@25%,pause:1@90%", 3), 1000);
  CHECK(d.total_peers() == 4);
  CHECK(d.due(100.0, 0.24).empty());  // time does not move progress events
  auto a = d.due(3.0, 0.25);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == ChurnKind::Crash);
  CHECK_FALSE(a[0].by_progress);  // applied at a time now
  CHECK(a[0].at == 3.0);
  // Progress jumping past two of them gives both, in progress order.
  auto b = d.due(7.0, 0.95);
  CHECK(kinds(b) == std::vector<ChurnKind>{ChurnKind::Join, ChurnKind::Pause});
  CHECK(d.empty());
}

TEST_CASE("ChurnDriver: timed events before progress events in one tick", "[churn]") {
  ChurnDriver d(scenario(R"({"events":[{"at_progress":0.1,"event":"crash","peers":[0]},
                                      {"at":1,"event":"crash","peers":[1]}]})",
                         3),
                1000);
  auto a = d.due(5.0, 0.5);
  REQUIRE(a.size() == 2);
  CHECK(a[0].peers == std::vector<int>{1});
  CHECK(a[1].peers == std::vector<int>{0});
}

TEST_CASE("ChurnDriver: \"for\" ends a pause, a partition and a link at (applied time + for)",
          "[churn]") {
  ChurnDriver d(scenario(R"({"events":[
      {"at":1,"event":"pause","peers":[2],"for":3},
      {"at":2,"event":"partition","groups":[[0,1],[2,3]],"for":10},
      {"at_progress":0.5,"event":"link","peers":[1],"rate_mbit":5,"loss":0.1,"for":4},
      {"at":8,"event":"crash","peers":[0]}]})",
                         4),
                1000);
  // The pause is applied late (1.5 instead of 1): its resume is due at 1.5 + 3, not 1 + 3.
  auto a = d.due(1.5, 0.0);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == ChurnKind::Pause);
  CHECK(d.start_pending());  // the resume to come
  auto b = d.due(2.0, 0.0);
  REQUIRE(b.size() == 1);
  CHECK(b[0].kind == ChurnKind::Partition);
  CHECK(d.due(4.49, 0.0).empty());
  auto c = d.due(4.5, 0.0);
  REQUIRE(c.size() == 1);
  CHECK(c[0].kind == ChurnKind::Resume);
  CHECK(c[0].peers == std::vector<int>{2});
  CHECK(c[0].at == 4.5);
  CHECK_FALSE(c[0].for_s.has_value());  // an end does not schedule another end
  // The link at 50% progress, applied at t=5: restored (no rate, no loss) at 9.
  auto l = d.due(5.0, 0.5);
  REQUIRE(l.size() == 1);
  CHECK(l[0].kind == ChurnKind::Link);
  CHECK(l[0].rate_mbit == 5.0);
  // At t=12.5: the crash (8), the link restored (9), the heal (12), in time order.
  CHECK(d.due(8.99, 1.0).size() == 1);  // the crash at 8
  auto e = d.due(12.5, 1.0);
  REQUIRE(e.size() == 2);
  CHECK(e[0].kind == ChurnKind::Link);
  CHECK(e[0].peers == std::vector<int>{1});
  CHECK_FALSE(e[0].rate_mbit.has_value());
  CHECK_FALSE(e[0].loss.has_value());
  CHECK(e[1].kind == ChurnKind::Heal);
  CHECK(e[1].peers.empty());
  CHECK(d.empty());
  CHECK_FALSE(d.start_pending());
}

TEST_CASE("ChurnDriver: ends of effects merge with timed events by time", "[churn]") {
  ChurnDriver d(scenario(R"({"events":[{"at":0,"event":"pause","peers":[0],"for":3},
                                      {"at":5,"event":"crash","peers":[1]}]})",
                         2),
                1000);
  REQUIRE(d.due(0.0, 0.0).size() == 1);
  CHECK(d.start_pending());
  CHECK_FALSE(d.empty());
  auto a = d.due(10.0, 0.0);
  CHECK(kinds(a) == std::vector<ChurnKind>{ChurnKind::Resume, ChurnKind::Crash});
  CHECK(d.empty());
}

TEST_CASE("ChurnDriver: start_pending only while a restart, join or resume is to come", "[churn]") {
  ChurnDriver crash_only(shorthand("crash:0@1", 2), 1000);
  CHECK_FALSE(crash_only.start_pending());
  CHECK_FALSE(crash_only.empty());
  ChurnDriver join(shorthand("join:1@50%", 2), 1000);
  CHECK(join.start_pending());
  join.due(0.0, 0.5);
  CHECK_FALSE(join.start_pending());
  CHECK(join.empty());
  ChurnDriver resume(shorthand("pause:0@1,resume:0@2", 2), 1000);
  CHECK(resume.start_pending());
  resume.due(1.0, 0);
  CHECK(resume.start_pending());
  resume.due(2.0, 0);
  CHECK_FALSE(resume.start_pending());
  // The random model with restarts has restarts to come.
  ChurnDriver random(shorthand("random:crash,uptime=5,downtime=2,seed=3", 4), 600);
  CHECK(random.start_pending());
}

// ---------------------------------------------------------------------------------------------
// ChurnRunner

TEST_CASE("ChurnRunner: a crash SIGKILLs a running peer and its exit is the scenario's, not a "
          "failure", "[churn]") {
  Churn c(shorthand("crash:1@1", 3), 3, 3);
  auto& [log, r, p] = c;
  r.tick(0.5, 0.0, p);
  CHECK(p.signals.empty());
  CHECK(churn_lines(log).empty());
  r.tick(1.2, 0.0, p);
  REQUIRE(p.signals.size() == 1);
  CHECK(p.signals[0] == std::make_pair(1, int(SIGKILL)));
  CHECK(r.state(1) == SlotState::Crashed);
  CHECK(r.state(0) == SlotState::Up);
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["t"] == 1.2);
  CHECK(lines[0]["kind"] == "crash");
  CHECK(lines[0]["source"] == "scenario");
  CHECK(lines[0]["applied_to"] == json::array({1}));
  CHECK_FALSE(lines[0].contains("skipped"));
  // The process dies; the launcher reaps it.
  p.up[1] = false;
  CHECK(r.exited(1));
  CHECK(r.state(1) == SlotState::Crashed);   // stays crashed (no restart in this scenario)
  CHECK_FALSE(r.exited(1));                  // asked once per exit
  // A peer ending on its own is not the scenario's doing.
  p.up[0] = false;
  CHECK_FALSE(r.exited(0));
  CHECK_FALSE(r.waiting_for_restart());  // nothing will restart peer 1
}

TEST_CASE("ChurnRunner: a stop sends SIGTERM and its exit is the scenario's", "[churn]") {
  Churn c(shorthand("stop:0@1", 2), 2, 2);
  auto& [log, r, p] = c;
  r.tick(1.0, 0.0, p);
  REQUIRE(p.signals.size() == 1);
  CHECK(p.signals[0] == std::make_pair(0, int(SIGTERM)));
  CHECK(r.state(0) == SlotState::Stopped);
  p.up[0] = false;
  CHECK(r.exited(0));
}

TEST_CASE("ChurnRunner: a crash of a peer that is not running is skipped and says so", "[churn]") {
  gt_test::TempDir tmp("gt-churn-log");
  const std::string path = tmp / "events.jsonl";
  EventLog log(path);
  ChurnRunner r(shorthand("crash:1+2@1,join:1@10", 3), 1000, log);
  FakePeers p(4);
  start_all(r, p, 3);
  p.up[2] = false;  // peer 2 finished training on its own
  r.tick(1.0, 0.0, p);
  REQUIRE(p.signals.size() == 1);
  CHECK(p.signals[0].first == 1);
  CHECK(r.state(2) == SlotState::Up);   // untouched: it ended on its own
  CHECK_FALSE(r.exited(2));             // so its exit is not the scenario's
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["applied_to"] == json::array({1}));
  CHECK(lines[0]["skipped"] == json::array({2}));
  // The line is on disk as one JSON object per line.
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const json j = json::parse(last);
  CHECK(j["event"] == "churn");
  CHECK(j["skipped"] == json::array({2}));
}

TEST_CASE("ChurnRunner: a crash of a slot not joined yet, or of a crashed peer, is skipped",
          "[churn]") {
  EventLog log;
  ChurnEvent join = ev(ChurnKind::Join, 50, {});
  ChurnRunner r(unchecked(3, {ev(ChurnKind::Crash, 1, {3}), ev(ChurnKind::Crash, 2, {0}),
                              ev(ChurnKind::Crash, 3, {0}), join}),
                1000, log);
  FakePeers p(4);
  start_all(r, p, 3);
  CHECK(r.slots() == 4);
  CHECK(r.state(3) == SlotState::NotJoined);
  r.tick(1.0, 0, p);
  r.tick(2.0, 0, p);
  r.tick(3.0, 0, p);  // peer 0 not reaped yet: running, but already crashed
  REQUIRE(p.signals.size() == 1);
  CHECK(p.signals[0] == std::make_pair(0, int(SIGKILL)));
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["skipped"] == json::array({3}));
  CHECK(lines[0]["applied_to"] == json::array());
  CHECK(lines[1]["applied_to"] == json::array({0}));
  CHECK(lines[2]["skipped"] == json::array({0}));
}

TEST_CASE("ChurnRunner: a restart or resume of a peer that is up is skipped", "[churn]") {
  EventLog log;
  ChurnRunner r(unchecked(2, {ev(ChurnKind::Restart, 1, {0}), ev(ChurnKind::Resume, 2, {1})}),
                1000, log);
  FakePeers p(2);
  start_all(r, p, 2);
  r.tick(2.0, 0, p);
  CHECK(p.starts.empty());
  CHECK(p.signals.empty());
  CHECK(r.restarts(0) == 0);
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["kind"] == "restart");
  CHECK(lines[0]["skipped"] == json::array({0}));
  CHECK(lines[1]["kind"] == "resume");
  CHECK(lines[1]["skipped"] == json::array({1}));
}

TEST_CASE("ChurnRunner: restart only after a crash or stop, once the process is gone", "[churn]") {
  Churn c(shorthand("crash:0@2,restart:0@3,stop:1@4,restart:1@5", 3), 3, 3);
  auto& [log, r, p] = c;
  CHECK_FALSE(r.waiting_for_restart());  // nobody is down
  r.tick(2.0, 0, p);
  CHECK(r.state(0) == SlotState::Crashed);
  CHECK(r.waiting_for_restart());  // crashed, with its restart to come
  p.up[0] = false;
  CHECK(r.exited(0));
  r.tick(3.0, 0, p);
  CHECK(p.starts == std::vector<int>{0});
  CHECK(r.state(0) == SlotState::Up);
  CHECK(r.restarts(0) == 1);
  CHECK(churn_lines(log).back()["kind"] == "restart");
  CHECK(churn_lines(log).back()["applied_to"] == json::array({0}));
  CHECK(r.waiting_for_restart() == false);  // peer 0 up; peer 1 not down yet
  r.tick(4.0, 0, p);
  CHECK(r.state(1) == SlotState::Stopped);
  CHECK(r.waiting_for_restart());
  p.up[1] = false;
  CHECK(r.exited(1));
  r.tick(5.0, 0, p);
  CHECK(p.starts == std::vector<int>{0, 1});
  CHECK(r.restarts(1) == 1);
  CHECK(r.restarts(2) == 0);
  CHECK_FALSE(r.waiting_for_restart());
  // The restarted peer's next exit is its own again.
  p.up[0] = false;
  CHECK_FALSE(r.exited(0));
}

// The launcher ticks every 200 ms and reaps after the tick, so a restart that comes due in the
// same tick as its crash (a short downtime, a busy launcher) finds the SIGKILLed process not
// reaped yet: it waits for the process to be gone, and is never dropped.
TEST_CASE("ChurnRunner: a restart due in the same tick as its crash still restarts the peer",
          "[churn]") {
  Churn c(shorthand("crash:0@1,restart:0@1.1", 2), 2, 2);
  auto& [log, r, p] = c;
  r.tick(1.5, 0, p);  // both due in one tick: the SIGKILLed process has not been reaped yet
  REQUIRE(p.signals == std::vector<std::pair<int, int>>{{0, SIGKILL}});
  CHECK(p.starts.empty());          // not while the old process is still there
  CHECK(r.waiting_for_restart());   // but the launcher must wait for it
  p.up[0] = false;  // reaped
  CHECK(r.exited(0));
  r.tick(1.7, 0, p);
  CHECK(p.starts == std::vector<int>{0});
  CHECK(r.state(0) == SlotState::Up);
  std::string all;
  for (const auto& j : log.lines()) all += j.dump() + "\n";
  INFO(all);
  for (const auto& j : churn_lines(log)) CHECK_FALSE(j.contains("skipped"));
}

TEST_CASE("ChurnRunner: a peer that finished on its own is never restarted", "[churn]") {
  Churn c(shorthand("crash:0@5,restart:0@6", 2), 2, 2);
  auto& [log, r, p] = c;
  p.up[0] = false;  // done before its crash
  CHECK_FALSE(r.exited(0));
  r.tick(5.0, 0, p);
  r.tick(6.0, 0, p);
  CHECK(p.signals.empty());
  CHECK(p.starts.empty());
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["skipped"] == json::array({0}));
  CHECK(lines[1]["skipped"] == json::array({0}));
}

TEST_CASE("ChurnRunner: joins take the next slot indices in order", "[churn]") {
  EventLog log;
  ChurnRunner r(shorthand("join:2@1,join:1@50%", 3), 1000, log);
  FakePeers p(6);
  CHECK(r.slots() == 6);
  start_all(r, p, 3);
  for (int i = 3; i < 6; ++i) CHECK(r.state(i) == SlotState::NotJoined);
  r.tick(1.0, 0.1, p);
  CHECK(p.starts == std::vector<int>{3, 4});
  CHECK(r.state(3) == SlotState::Up);
  CHECK(r.state(4) == SlotState::Up);
  CHECK(r.state(5) == SlotState::NotJoined);
  CHECK(churn_lines(log).back()["applied_to"] == json::array({3, 4}));
  CHECK(churn_lines(log).back()["kind"] == "join");
  CHECK(r.restarts(3) == 0);  // a join is not a restart
  r.tick(2.0, 0.5, p);
  CHECK(p.starts == std::vector<int>{3, 4, 5});
  CHECK(churn_lines(log).back()["applied_to"] == json::array({5}));
}

TEST_CASE("ChurnRunner: pause sends SIGSTOP, resume SIGCONT, and \"for\" resumes on its own",
          "[churn]") {
  EventLog log;
  ChurnRunner r(scenario(R"({"events":[{"at":1,"event":"pause","peers":[0,1]},
                                      {"at":2,"event":"resume","peers":[0,1]},
                                      {"at":3,"event":"pause","peers":[2],"for":2}]})",
                         3),
                1000, log);
  FakePeers p(3);
  start_all(r, p, 3);
  r.tick(1.0, 0, p);
  CHECK(r.state(0) == SlotState::Paused);
  CHECK(r.state(1) == SlotState::Paused);
  r.tick(2.0, 0, p);
  CHECK(r.state(0) == SlotState::Up);
  r.tick(3.0, 0, p);
  CHECK(r.state(2) == SlotState::Paused);
  r.tick(4.9, 0, p);
  CHECK(r.state(2) == SlotState::Paused);
  r.tick(5.0, 0, p);
  CHECK(r.state(2) == SlotState::Up);
  const std::vector<std::pair<int, int>> want{{0, SIGSTOP}, {1, SIGSTOP}, {0, SIGCONT},
                                              {1, SIGCONT}, {2, SIGSTOP}, {2, SIGCONT}};
  CHECK(p.signals == want);
  // Neither signal ends a process: no exit is the scenario's.
  CHECK_FALSE(r.exited(0));
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 4);
  CHECK(lines[2]["for"] == 2.0);
  CHECK(lines[3]["kind"] == "resume");
  CHECK(lines[3]["t"] == 5.0);
}

TEST_CASE("ChurnRunner: release_paused resumes stranded paused peers once no other peer is up",
          "[churn]") {
  Churn c(shorthand("pause:0@1", 3), 3, 3);
  auto& [log, r, p] = c;
  r.tick(1.0, 0, p);
  REQUIRE(r.state(0) == SlotState::Paused);
  p.signals.clear();
  r.release_paused(2.0, p);  // peers 1 and 2 still train
  CHECK(p.signals.empty());
  p.up[1] = false;
  CHECK_FALSE(r.exited(1));
  r.release_paused(3.0, p);  // peer 2 still up
  CHECK(p.signals.empty());
  p.up[2] = false;
  r.release_paused(4.0, p);
  REQUIRE(p.signals.size() == 1);
  CHECK(p.signals[0] == std::make_pair(0, int(SIGCONT)));
  CHECK(r.state(0) == SlotState::Up);
  const json last = churn_lines(log).back();
  CHECK(last["kind"] == "resume");
  CHECK(last["source"] == "end of run");
  CHECK(last["applied_to"] == json::array({0}));
  CHECK(last["t"] == 4.0);
  // Once released, nothing more to do.
  const auto n = log.lines().size();
  r.release_paused(5.0, p);
  CHECK(log.lines().size() == n);
}

TEST_CASE("ChurnRunner: release_paused waits while a resume is still to come", "[churn]") {
  Churn c(shorthand("pause:0@1,resume:0@30", 2), 2, 2);
  auto& [log, r, p] = c;
  r.tick(1.0, 0, p);
  p.up[1] = false;  // the other peer is done
  p.signals.clear();
  r.release_paused(2.0, p);
  CHECK(p.signals.empty());  // the scenario's resume will come
  CHECK(r.state(0) == SlotState::Paused);
  r.tick(30.0, 0, p);
  CHECK(p.signals == std::vector<std::pair<int, int>>{{0, SIGCONT}});
  CHECK(churn_lines(log).back()["source"] == "scenario");
}

TEST_CASE("ChurnRunner: partition, heal and link go to the peers as given", "[churn]") {
  EventLog log;
  ChurnRunner r(scenario(R"({"events":[
      {"at":1,"event":"partition","groups":[[0,1],[2,3]],"for":5},
      {"at":2,"event":"link","peers":[1,2],"loss":0.2}]})",
                         4),
                1000, log);
  FakePeers p(4);
  start_all(r, p, 4);
  r.tick(1.0, 0, p);
  REQUIRE(p.partitions.size() == 1);
  CHECK(p.partitions[0] == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  r.tick(2.0, 0, p);
  REQUIRE(p.links.size() == 2);
  CHECK(p.links[0].peer == 1);
  CHECK_FALSE(p.links[0].rate.has_value());
  CHECK(p.links[0].loss == 0.2);
  CHECK(p.heals == 0);
  r.tick(6.0, 0, p);
  CHECK(p.heals == 1);
  const auto lines = churn_lines(log);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["kind"] == "partition");
  CHECK(lines[0]["groups"] == json::parse("[[0,1],[2,3]]"));
  CHECK(lines[1]["applied_to"] == json::array({1, 2}));
  CHECK(lines[2]["kind"] == "heal");
  CHECK(lines[2]["t"] == 6.0);
  CHECK(p.signals.empty());  // network events touch no process
}

// ---------------------------------------------------------------------------------------------
// churn_report

namespace {

json start(double t, int p) { return {{"t", t}, {"event", "start"}, {"peer", p}, {"pid", 1000 + p}}; }
json exit_line(double t, int p, bool by_churn) {
  return {{"t", t},          {"event", "exit"},  {"peer", p}, {"exit_code", nullptr},
          {"signal", "SIGKILL"}, {"by_churn", by_churn}};
}
json eval(double t, int p, double acc) {
  return {{"t", t}, {"event", "eval"}, {"peer", p}, {"test_acc", acc}, {"step", int(t * 10)}};
}
json member(double t, int p, int about, const std::string& state) {
  return {{"t", t},
          {"event", "member"},
          {"peer", p},
          {"member", "id" + std::to_string(about)},
          {"member_index", about},
          {"state", state}};
}
json churn(double t, const std::string& kind, std::vector<int> applied) {
  return {{"t", t}, {"event", "churn"}, {"kind", kind}, {"source", "scenario"},
          {"applied_to", applied}};
}
json consensus(double t, double d) {
  return {{"t", t}, {"event", "consensus"}, {"distance", d}, {"peers", {0, 1, 2}}};
}

const json* report_for(const json& r, const std::string& kind, int peer) {
  for (const auto& e : r["events"])
    if (e["kind"] == kind && e["peer"] == peer) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("churn_report: a crash noticed by every live peer gives each one's detection time",
          "[churn]") {
  const auto sc = shorthand("crash:3@10", 4);
  const double bound = detection_bound_s(4);
  REQUIRE(bound > 3.0);
  const std::vector<json> ev = {
      start(0.1, 0), start(0.2, 1), start(0.5, 2), start(0.6, 3),
      eval(5, 0, 0.5), eval(5, 1, 0.6), eval(5, 2, 0.7), eval(5, 3, 0.9),
      consensus(9, 0.4),
      churn(10, "crash", {3}),
      exit_line(10.2, 3, true),
      member(11, 0, 3, "suspect"),  // suspicion is not detection
      member(12, 0, 3, "dead"),
      member(12.5, 1, 3, "dead"),
      member(13, 2, 3, "dead"),
      member(14, 2, 3, "dead"),  // only the first counts
      consensus(14, 0.2),
      eval(15, 0, 0.4), eval(15, 1, 0.5), eval(15, 2, 0.6),
      eval(20, 0, 0.7), eval(20, 1, 0.7), eval(20, 2, 0.8)};
  const json r = churn_report(ev, sc, "crash:3@10");
  INFO(r.dump(2));
  CHECK(r["scenario"] == "crash:3@10");
  CHECK(r["applied"]["crash"] == 1);
  CHECK(r["detection_bound_s"].get<double>() == Approx(bound));
  const json* c = report_for(r, "crash", 3);
  REQUIRE(c);
  CHECK((*c)["t"] == 10.0);
  REQUIRE((*c)["detected_by_s"].size() == 3);
  CHECK((*c)["detected_by_s"]["0"].get<double>() == Approx(2.0));
  CHECK((*c)["detected_by_s"]["1"].get<double>() == Approx(2.5));
  CHECK((*c)["detected_by_s"]["2"].get<double>() == Approx(3.0));
  CHECK((*c)["max_detection_s"].get<double>() == Approx(3.0));
  CHECK((*c)["not_detected_by"] == json::array());
  CHECK((*c)["within_bound"] == true);
  CHECK(r["all_detected_within_bound"] == true);
  // Accuracy of the survivors (0, 1, 2) before and after, and the recovery to the level before.
  CHECK((*c)["acc_before"].get<double>() == Approx(0.6));
  CHECK((*c)["acc_after"].get<double>() == Approx(0.5));
  // Back to 0.6 (latest of each survivor) with peer 0's eval at t=20.
  CHECK((*c)["recovery_s"].get<double>() == Approx(10.0));
  CHECK((*c)["consensus_before"].get<double>() == Approx(0.4));
  CHECK((*c)["consensus_after"].get<double>() == Approx(0.2));
}

TEST_CASE("churn_report: a peer that exits before noticing a crash is not a miss, one that stays "
          "up and never notices is", "[churn]") {
  const auto sc = shorthand("crash:0@10", 4);
  const double bound = detection_bound_s(4);
  const std::vector<json> ev = {
      start(0, 0), start(0, 1), start(0, 2), start(0, 3),
      churn(10, "crash", {0}),
      exit_line(10.1, 0, true),
      exit_line(11, 1, false),  // finished training a second after the crash
      member(12, 2, 0, "dead"),
      // peer 3 runs on past the bound and never marks peer 0 dead
      exit_line(10 + bound + 5, 2, false),
      exit_line(10 + bound + 6, 3, false)};
  const json r = churn_report(ev, sc, "crash:0@10");
  INFO(r.dump(2));
  const json* c = report_for(r, "crash", 0);
  REQUIRE(c);
  CHECK((*c)["detected_by_s"] == json{{"2", 2.0}});
  CHECK((*c)["not_detected_by"] == json::array({3}));
  CHECK((*c)["within_bound"] == false);
  CHECK(r["all_detected_within_bound"] == false);
  CHECK((*c)["max_detection_s"].get<double>() == Approx(2.0));
  CHECK((*c)["acc_before"].is_null());  // nobody evaluated
  CHECK((*c)["recovery_s"].is_null());
}

TEST_CASE("churn_report: a detection after the detector's own exit does not count", "[churn]") {
  const auto sc = shorthand("stop:1@10", 3);
  const std::vector<json> ev = {start(0, 0), start(0, 1), start(0, 2),
                                churn(10, "stop", {1}),
                                exit_line(10.5, 1, true),
                                exit_line(11, 0, false),
                                member(12, 0, 1, "left"),  // a line written before, read late
                                member(12, 2, 1, "left")};
  const json r = churn_report(ev, sc, "stop:1@10");
  const json* c = report_for(r, "stop", 1);
  REQUIRE(c);
  CHECK((*c)["detected_by_s"] == json{{"2", 2.0}});  // "left" counts as detection
  CHECK((*c)["not_detected_by"] == json::array());
  CHECK((*c)["within_bound"] == true);
}

// Defects issue, item 11: a crash restarted before anybody had to declare it dead said
// `max_detection_s: null` beside `within_bound: true`.
TEST_CASE("churn_report: a crash back before the bound has no detection to measure, and says so",
          "[churn]") {
  const auto sc = shorthand("crash:1@10,restart:1@12", 3);
  const std::vector<json> ev = {start(0, 0), start(0, 1), start(0, 2),
                                churn(10, "crash", {1}), exit_line(10.1, 1, true),
                                churn(12, "restart", {1}), start(12, 1),
                                member(11, 0, 1, "suspect"),  // refuted once it is back
                                exit_line(60, 0, false), exit_line(60, 1, false),
                                exit_line(60, 2, false)};
  const json r = churn_report(ev, sc, "crash:1@10,restart:1@12");
  INFO(r.dump(2));
  const json* c = report_for(r, "crash", 1);
  REQUIRE(c);
  CHECK((*c)["max_detection_s"].is_null());
  CHECK((*c)["within_bound"].is_null());
  REQUIRE((*c)["detection_not_measured"].is_string());
  CHECK((*c)["detection_not_measured"].get<std::string>().find("back after 2.0 s") !=
        std::string::npos);
  CHECK(r["all_detected_within_bound"].is_null());
  CHECK(r["detections_not_measured"] == 1);

  // Beside a crash that was detected, the verdict is over the measured one alone.
  std::vector<json> more = ev;
  more.insert(more.end() - 3, {churn(30, "crash", {2}), exit_line(30.1, 2, true),
                               member(33, 0, 2, "dead"), member(34, 1, 2, "dead")});
  std::stable_sort(more.begin(), more.end(),
                   [](const json& a, const json& b) { return a["t"] < b["t"]; });
  const json r2 = churn_report(more, sc, "x");
  INFO(r2.dump(2));
  const json* c2 = report_for(r2, "crash", 2);
  REQUIRE(c2);
  CHECK((*c2)["max_detection_s"].get<double>() == Approx(4.0));
  CHECK((*c2)["within_bound"] == true);
  CHECK((*c2)["detection_not_measured"].is_null());
  CHECK(r2["all_detected_within_bound"] == true);
  CHECK(r2["detections_not_measured"] == 1);
}

TEST_CASE("churn_report: a join is reported with the joiner's first eval against the swarm's",
          "[churn]") {
  const auto sc = shorthand("join:1@50%", 3);
  const std::vector<json> ev = {
      start(0, 0), start(0, 1), start(0, 2),
      eval(10, 0, 0.7), eval(10, 1, 0.8), eval(10, 2, 0.9),
      eval(18, 0, 0.75),
      churn(20, "join", {3}),
      start(20, 3),
      {{"t", 21.0}, {"event", "catch_up"}, {"peer", 3}, {"ok", true}, {"from", "abc"}, {"step", 40}},
      eval(22, 0, 0.82),
      eval(25, 3, 0.6),
      eval(30, 3, 0.85)};
  const json r = churn_report(ev, sc, "join:1@50%");
  INFO(r.dump(2));
  CHECK(r["applied"]["join"] == 1);
  const json* j = report_for(r, "join", 3);
  REQUIRE(j);
  CHECK((*j)["t"] == 20.0);
  CHECK((*j)["first_eval_acc"].get<double>() == Approx(0.6));
  CHECK((*j)["swarm_acc_at_join"].get<double>() == Approx((0.75 + 0.8 + 0.9) / 3));
  REQUIRE((*j)["catch_up"].is_object());
  CHECK((*j)["catch_up"]["ok"] == true);
  CHECK((*j)["catch_up"]["step"] == 40);
  CHECK_FALSE(j->contains("within_bound"));
}

TEST_CASE("churn_report: peers alive over time follows starts and exits", "[churn]") {
  const auto sc = shorthand("crash:1@5,restart:1@8,join:1@9", 2);
  const std::vector<json> ev = {start(0.1, 0), start(0.2, 1),
                                churn(5, "crash", {1}), exit_line(5.1, 1, true),
                                churn(8, "restart", {1}), start(8, 1),
                                churn(9, "join", {2}), start(9, 2),
                                exit_line(30, 0, false), exit_line(31, 1, false),
                                exit_line(32, 2, false)};
  const json r = churn_report(ev, sc, "x");
  const json want = json::parse(
      "[[0.1,1],[0.2,2],[5.1,1],[8.0,2],[9.0,3],[30.0,2],[31.0,1],[32.0,0]]");
  CHECK(r["peers_alive_over_time"] == want);
  CHECK(r["applied"] == json{{"crash", 1}, {"restart", 1}, {"join", 1}});
  // One crash entry and one join entry; restarts have none of their own.
  CHECK(r["events"].size() == 2);
}

TEST_CASE("churn_report: an empty run has empty lists", "[churn]") {
  const json r = churn_report({}, shorthand("crash:0@1", 2), "crash:0@1");
  CHECK(r["events"] == json::array());
  CHECK(r["peers_alive_over_time"] == json::array());
  CHECK(r["all_detected_within_bound"].is_null());  // nothing measured: nothing was within
  CHECK(r["detections_not_measured"] == 0);
  CHECK(r["seed"] == 0);
}

TEST_CASE("detection_bound_s: membership's longest suspicion timeout plus a probe period",
          "[churn]") {
  // Defaults: probe 1 s, suspicion_mult 4, max mult 6: 6 * 4 * max(1, log10 n) + 1.
  CHECK(detection_bound_s(4) == Approx(25.0));
  CHECK(detection_bound_s(10) == Approx(25.0));
  CHECK(detection_bound_s(100) == Approx(49.0));
}

// ---------------------------------------------------------------------------------------------
// parse_launch_args

namespace {

std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_launch_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("parse_launch_args: --churn scenarios the launcher cannot run are refused", "[churn]") {
  gt_test::TempDir tmp("gt-churn-args");
  const std::vector<std::string> base = {"--peers", "4", "--data", "synthetic"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp / name) << text;
    return tmp / name;
  };

  SECTION("--churn with --mode local or central") {
    for (const char* mode : {"local", "central"}) {
      INFO(mode);
      const std::string msg = usage_error(with({"--mode", mode, "--churn", "crash:1@5"}));
      CHECK_THAT(msg, Contains("--churn needs --mode gossip"));
    }
  }
  SECTION("a partition scenario without --netns, accepted with it") {
    const std::string f = write("part.json",
                                R"({"events":[{"at":1,"event":"crash","peers":[0]},
                                   {"at":5,"event":"partition","groups":[[0,1],[2,3]],"for":5}]})");
    const std::string msg = usage_error(with({"--churn", f}));
    CHECK_THAT(msg, Contains("event 1 (partition)"));
    CHECK_THAT(msg, Contains("--netns"));
    const LaunchOptions o = parse_launch_args(with({"--churn", f, "--netns"}));
    REQUIRE(o.churn.has_value());
    CHECK(o.netns);
    CHECK(o.churn_arg == f);
    CHECK(o.churn->events.size() == 2);
  }
  SECTION("a link or heal event without --netns") {
    CHECK_THAT(usage_error(with({"--churn", write("link.json",
                                                  R"({"events":[{"at":1,"event":"link",
                                                      "peers":[2],"rate_mbit":1}]})")})),
               Contains("event 0 (link)"));
    CHECK_THAT(usage_error(with({"--churn", write("heal.json",
                                                  R"({"events":[{"at":1,"event":"heal"}]})")})),
               Contains("event 0 (heal)"));
  }
  SECTION("a fault event is accepted, its mode checked") {
    const std::string f = write("fault.json",
                                R"({"events":[{"at":1,"event":"fault","peers":[2],"mode":"nan"}]})");
    CHECK(parse_launch_args(with({"--churn", f})).churn.has_value());
    const std::string bad = write("badfault.json",
                                  R"({"events":[{"at":1,"event":"fault","peers":[2],"mode":"loud"}]})");
    CHECK_THAT(usage_error(with({"--churn", bad})), Contains("event 0 (fault)"));
  }
  SECTION("a bad scenario file: the message names the event and the field") {
    const std::string f = write("bad.json",
                                R"({"events":[{"at":1,"event":"crash","peers":[0]},
                                              {"at":2,"event":"restart","peers":[9]}]})");
    const std::string msg = usage_error(with({"--churn", f}));
    CHECK_THAT(msg, Contains("--churn"));
    CHECK_THAT(msg, Contains("event 1 (restart)"));
    CHECK_THAT(msg, Contains("peers"));
    const std::string typo = usage_error(with(
        {"--churn", write("typo.json", R"({"events":[{"at":1,"event":"crash","peer":[0]}]})")}));
    CHECK_THAT(typo, Contains("event 0 (crash)"));
    const std::string broken = usage_error(with({"--churn", write("broken.json", "{\"events\": [")}));
    CHECK_THAT(broken, Contains("broken.json"));
    const std::string missing = usage_error(with({"--churn", tmp / "nothing.json"}));
    CHECK_THAT(missing, Contains("nothing.json"));
  }
  SECTION("a bad shorthand") {
    CHECK_THAT(usage_error(with({"--churn", "crash:1@soon"})), Contains("--churn"));
    CHECK_THAT(usage_error(with({"--churn", "crash:7@5"})), Contains("--churn"));
  }
}

TEST_CASE("parse_launch_args and plan_peers: joins add peer slots, only the first peers wait for "
          "each other", "[churn]") {
  const LaunchOptions o =
      parse_launch_args({"--peers", "3", "--data", "synthetic", "--churn", "crash:2@5,join:2@50%"});
  REQUIRE(o.churn.has_value());
  CHECK(o.peers == 3);
  CHECK(o.slots() == 5);
  const auto plans = plan_peers(o, "/tmp/run", {7001, 7002, 7003, 7004, 7005}, "/tmp/run/key");
  REQUIRE(plans.size() == 5);
  for (const auto& p : plans) {
    INFO("peer " << p.index);
    CHECK(p.config.num_shards == 5);
    CHECK(p.config.shard == p.index);
    const bool first = p.index < 3;
    CHECK(p.config.min_peers == (first ? 3 : 1));
    CHECK(p.listen == "127.0.0.1:" + std::to_string(7001 + p.index));
    CHECK_FALSE(p.seeds.empty());
  }
  CHECK(plans[4].seeds.front() == "127.0.0.1:7001");  // joiners come in through peer 0
}

TEST_CASE("plan_peers with --netns: every peer listens on its own address", "[churn]") {
  const LaunchOptions o =
      parse_launch_args({"--peers", "2", "--data", "synthetic", "--netns", "--churn", "join:1@5"});
  const auto plans = plan_peers(o, "/tmp/run", {0, 0, 0}, "/tmp/run/key");
  REQUIRE(plans.size() == 3);
  for (const auto& p : plans) {
    INFO("peer " << p.index);
    CHECK(p.listen == "0.0.0.0:7000");
    CHECK(p.advertise == NetnsSwarm::address(p.index) + ":7000");
    const auto& a = p.argv;
    auto it = std::find(a.begin(), a.end(), "--advertise");
    REQUIRE(it != a.end());
    CHECK(*(it + 1) == p.advertise);
  }
  CHECK(plans[1].seeds == std::vector<std::string>{NetnsSwarm::address(0) + ":7000"});
  CHECK(plans[2].seeds.front() == NetnsSwarm::address(0) + ":7000");
}

// Issue 26, item 13: churn events were in events.jsonl only, neither said as they happened nor in
// the live table.
TEST_CASE("each churn event is described in one line for the launcher to print", "[churn]") {
  Churn c(shorthand("crash:0@1,restart:0@2,crash:1@3", 2), 2, 2);
  auto& [log, r, p] = c;
  r.tick(1.0, 0, p);
  p.up[0] = false;
  CHECK(r.exited(0));
  r.tick(2.0, 0, p);
  r.tick(3.0, 0, p);
  std::vector<std::string> said;
  for (const auto& j : log.lines())
    if (auto d = describe_churn(j); !d.empty()) said.push_back(d);
  CHECK(said == std::vector<std::string>{"churn at 1.0 s: crash peer 0",
                                         "churn at 2.0 s: restart peer 0",
                                         "churn at 3.0 s: crash peer 1"});
  CHECK(describe_churn(json{{"t", 1.0}, {"event", "exit"}, {"peer", 0}}).empty());
  CHECK(describe_churn(json{{"t", 4.3},
                            {"event", "churn"},
                            {"kind", "partition"},
                            {"groups", {{0, 1}, {2, 3}}},
                            {"applied_to", {0, 1, 2, 3}}}) ==
        "churn at 4.3 s: partition into [[0,1],[2,3]]");
  CHECK(describe_churn(json{
            {"t", 5.0}, {"event", "churn"}, {"kind", "heal"}, {"applied_to", json::array()}}) ==
        "churn at 5.0 s: heal");
}

// Defects issue, item 11: "churn at 87.3 s: restart [random]" named no peer and no reason (the
// random model's restart came in the tick of the crash: the killed process was not reaped yet).
TEST_CASE("a churn line names every peer it concerns: applied, deferred or skipped, and why",
          "[churn]") {
  // (A restart of peer 2, never crashed, is refused by the parser: built here unchecked.)
  Churn c(unchecked(3, {ev(ChurnKind::Crash, 1, {0}), ev(ChurnKind::Restart, 1.1, {0}),
                        ev(ChurnKind::Crash, 3, {1}), ev(ChurnKind::Restart, 4, {1, 2})}),
          3, 3);
  auto& [log, r, p] = c;
  r.tick(1.5, 0, p);  // the crash and the restart in one tick: the restart waits
  p.up[0] = false;
  CHECK(r.exited(0));
  r.tick(1.7, 0, p);
  r.tick(3.0, 0, p);
  p.up[1] = false;
  CHECK(r.exited(1));
  p.up[2] = false;  // peer 2 finished on its own
  CHECK_FALSE(r.exited(2));
  r.tick(4.0, 0, p);
  std::vector<std::string> said;
  for (const auto& j : log.lines())
    if (auto d = describe_churn(j); !d.empty()) said.push_back(d);
  CHECK(said == std::vector<std::string>{
                    "churn at 1.5 s: crash peer 0",
                    "churn at 1.5 s: restart; peer 0 deferred until its killed process is gone",
                    "churn at 1.7 s: restart peer 0 (its killed process is gone now)",
                    "churn at 3.0 s: crash peer 1",
                    "churn at 4.0 s: restart peer 1; skipped peer 2 (it finished on its own)"});
  // The random model says so, and an event that found nobody says that too.
  CHECK(describe_churn(json{{"t", 87.3},
                            {"event", "churn"},
                            {"kind", "crash"},
                            {"source", "random"},
                            {"applied_to", json::array({3})}}) ==
        "churn at 87.3 s: crash peer 3 (random model)");
  CHECK(describe_churn(json{{"t", 9.0},
                            {"event", "churn"},
                            {"kind", "join"},
                            {"source", "scenario"},
                            {"applied_to", json::array()}}) == "churn at 9.0 s: join: no peer");
}
