// gossip-launch --report: peers' metrics files found anywhere under a folder make one run; a
// missing, truncated or foreign file is named and skipped; peers' churn events and what the
// others saw of them make the churn section, on one clock built from the peers' clock lines.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "apps/launch/report.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::apps;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string line(double t, const std::string& peer, const std::string& event, json fields = {}) {
  json j = {{"t", t}, {"peer", peer}, {"event", event}};
  if (fields.is_object()) j.update(fields);
  return j.dump() + "\n";
}

// A process's first line: its start at unix time u, as shard of num_shards.
std::string clock_line(double u, int shard, int num_shards) {
  return line(0, "local", "clock", {{"unix_s", u}, {"shard", shard}, {"num_shards", num_shards}});
}

// A peer that trained 2 epochs to acc, started at unix time u.
std::string peer_file(int shard, const std::string& id, double u, double acc) {
  return line(0, "local", "clock",
              {{"unix_s", u},
               {"shard", shard},
               {"num_shards", 3},
               {"model", "mlp:784-10"},
               {"epochs", 2},
               {"batch", 32},
               {"partition", "iid"},
               {"data", "synthetic"}}) +
         line(0.5, id, "eval", {{"epoch", 1}, {"test_acc", acc - 0.1}, {"step", 10}}) +
         line(0.6, id, "exchange", {{"partner", "x"}, {"ok", true}, {"bytes", 100}}) +
         line(1.0, id, "eval", {{"epoch", 2}, {"test_acc", acc}, {"step", 20}, {"final", true}}) +
         line(1.1, id, "done",
              {{"steps", 20}, {"epochs", 2}, {"final_test_acc", acc}, {"stopped", false}});
}

bool any_note(const ReportScan& s, const std::string& part) {
  for (const auto& n : s.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("report: metrics files from anywhere under a folder are one run", "[apps]") {
  gt_test::TempDir dir("gt-report");
  // One copied from machine a, one in a SLURM-style peer folder, one by hand with no folder.
  write(dir.path / "machine-a" / "peer0" / "metrics.jsonl", peer_file(0, "aaaa", 1000.0, 0.8));
  write(dir.path / "peer1" / "metrics.jsonl", peer_file(1, "bbbb", 1002.0, 0.82));
  write(dir.path / "by-hand.jsonl", peer_file(2, "cccc", 1001.0, 0.84));
  const ReportScan scan = scan_report_dir(dir.str());
  REQUIRE(scan.peers.size() == 3);
  CHECK(scan.notes.empty());
  CHECK(scan.peers[2].path == "by-hand.jsonl");
  LaunchOptions o;
  o.target_acc = 0.81;
  const Report r = build_report(scan, o, dir.str());
  const json& s = r.summary;
  CHECK(s["num_peers"] == 3);
  CHECK(s["partition"] == "iid");
  CHECK(s["epochs"] == 2);
  CHECK(s["model"] == "mlp:784-10");
  CHECK(s["final_test_acc_mean"].get<double>() == Approx(0.82));
  CHECK(s["final_test_acc_min"].get<double>() == Approx(0.8));
  // Peer 0 never reached 0.81: the run did not. Peer 1 did at its t = 1.0, 2 s after peer 0.
  CHECK(s["time_to_target_s"].is_null());
  CHECK(s["time_to_target_first_s"].get<double>() == Approx(1.0 + 1.0));
  CHECK(s["peers"][1]["clock_offset_s"].get<double>() == Approx(2.0));
  CHECK(s["started_at"] == "1970-01-01T00:16:40Z");
  CHECK(!s.contains("churn"));
  CHECK(r.table.find("done") != std::string::npos);
}

TEST_CASE("report: missing, truncated and foreign files are named and skipped", "[apps]") {
  gt_test::TempDir dir("gt-report-bad");
  const std::string good = peer_file(0, "aaaa", 1000.0, 0.8);
  // Cut in the middle of its last line, as a killed peer or a half-copied file leaves it.
  write(dir.path / "peer0" / "metrics.jsonl", good + R"({"t":1.2,"peer":"aaaa","ev)");
  write(dir.path / "peer1" / "log.txt", "no metrics here\n");  // a peer folder without metrics
  write(dir.path / "foreign.jsonl", "{\"name\": \"not ours\"}\n[1,2,3]\n\"x\"\n");
  write(dir.path / "binary.jsonl", std::string("\x00\xff\xfe{\"t\":", 8) + "\n\x01\x02");
  write(dir.path / "empty.jsonl", "");
  write(dir.path / "peer2" / "metrics.jsonl",
        peer_file(2, "cccc", 1001.0, 0.7) + "garbage line\n" +
            line(1.3, "cccc", "eval", {{"test_acc", "high"}}) +  // a bad value, not a crash
            "{\"t\": 1e999, \"peer\": \"c\", \"event\": \"x\"}\n");
  write(dir.path / "copy" / "peer2.jsonl", peer_file(2, "cccc", 1001.0, 0.7));  // copied, cut short
  const ReportScan scan = scan_report_dir(dir.str());
  CHECK(scan.peers.size() == 2);
  CHECK(any_note(scan, "peer0/metrics.jsonl: its last line is cut short"));
  CHECK(any_note(scan, "peer1/: a peer folder without a metrics file"));
  CHECK(any_note(scan, "foreign.jsonl: not a peer's metrics file"));
  CHECK(any_note(scan, "binary.jsonl: not a peer's metrics file"));
  CHECK(any_note(scan, "empty.jsonl: not a peer's metrics file"));
  CHECK(any_note(scan, "peer2/metrics.jsonl: 2 line(s) that are not metrics lines"));
  CHECK(any_note(scan, "copy/peer2.jsonl: a cut-short copy of peer2/metrics.jsonl (5 of its 6 lines)"));
  CHECK(any_note(scan, "peer 1 of 3: no metrics file found"));
  const Report r = build_report(scan, LaunchOptions{}, dir.str());
  CHECK(r.summary["num_peers"] == 2);  // peers 0 and 2; the copy is not a third
  CHECK(r.summary["report"]["skipped"].size() == scan.notes.size());
  // A folder that is not one, and one without any metrics, are bad input (exit code 2).
  CHECK_THROWS_AS(scan_report_dir((dir.path / "nowhere").string()), UsageError);
  gt_test::TempDir empty("gt-report-empty");
  write(empty.path / "x.jsonl", "hello\n");
  LaunchOptions o;
  o.report = empty.str();
  o.plots = false;
  CHECK(run_report(o) == 2);
}

TEST_CASE("report: copies of a peer's file do not count, whatever the order of the files",
          "[apps]") {
  gt_test::TempDir dir("gt-report-copies");
  const std::string whole = peer_file(1, "bbbb", 1000.0, 0.8);
  write(dir.path / "peer0" / "metrics.jsonl", peer_file(0, "aaaa", 1000.0, 0.8));
  // Sorted before the complete file: a copy cut short after 3 lines, and a byte-identical one.
  const std::size_t third = whole.find('\n', whole.find('\n', whole.find('\n') + 1) + 1);
  write(dir.path / "a-cut" / "peer1.jsonl", whole.substr(0, third + 1));
  write(dir.path / "b-same" / "peer1.jsonl", whole);
  write(dir.path / "c-whole" / "peer1" / "metrics.jsonl", whole);
  write(dir.path / "peer2" / "metrics.jsonl", peer_file(2, "cccc", 1000.0, 0.8));
  ReportScan scan = scan_report_dir(dir.str());
  INFO(nlohmann::json(scan.notes).dump());
  REQUIRE(scan.peers.size() == 3);
  CHECK(scan.peers[1].index == 1);
  CHECK(scan.peers[1].lines.size() == 5);  // the complete file's lines, not the cut copy's 3
  CHECK(any_note(scan, "a-cut/peer1.jsonl: a cut-short copy of"));
  CHECK(any_note(scan, ": a copy of"));
  CHECK(build_report(scan, LaunchOptions{}, dir.str()).summary["num_peers"] == 3);
  // Another run's peer 1 (other lines) is still named and counted apart.
  write(dir.path / "other-run" / "peer1.jsonl", peer_file(1, "dddd", 2000.0, 0.5));
  scan = scan_report_dir(dir.str());
  CHECK(scan.peers.size() == 4);
  CHECK(any_note(scan, "peer 1 again, with other lines"));
}

TEST_CASE("report: a launch's own summary is not overwritten", "[apps]") {
  gt_test::TempDir dir("gt-report-own");
  write(dir.path / "peer0" / "metrics.jsonl", peer_file(0, "aaaa", 1000.0, 0.8));
  write(dir.path / "summary.json", R"({"num_peers": 1})");
  LaunchOptions o;
  o.report = dir.str();
  o.plots = false;
  CHECK_THROWS_AS(run_report(o), UsageError);
  o.out = (dir.path / "report").string();
  CHECK(run_report(o) == 0);
  std::ifstream in(dir.path / "report" / "summary.json");
  const json s = json::parse(in);
  CHECK(s["num_peers"] == 1);
  CHECK(s["plots"]["message"] == "skipped (--no-plots)");
  // A second report over the first one's output is fine.
  CHECK(run_report(o) == 0);
}

TEST_CASE("report: a crash a peer played, its detection by the others and its restart", "[apps]") {
  gt_test::TempDir dir("gt-report-churn");
  // Peer 1 crashes at its t = 10 (launch time 10), restarts at launch time 14 from its checkpoint;
  // peers 0 and 2 mark it dead 2.5 and 3.5 s after the crash.
  write(dir.path / "peer1" / "metrics.jsonl",
        clock_line(1000.0, 1, 3) + line(5, "bbbb", "eval", {{"test_acc", 0.5}}) +
            line(10, "bbbb", "churn",
                 {{"kind", "crash"},
                  {"scenario", {{"at_progress", 0.3}, {"event", "crash"}, {"peers", {1}}}}}) +
            clock_line(1014.0, 1, 3) + line(3, "bbbb", "eval", {{"test_acc", 0.6}}) +
            line(6, "bbbb", "done", {{"final_test_acc", 0.6}}));
  for (int p : {0, 2}) {
    const std::string id = p == 0 ? "aaaa" : "cccc";
    write(dir.path / ("peer" + std::to_string(p)) / "metrics.jsonl",
          clock_line(1000.0, p, 3) + line(5, id, "eval", {{"test_acc", 0.5}}) +
              line(12.5 + 0.5 * p, id, "member", {{"member", "bbbb"}, {"state", "dead"}}) +
              line(15, id, "member", {{"member", "bbbb"}, {"state", "alive"}}) +
              line(19, id, "eval", {{"test_acc", 0.62}}) +
              line(20, id, "done", {{"final_test_acc", 0.62}}));
  }
  const Report r = build_report(scan_report_dir(dir.str()), LaunchOptions{}, dir.str());
  REQUIRE(r.summary.contains("churn"));
  const json& c = r.summary["churn"];
  INFO(c.dump());
  REQUIRE(c["applied"].contains("restart"));
  CHECK(c["applied"]["crash"] == 1);
  CHECK(c["applied"]["restart"] == 1);
  REQUIRE(c["events"].size() == 1);
  const json& e = c["events"][0];
  CHECK(e["peer"] == 1);
  CHECK(e["t"].get<double>() == Approx(10.0));
  REQUIRE(e["detected_by_s"].contains("2"));
  CHECK(e["detected_by_s"]["0"].get<double>() == Approx(2.5));
  CHECK(e["detected_by_s"]["2"].get<double>() == Approx(3.5));
  CHECK(e["back_after_s"].get<double>() == Approx(4.0));
  // The restarted peer is one peer in its second life, done at the end.
  CHECK(r.summary["peers"][1]["state"] == "done");
  CHECK(r.summary["num_peers"] == 3);
}

TEST_CASE("report: deaths nobody scripted (kill -9 from outside, with and without a restart) are "
          "in the churn section",
          "[apps]") {
  gt_test::TempDir dir("gt-report-unscripted");
  // Peer 1 is killed after its line at t = 10 and restarted by the engine at launch time 14;
  // peer 2 is killed after its line at t = 16 and never comes back. No --churn anywhere.
  write(dir.path / "peer1" / "metrics.jsonl",
        clock_line(1000.0, 1, 3) + line(5, "bbbb", "eval", {{"test_acc", 0.5}}) +
            line(10, "bbbb", "exchange", {{"partner", "aaaa"}, {"ok", true}, {"bytes", 100}}) +
            clock_line(1014.0, 1, 3) + line(3, "bbbb", "eval", {{"test_acc", 0.6}}) +
            line(6, "bbbb", "done", {{"final_test_acc", 0.6}}));
  write(dir.path / "peer2" / "metrics.jsonl",
        clock_line(1000.0, 2, 3) + line(5, "cccc", "eval", {{"test_acc", 0.5}}) +
            line(16, "cccc", "exchange", {{"partner", "aaaa"}, {"ok", true}, {"bytes", 100}}));
  write(dir.path / "peer0" / "metrics.jsonl",
        clock_line(1000.0, 0, 3) + line(5, "aaaa", "eval", {{"test_acc", 0.5}}) +
            line(12.5, "aaaa", "member", {{"member", "bbbb"}, {"state", "dead"}}) +
            line(15, "aaaa", "member", {{"member", "bbbb"}, {"state", "alive"}}) +
            line(19, "aaaa", "member", {{"member", "cccc"}, {"state", "dead"}}) +
            line(20, "aaaa", "done", {{"final_test_acc", 0.62}}));
  const Report r = build_report(scan_report_dir(dir.str()), LaunchOptions{}, dir.str());
  REQUIRE(r.summary.contains("churn"));
  const json& c = r.summary["churn"];
  INFO(c.dump());
  REQUIRE(c.is_object());
  CHECK(c["scenario"].get<std::string>().find("not scripted") != std::string::npos);
  CHECK(c["applied"]["crash"] == 2);
  CHECK(c["applied"]["restart"] == 1);
  REQUIRE(c["events"].size() == 2);
  for (const json& e : c["events"]) {
    if (e["peer"] == 1) {
      CHECK(e["t"].get<double>() == Approx(10.0));
      CHECK(e["detected_by_s"]["0"].get<double>() == Approx(2.5));
      CHECK(e["back_after_s"].get<double>() == Approx(4.0));
    } else {
      CHECK(e["peer"] == 2);
      CHECK(e["t"].get<double>() == Approx(16.0));
      CHECK(e["detected_by_s"]["0"].get<double>() == Approx(3.0));
    }
  }
  // A run with every peer done in one life has no churn section.
  gt_test::TempDir calm("gt-report-calm");
  for (int p : {0, 1})
    write(
        calm.path / ("peer" + std::to_string(p)) / "metrics.jsonl",
        clock_line(1000.0, p, 3) + line(5, p ? "bbbb" : "aaaa", "done", {{"final_test_acc", 0.6}}));
  const Report q = build_report(scan_report_dir(calm.str()), LaunchOptions{}, calm.str());
  CHECK((!q.summary.contains("churn") || q.summary["churn"].is_null()));
}

TEST_CASE("report: a restarted peer's state, restarts and time over all its lives", "[apps]") {
  gt_test::TempDir dir("gt-report-lives");
  // Peer 1 is killed -9 after 10 s, restarted by the engine at launch time 14, done 2.9 s later
  // (its done line's seconds are its last life's: the table and summary add the first life's 10 s;
  // the 4 s it was down are not the peer's time).
  write(dir.path / "peer1" / "metrics.jsonl",
        clock_line(1000.0, 1, 2) + line(5, "bbbb", "eval", {{"test_acc", 0.5}}) +
            line(10, "bbbb", "checkpoint", {{"step", 50}, {"epoch", 1}}) +
            clock_line(1014.0, 1, 2) + line(11, "bbbb", "eval", {{"test_acc", 0.6}}) +
            line(12.9, "bbbb", "done", {{"final_test_acc", 0.6}, {"seconds", 12.9}}));
  // Peer 0 (the Python Peer's order) writes a line of its node before its clock line: one life.
  write(dir.path / "peer0" / "metrics.jsonl",
        line(0, "aaaa", "listen", {{"addr", "127.0.0.1:7000"}}) + clock_line(1000.0, 0, 2) +
            line(5, "aaaa", "eval", {{"test_acc", 0.5}}) +
            line(20, "aaaa", "done", {{"final_test_acc", 0.62}, {"seconds", 20.0}}));
  // Peer 2's second process was killed so soon after its first that its t did not go back: its
  // second clock line starts it.
  write(dir.path / "peer2" / "metrics.jsonl",
        clock_line(1000.0, 2, 2) + line(0.5, "cccc", "eval", {{"test_acc", 0.4}}) +
            line(0.6, "local", "clock", {{"unix_s", 1001.0}, {"shard", 2}, {"num_shards", 2}}) +
            line(7, "cccc", "done", {{"final_test_acc", 0.6}, {"seconds", 6.0}}));
  LaunchOptions o;
  o.report = dir.str();
  o.plots = false;
  const Report r = build_report(scan_report_dir(dir.str()), o, dir.str());
  INFO(r.summary.dump());
  const json& p1 = r.summary["peers"][1];
  CHECK(p1["state"] == "done");
  CHECK(p1["restarts"] == 1);
  CHECK(p1["failed"] == false);
  REQUIRE(p1["life_seconds"].size() == 2);
  CHECK(p1["seconds"].get<double>() == Approx(10.0 + 12.9));
  CHECK(r.summary["peers"][0]["restarts"] == 0);
  CHECK(r.summary["peers"][0]["seconds"].get<double>() == Approx(20.0));
  CHECK(r.summary["peers"][2]["restarts"] == 1);
  CHECK(r.summary["peers"][2]["seconds"].get<double>() == Approx(0.5 + 7.0));
  CHECK(r.summary["peers"][2]["state"] == "done");
  CHECK(r.summary["failed_peers"].empty());
  CHECK(r.summary["ended_by"].is_null());
  CHECK(r.table.find("done (1 restart) 22.9 s") != std::string::npos);
  CHECK(r.summary["churn"]["applied"]["restart"] == 2);  // peers 1 and 2
  CHECK(run_report(o) == 0);
}

TEST_CASE("report: a peer stopped from outside before it finished fails the report, a scripted "
          "stop does not",
          "[apps]") {
  const std::string done0 = clock_line(1000.0, 0, 2) +
                            line(5, "aaaa", "eval", {{"test_acc", 0.5}}) +
                            line(9, "aaaa", "done", {{"final_test_acc", 0.6}});
  // SIGTERM from outside (scancel): the peer writes its checkpoint and done with stopped = true.
  gt_test::TempDir outside("gt-report-stopped");
  write(outside.path / "peer0" / "metrics.jsonl", done0);
  write(outside.path / "peer1" / "metrics.jsonl",
        clock_line(1000.0, 1, 2) + line(4, "bbbb", "eval", {{"test_acc", 0.5}}) +
            line(6, "bbbb", "done", {{"final_test_acc", 0.5}, {"stopped", true}}));
  LaunchOptions o;
  o.report = outside.str();
  o.plots = false;
  o.ended_by = "SIGTERM";
  CHECK(run_report(o) == 1);
  {
    std::ifstream in(outside.path / "summary.json");
    const json s = json::parse(in);
    INFO(s.dump());
    CHECK(s["ended_by"] == "SIGTERM");
    REQUIRE(s["failed_peers"].size() == 1);
    CHECK(s["failed_peers"][0]["peer"] == 1);
    CHECK(s["peers"][1]["state"] == "stopped");
    CHECK(s["peers"][1]["failed"] == true);
    CHECK(s["peers"][1]["end"].get<std::string>().find("from outside") != std::string::npos);
    CHECK(s["peers"][0]["failed"] == false);
  }
  // The same stop played from the peer's --churn scenario: the run did what it was told.
  gt_test::TempDir scripted("gt-report-stop-played");
  write(scripted.path / "peer0" / "metrics.jsonl", done0);
  write(scripted.path / "peer1" / "metrics.jsonl",
        clock_line(1000.0, 1, 2) + line(4, "bbbb", "eval", {{"test_acc", 0.5}}) +
            line(5, "bbbb", "churn",
                 {{"kind", "stop"},
                  {"scenario", {{"at_progress", 0.5}, {"event", "stop"}, {"peers", {1}}}}}) +
            line(6, "bbbb", "done", {{"final_test_acc", 0.5}, {"stopped", true}}));
  o.report = scripted.str();
  o.ended_by.clear();
  CHECK(run_report(o) == 0);
  std::ifstream in(scripted.path / "summary.json");
  const json s = json::parse(in);
  INFO(s.dump());
  CHECK(s["failed_peers"].empty());
  CHECK(s["peers"][1]["state"] == "stopped");
  CHECK(s["peers"][1]["failed"] == false);
  CHECK(s["peers"][1]["end"] == "stopped by its --churn scenario");
  // --ended-by belongs to --report.
  CHECK_THROWS_AS(parse_launch_args({"--peers", "2", "--ended-by", "SIGTERM"}), UsageError);
}

TEST_CASE("report: a run resubmitted with fewer shards ends with that many peers, the one left "
          "over is no failure",
          "[apps]") {
  gt_test::TempDir dir("gt-report-resized");
  // First job: 3 shards, stopped by scancel (done with stopped). Second job: 2 shards, done.
  auto first = [](int shard, const std::string& id) {
    return clock_line(1000.0, shard, 3) + line(4, id, "eval", {{"epoch", 1}, {"test_acc", 0.5}}) +
           line(6, id, "done", {{"final_test_acc", 0.5}, {"stopped", true}});
  };
  auto second = [](int shard, const std::string& id) {
    return clock_line(2000.0, shard, 2) + line(3, id, "eval", {{"epoch", 2}, {"test_acc", 0.7}}) +
           line(5, id, "done", {{"final_test_acc", 0.7}, {"stopped", false}});
  };
  write(dir.path / "peer0" / "metrics.jsonl", first(0, "aaaa") + second(0, "aaaa"));
  write(dir.path / "peer1" / "metrics.jsonl", first(1, "bbbb") + second(1, "bbbb"));
  write(dir.path / "peer2" / "metrics.jsonl", first(2, "cccc"));
  LaunchOptions o;
  o.report = dir.str();
  o.plots = false;
  CHECK(run_report(o) == 0);
  std::ifstream in(dir.path / "summary.json");
  const json s = json::parse(in);
  INFO(s.dump());
  CHECK(s["failed_peers"].empty());
  CHECK(s["peers"][0]["state"] == "done");
  CHECK(s["peers"][1]["state"] == "done");
  CHECK(s["peers"][2]["state"] == "left (resized)");
  CHECK(s["peers"][2]["failed"] == false);
  CHECK(s["final_test_acc_mean"].get<double>() == Approx(0.7));  // the two of the last start

  // Without the second job peer 2 stopped from outside like the others: a failure, as before.
  gt_test::TempDir stopped("gt-report-resized-not");
  write(stopped.path / "peer0" / "metrics.jsonl", first(0, "aaaa"));
  write(stopped.path / "peer1" / "metrics.jsonl", first(1, "bbbb"));
  write(stopped.path / "peer2" / "metrics.jsonl", first(2, "cccc"));
  o.report = stopped.str();
  CHECK(run_report(o) == 1);
}
