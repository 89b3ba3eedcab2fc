// gossip-launch --report: peers' metrics files from anywhere, read as one run (launch_report.hpp).

#include "apps/launch/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "apps/common/plots.hpp"
#include "apps/launch/churn.hpp"
#include "apps/launch/metrics.hpp"
#include "apps/launch/summary.hpp"
#include "apps/common/option_table.hpp"
#include "core/churn_scenario.hpp"

namespace gossiptrain::apps {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::uintmax_t kMaxMetricsFileBytes = 4ull << 30;  // larger: not a peer's metrics
constexpr double kPlotTimeoutS = 120.0;
constexpr int kPlotPollMs = 100;
// Files that gossip-launch and --report write beside the peers' metrics: not a peer's.
const std::set<std::string> kRunFiles = {"events.jsonl", "consensus.jsonl", "report-events.jsonl"};

bool is_metrics_line(const json& j) {
  return j.is_object() && j.contains("t") && j["t"].is_number() &&
         std::isfinite(j["t"].get<double>()) && j.contains("peer") && j["peer"].is_string() &&
         j.contains("event") && j["event"].is_string();
}

// Reads one candidate file; nothing when it holds no metrics line (a foreign file).
std::optional<ReportPeer> read_peer_file(const fs::path& path, const std::string& rel,
                                         std::vector<std::string>& notes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    notes.push_back(rel + ": cannot read it (" + ec.message() + "): skipped");
    return std::nullopt;
  }
  if (size > kMaxMetricsFileBytes) {
    notes.push_back(rel + ": " + std::to_string(size >> 20) +
                    " MiB, too large for a peer's "
                    "metrics: skipped");
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    notes.push_back(rel + ": cannot open it: skipped");
    return std::nullopt;
  }
  ReportPeer p;
  p.path = rel;
  std::string line;
  while (std::getline(in, line)) {
    const bool complete = !in.eof();  // getline stopped at a newline
    if (line.empty()) continue;
    if (!complete) {
      p.truncated = true;  // a peer killed mid-write, or a copy cut short
      break;
    }
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !is_metrics_line(j)) {
      ++p.bad_lines;
      continue;
    }
    if (j["event"] == "clock") p.clocks.push_back(j);
    p.lines.push_back(std::move(line));
  }
  if (p.lines.empty()) {
    notes.push_back(rel + ": not a peer's metrics file (no line with t, peer and event): skipped");
    return std::nullopt;
  }
  if (p.truncated) notes.push_back(rel + ": its last line is cut short: that line skipped");
  if (p.bad_lines > 0)
    notes.push_back(rel + ": " + std::to_string(p.bad_lines) +
                    " line(s) that are not metrics lines skipped");
  if (p.clocks.empty())
    notes.push_back(rel +
                    ": no clock line (a peer older than --report): its own clock is used, "
                    "starting with the others");
  return p;
}

std::optional<int> clock_int(const ReportPeer& p, const char* key) {
  if (p.clocks.empty()) return std::nullopt;
  const json& c = p.clocks.front();
  if (!c.contains(key) || !c[key].is_number_integer()) return std::nullopt;
  const auto v = c[key].get<long long>();
  if (v < 0 || v > 1000000) return std::nullopt;
  return int(v);
}

// The number in a folder name peerN, if any of the file's parents is one.
std::optional<int> peer_dir_number(const fs::path& rel) {
  static const std::regex re("peer(\\d{1,6})");
  std::smatch m;
  for (fs::path d = rel.parent_path(); !d.empty(); d = d.parent_path()) {
    const std::string name = d.filename().string();
    if (std::regex_match(name, m, re)) return std::stoi(m[1]);
    if (d == d.parent_path()) break;
  }
  return std::nullopt;
}

double unix_of(const json& clock) {
  return clock.contains("unix_s") && clock["unix_s"].is_number() ? clock["unix_s"].get<double>()
                                                                 : 0.0;
}

std::string iso_utc(double unix_s) {
  std::time_t t = std::time_t(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// One peer's lines split into its processes (a smaller t starts the next), each with the launch
// time its clock started at.
struct Life {
  double offset = 0.0;  // launch time of this process's t = 0
  double end_t = 0.0;   // its last t
  std::vector<const std::string*> lines;
};

std::vector<Life> lives_of(const ReportPeer& p, double t0) {
  std::vector<Life> lives;
  double last = -1.0;
  std::size_t clock = 0;
  for (const auto& l : p.lines) {
    const json j = json::parse(l, nullptr, false);
    const double t = j["t"].get<double>();
    if (lives.empty() || t < last) lives.emplace_back();
    last = t;
    Life& life = lives.back();
    if (j["event"] == "clock" && clock < p.clocks.size()) {
      const double u = unix_of(p.clocks[clock++]);
      if (u > 0) life.offset = u - t0;
    }
    life.end_t = t;
    life.lines.push_back(&l);
  }
  return lives;
}

std::string title_of(const json& summary) {
  std::vector<std::string> parts;
  for (const char* k : {"mode", "partition"})
    if (summary.contains(k) && summary[k].is_string() && !summary[k].get<std::string>().empty())
      parts.push_back(summary[k].get<std::string>());
  const int n = summary.value("num_peers", 0);
  parts.push_back(std::to_string(n) + (n == 1 ? " peer" : " peers"));
  std::string t;
  for (const auto& p : parts) t += (t.empty() ? "" : " / ") + p;
  return t;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw UsageError("cannot write " + path.string());
}

}  // namespace

ReportScan scan_report_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("--report " + dir + ": not a folder");
  ReportScan scan;
  std::vector<std::pair<fs::path, std::string>> files;
  std::set<std::string> peer_dirs_seen, peer_dirs_with_file;
  static const std::regex peer_re("peer\\d{1,6}");
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw UsageError("--report " + dir + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) {
      scan.notes.push_back("cannot read a folder under " + dir + " (" + ec.message() + ")");
      ec.clear();
      continue;
    }
    const fs::path p = it->path();
    const std::string rel = fs::relative(p, dir, ec).string();
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      if (std::regex_match(p.filename().string(), peer_re)) peer_dirs_seen.insert(rel);
      continue;
    }
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    if (p.extension() != ".jsonl" || kRunFiles.count(p.filename().string())) continue;
    files.emplace_back(p, rel);
  }
  std::sort(files.begin(), files.end());
  std::vector<ReportPeer> found;
  for (const auto& [p, rel] : files)
    if (auto peer = read_peer_file(p, rel, scan.notes)) {
      found.push_back(std::move(*peer));
      for (fs::path d = fs::path(rel).parent_path(); !d.empty(); d = d.parent_path())
        peer_dirs_with_file.insert(d.string());
    }
  for (const auto& d : peer_dirs_seen)
    if (!peer_dirs_with_file.count(d))
      scan.notes.push_back(d + "/: a peer folder without a metrics file: that peer is missing");
  // Index: the shard the peer says, else its peerN folder. Files that say neither fill the gaps;
  // a second file claiming a taken index (a copy, two runs mixed) is named and numbered after all.
  std::set<int> taken;
  std::vector<int> want(found.size(), -1);
  std::vector<std::size_t> dups;
  for (std::size_t i = 0; i < found.size(); ++i) {
    auto w = clock_int(found[i], "shard");
    if (!w) w = peer_dir_number(found[i].path);
    if (w && !taken.count(*w)) {
      want[i] = *w;
      taken.insert(*w);
    } else if (w) {
      scan.notes.push_back(found[i].path + ": peer " + std::to_string(*w) +
                           " again (a copy, or files of two runs?): counted as another peer");
      dups.push_back(i);
    }
  }
  // Peers the run should have had (their own num_shards) that left no file.
  int shards = 0;
  for (const auto& p : found) shards = std::max(shards, clock_int(p, "num_shards").value_or(0));
  int next = 0;
  for (std::size_t i = 0; i < found.size(); ++i) {
    if (want[i] >= 0 || std::find(dups.begin(), dups.end(), i) != dups.end()) continue;
    while (taken.count(next)) ++next;
    want[i] = next;
    taken.insert(next);
  }
  for (int s = 0; s < shards && s < 100000; ++s)
    if (!taken.count(s))
      scan.notes.push_back("peer " + std::to_string(s) + " of " + std::to_string(shards) +
                           ": no metrics file found");
  next = std::max(shards, taken.empty() ? 0 : *taken.rbegin() + 1);
  for (std::size_t i : dups) want[i] = next++;
  for (std::size_t i = 0; i < found.size(); ++i) found[i].index = want[i];
  std::sort(found.begin(), found.end(),
            [](const ReportPeer& a, const ReportPeer& b) { return a.index < b.index; });
  scan.peers = std::move(found);
  return scan;
}

Report build_report(const ReportScan& scan, const LaunchOptions& o_in, const std::string& dir) {
  LaunchOptions o = o_in;
  RunFacts facts;
  facts.options = &o;
  facts.run_dir = dir;
  // The run's settings, as the first peer that says them (every peer of a run has the same).
  for (const auto& p : scan.peers) {
    if (p.clocks.empty()) continue;
    const json& c = p.clocks.front();
    o.partition = c.value("partition", o.partition);
    o.data = c.value("data", o.data);
    if (c.contains("seed") && c["seed"].is_number_unsigned())
      o.seed = c["seed"].get<std::uint64_t>();
    facts.model = c.value("model", std::string());
    if (c.contains("epochs") && c["epochs"].is_number_integer())
      facts.epochs = c["epochs"].get<int>();
    if (c.contains("batch") && c["batch"].is_number_integer()) facts.batch = c["batch"].get<int>();
    break;
  }
  double t0 = 0.0;
  for (const auto& p : scan.peers)
    for (const auto& c : p.clocks)
      if (const double u = unix_of(c); u > 0 && (t0 == 0.0 || u < t0)) t0 = u;
  facts.started_at = t0 > 0 ? iso_utc(t0) : "";
  facts.consensus_note =
      "not measured by --report (the peers' checkpoints are not compared side by side)";

  std::vector<PeerStats> stats(scan.peers.size());
  std::vector<PeerOutcome> outcomes(scan.peers.size());
  std::vector<std::vector<Life>> lives(scan.peers.size());
  std::map<std::string, std::size_t> by_id;
  double end = 0.0;
  for (std::size_t i = 0; i < scan.peers.size(); ++i) {
    const ReportPeer& p = scan.peers[i];
    for (const auto& l : p.lines) stats[i].add_line(l, o.target_acc);
    stats[i].bad_lines += p.bad_lines + (p.truncated ? 1 : 0);
    if (!stats[i].id.empty() && stats[i].id != "local") by_id[stats[i].id] = i;
    lives[i] = lives_of(p, t0);
    PeerOutcome& out = outcomes[i];
    out.start_offset_s = lives[i].front().offset;
    out.clock_offset_s = lives[i].back().offset;
    if (stats[i].target_life < int(lives[i].size()))
      out.target_clock_offset_s = lives[i][std::size_t(stats[i].target_life)].offset;
    out.state = stats[i].done ? (stats[i].stopped ? "stopped" : "done")
                              : "no done line (crashed, killed or still running)";
    out.failed = !stats[i].done;
    end = std::max(end, lives[i].back().offset + lives[i].back().end_t);
  }
  facts.seconds = end;

  // The peers' events on one clock, as gossip-launch's events.jsonl has them: starts and ends of
  // each process, the churn events the peers played, and what they observed of each other.
  std::vector<json> events;
  bool churn = false;
  json scenario_events = json::array();
  auto index_of = [&](const std::string& id) -> std::optional<std::size_t> {
    auto it = by_id.find(id);
    return it == by_id.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  };
  for (std::size_t i = 0; i < scan.peers.size(); ++i) {
    const int idx = scan.peers[i].index;
    for (std::size_t k = 0; k < lives[i].size(); ++k) {
      const Life& life = lives[i][k];
      if (k > 0)
        events.push_back({{"t", life.offset},
                          {"event", "churn"},
                          {"kind", "restart"},
                          {"source", "engine"},
                          {"applied_to", json::array({idx})}});
      events.push_back({{"t", life.offset}, {"event", "start"}, {"peer", idx}});
      for (const std::string* l : life.lines) {
        if (l->find("\"event\":\"churn\"") != std::string::npos) {
          const json j = json::parse(*l, nullptr, false);
          json e = {{"t", life.offset + j["t"].get<double>()},
                    {"event", "churn"},
                    {"kind", j.value("kind", "?")},
                    {"source", "peer"},
                    {"applied_to", json::array({idx})}};
          events.push_back(e);
          churn = true;
          if (j.contains("scenario") && j["scenario"].is_object())
            scenario_events.push_back(j["scenario"]);
          continue;
        }
        auto ob = observed_line(std::size_t(idx), *l, [&](const std::string& id) {
          auto k2 = index_of(id);
          return k2 ? std::optional<std::size_t>(std::size_t(scan.peers[*k2].index)) : std::nullopt;
        });
        if (!ob) continue;
        const json j = json::parse(*l, nullptr, false);
        json e = ob->second;
        e["t"] = life.offset + j["t"].get<double>();
        e["event"] = ob->first;
        events.push_back(std::move(e));
      }
      events.push_back({{"t", life.offset + life.end_t}, {"event", "exit"}, {"peer", idx}});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) {
    return a["t"].get<double>() < b["t"].get<double>();
  });

  Report r;
  r.summary = make_summary(facts, stats, outcomes);
  json files = json::array();
  for (const auto& p : scan.peers) files.push_back({{"peer", p.index}, {"file", p.path}});
  r.summary["report"] = {{"source_dir", dir}, {"files", files}, {"skipped", scan.notes}};
  if (churn) {
    const int n = int(scan.peers.size());
    core::ChurnScenario sc;
    sc.initial_peers = std::max(1, n);
    try {
      sc = core::parse_churn_scenario({{"events", scenario_events}}, std::max(1, n));
    } catch (const core::ScenarioError&) {
      // The peers' own events name shards beyond the peers found: the section still stands.
    }
    r.summary["churn"] = churn_report(events, sc, "gossip-peer --churn (played by the peers)");
  }
  r.events = std::move(events);
  for (const auto& l : lives) {
    r.life_offsets.emplace_back();
    for (const auto& life : l) r.life_offsets.back().push_back(life.offset);
  }
  std::string table = "gossip-launch --report " + dir + "  " + std::to_string(scan.peers.size()) +
                      " peer" + (scan.peers.size() == 1 ? "" : "s") + "\n" + peer_table_header() +
                      "\n";
  for (std::size_t i = 0; i < scan.peers.size(); ++i)
    table += peer_table_row(std::size_t(scan.peers[i].index), stats[i], facts.epochs,
                            outcomes[i].state) +
             "\n";
  r.table = table;
  return r;
}

int run_report(const LaunchOptions& o) {
  const std::string dir = o.report;
  const fs::path out = o.out.empty() ? fs::path(dir) : fs::path(o.out);
  ReportScan scan = scan_report_dir(dir);
  for (const auto& n : scan.notes) std::fprintf(stderr, "gossip-launch --report: %s\n", n.c_str());
  if (scan.peers.empty()) {
    std::fprintf(stderr, "gossip-launch --report: no peer's metrics file (*.jsonl) under %s\n",
                 dir.c_str());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw UsageError("--out " + out.string() + ": " + ec.message());
  // A local launch's own summary (consensus, outcomes it saw) is worth more than a report.
  {
    std::ifstream in(out / "summary.json");
    const json old = in ? json::parse(in, nullptr, false) : json();
    if (old.is_object() && !old.contains("report"))
      throw UsageError(out.string() +
                       "/summary.json is a launch's own summary: pass --out "
                       "ANOTHER_DIR to write the report elsewhere");
  }
  Report r = build_report(scan, o, dir);
  // The plots put each process of a peer at its own start (a restarted peer's clock starts again).
  json plist = json::array();
  for (std::size_t i = 0; i < scan.peers.size(); ++i)
    plist.push_back({{"peer", scan.peers[i].index},
                     {"start_offset_s", r.life_offsets[i].front()},
                     {"life_offsets_s", r.life_offsets[i]},
                     {"metrics", fs::absolute(fs::path(dir) / scan.peers[i].path).string()}});
  const json index = {{"title", title_of(r.summary)},
                      {"mode", r.summary["mode"]},
                      {"partition", r.summary["partition"]},
                      {"peers", r.summary["num_peers"]},
                      {"target_acc", o.target_acc},
                      {"events", "report-events.jsonl"},
                      {"peer_list", plist}};
  write_text(out / "report.json", index.dump(2) + "\n");
  std::string ev;
  for (const auto& e : r.events) ev += e.dump() + "\n";
  write_text(out / "report-events.jsonl", ev);
  write_text(out / "table.txt", r.table);
  std::fputs(r.table.c_str(), stderr);
  write_text(out / "summary.json", r.summary.dump(2) + "\n");
  json plots = {{"ok", false}};
  if (!o.plots) {
    plots["message"] = "skipped (--no-plots)";
  } else if (auto script = find_script(self_dir(), "plot_run.py")) {
    plots = run_plot_script(*script, out, kPlotTimeoutS, kPlotPollMs);
  } else {
    plots["message"] =
        "scripts/plot_run.py not found (set GT_SCRIPTS_DIR to the folder that holds it)";
  }
  r.summary["plots"] = plots;
  write_text(out / "summary.json", r.summary.dump(2) + "\n");
  std::fprintf(stderr, "plots: %s%s\n", plots["ok"].get<bool>() ? "" : "NOT MADE: ",
               plots.value("message", std::string()).c_str());
  std::fprintf(stderr,
               "gossip-launch --report: %zu peer(s), final test acc mean %s min %s; %s "
               "(summary.json, table.txt)\n",
               scan.peers.size(),
               pct(r.summary["final_test_acc_mean"].is_number()
                       ? std::optional<double>(r.summary["final_test_acc_mean"].get<double>())
                       : std::nullopt)
                   .c_str(),
               pct(r.summary["final_test_acc_min"].is_number()
                       ? std::optional<double>(r.summary["final_test_acc_min"].get<double>())
                       : std::nullopt)
                   .c_str(),
               out.c_str());
  return 0;
}

}  // namespace gossiptrain::apps
