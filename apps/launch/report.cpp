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
#include "core/churn/scenario.hpp"

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

// One peer's lines split into its processes, each with the launch time its clock started at. A
// process's t starts again at 0, so a smaller t starts the next process; so does a second clock
// line (each process writes one near its start: gossip-peer first, the Python Peer after its
// node's first lines).
struct Life {
  double offset = 0.0;  // launch time of this process's t = 0
  double end_t = 0.0;   // its last t: how long the process ran, to its last line
  std::vector<const std::string*> lines;
  bool clock = false;  // its clock line was seen
};

std::vector<Life> lives_of(const ReportPeer& p, double t0) {
  std::vector<Life> lives;
  double last = -1.0;
  std::size_t clock = 0;
  for (const auto& l : p.lines) {
    const json j = json::parse(l, nullptr, false);
    const double t = j["t"].get<double>();
    const bool is_clock = j["event"] == "clock";
    if (lives.empty() || t < last || (is_clock && lives.back().clock)) lives.emplace_back();
    last = t;
    Life& life = lives.back();
    life.clock = life.clock || is_clock;
    if (is_clock && clock < p.clocks.size()) {
      const double u = unix_of(p.clocks[clock++]);
      if (u > 0) life.offset = u - t0;
    }
    life.end_t = t;
    life.lines.push_back(&l);
  }
  return lives;
}

// How a process ended, from its own lines: "done" (its done line, stopped = false), "stopped"
// (done with stopped = true), "crash" or "stop" (the last churn event it played on itself, when
// that came after its last done line), or "" (neither: it died from outside or still runs).
std::string life_end(const Life& life) {
  for (auto it = life.lines.rbegin(); it != life.lines.rend(); ++it) {
    const std::string& l = **it;
    const bool done = l.find("\"event\":\"done\"") != std::string::npos;
    const bool churn = l.find("\"event\":\"churn\"") != std::string::npos;
    if (!done && !churn) continue;
    const json j = json::parse(l, nullptr, false);
    if (!j.is_object()) continue;
    if (done) return j.value("stopped", false) ? "stopped" : "done";
    const std::string kind = j.value("kind", "");
    if (kind == "crash" || kind == "stop") return kind;
  }
  return "";
}

// Whether the process played a stop of its --churn scenario (a scripted stop writes its churn
// line, then its done line with stopped = true).
bool played_stop(const Life& life) {
  for (const std::string* l : life.lines)
    if (l->find("\"event\":\"churn\"") != std::string::npos) {
      const json j = json::parse(*l, nullptr, false);
      if (j.is_object() && j.value("kind", "") == "stop") return true;
    }
  return false;
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

namespace {

// The candidate files under dir (*.jsonl, not the run's own files), sorted, and the peerN folders
// seen (relative paths).
struct Candidates {
  std::vector<std::pair<fs::path, std::string>> files;  // path, relative path
  std::set<std::string> peer_dirs;
};

Candidates list_candidates(const std::string& dir, std::vector<std::string>& notes) {
  Candidates c;
  static const std::regex peer_re("peer\\d{1,6}");
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw UsageError("--report " + dir + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) {
      notes.push_back("cannot read a folder under " + dir + " (" + ec.message() + ")");
      ec.clear();
      continue;
    }
    const fs::path p = it->path();
    const std::string rel = fs::relative(p, dir, ec).string();
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      if (std::regex_match(p.filename().string(), peer_re)) c.peer_dirs.insert(rel);
      continue;
    }
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    if (p.extension() != ".jsonl" || kRunFiles.count(p.filename().string())) continue;
    c.files.emplace_back(p, rel);
  }
  std::sort(c.files.begin(), c.files.end());
  return c;
}

// The peers' files read; a peerN folder that held none is named.
std::vector<ReportPeer> read_candidates(const Candidates& c, std::vector<std::string>& notes) {
  std::vector<ReportPeer> found;
  std::set<std::string> dirs_with_file;
  for (const auto& [p, rel] : c.files)
    if (auto peer = read_peer_file(p, rel, notes)) {
      found.push_back(std::move(*peer));
      for (fs::path d = fs::path(rel).parent_path(); !d.empty(); d = d.parent_path())
        dirs_with_file.insert(d.string());
    }
  for (const auto& d : c.peer_dirs)
    if (!dirs_with_file.count(d))
      notes.push_back(d + "/: a peer folder without a metrics file: that peer is missing");
  return found;
}

// The run's number of peers (the largest num_shards a peer says); those that left no file named.
int note_missing_shards(const std::vector<ReportPeer>& found, const std::set<int>& taken,
                        std::vector<std::string>& notes) {
  int shards = 0;
  for (const auto& p : found) shards = std::max(shards, clock_int(p, "num_shards").value_or(0));
  for (int s = 0; s < shards && s < 100000; ++s)
    if (!taken.count(s))
      notes.push_back("peer " + std::to_string(s) + " of " + std::to_string(shards) +
                      ": no metrics file found");
  return shards;
}

// The index a file claims: the shard the peer says, else its peerN folder.
std::optional<int> claimed_index(const ReportPeer& p) {
  auto w = clock_int(p, "shard");
  return w ? w : peer_dir_number(p.path);
}

// Of the files that claim one index, the longest keeps it whatever the order of the files; a file
// whose lines are the first lines of the kept one (a byte-identical or cut-short copy) is dropped,
// named; one that differs (files of two runs mixed) is named and counted as another peer.
void drop_copies(std::vector<ReportPeer>& found, std::vector<std::string>& notes) {
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return found[a].lines.size() > found[b].lines.size();
  });
  std::map<int, std::size_t> keeper;  // index -> the longest file claiming it
  std::vector<bool> drop(found.size(), false);
  for (std::size_t i : order) {
    const auto w = claimed_index(found[i]);
    if (!w) continue;
    const auto [it, first] = keeper.emplace(*w, i);
    if (first) continue;
    const ReportPeer& k = found[it->second];
    const ReportPeer& c = found[i];
    if (std::equal(c.lines.begin(), c.lines.end(), k.lines.begin())) {
      drop[i] = true;
      notes.push_back(c.path + ": " +
                      (c.lines.size() == k.lines.size()
                           ? "a copy of " + k.path
                           : "a cut-short copy of " + k.path + " (" +
                                 std::to_string(c.lines.size()) + " of its " +
                                 std::to_string(k.lines.size()) + " lines)") +
                      ": skipped");
    }
  }
  std::vector<ReportPeer> kept;
  for (std::size_t i = 0; i < found.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(found[i]));
  found = std::move(kept);
  // The longest of a claimed index first, so that it takes the index below.
  std::stable_sort(found.begin(), found.end(), [](const ReportPeer& a, const ReportPeer& b) {
    return a.lines.size() > b.lines.size();
  });
}

// Index: the shard the peer says, else its peerN folder. Files that say neither fill the gaps;
// a second file claiming a taken index that is not a copy (files of two runs mixed) is named and
// numbered after all.
void assign_indices(std::vector<ReportPeer>& found, std::vector<std::string>& notes) {
  drop_copies(found, notes);
  std::set<int> taken;
  std::vector<int> want(found.size(), -1);
  std::vector<std::size_t> dups;
  for (std::size_t i = 0; i < found.size(); ++i) {
    const auto w = claimed_index(found[i]);
    if (w && !taken.count(*w)) {
      want[i] = *w;
      taken.insert(*w);
    } else if (w) {
      notes.push_back(found[i].path + ": peer " + std::to_string(*w) +
                      " again, with other lines (files of two runs?): counted as another peer");
      dups.push_back(i);
    }
  }
  int next = 0;
  for (std::size_t i = 0; i < found.size(); ++i) {
    if (want[i] >= 0 || std::find(dups.begin(), dups.end(), i) != dups.end()) continue;
    while (taken.count(next)) ++next;
    want[i] = next;
    taken.insert(next);
  }
  const int shards = note_missing_shards(found, taken, notes);
  next = std::max(shards, taken.empty() ? 0 : *taken.rbegin() + 1);
  for (std::size_t i : dups) want[i] = next++;
  for (std::size_t i = 0; i < found.size(); ++i) found[i].index = want[i];
}

}  // namespace

ReportScan scan_report_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("--report " + dir + ": not a folder");
  ReportScan scan;
  const Candidates candidates = list_candidates(dir, scan.notes);
  std::vector<ReportPeer> found = read_candidates(candidates, scan.notes);
  assign_indices(found, scan.notes);
  std::sort(found.begin(), found.end(),
            [](const ReportPeer& a, const ReportPeer& b) { return a.index < b.index; });
  scan.peers = std::move(found);
  return scan;
}

namespace {

// Copies clock field `key` into `into` when it is there with the right type.
void take(const json& c, const char* key, std::string& into) {
  if (c.contains(key) && c[key].is_string()) into = c[key].get<std::string>();
}
void take(const json& c, const char* key, int& into) {
  if (c.contains(key) && c[key].is_number_integer()) into = c[key].get<int>();
}
void take(const json& c, const char* key, std::uint64_t& into) {
  if (c.contains(key) && c[key].is_number_unsigned()) into = c[key].get<std::uint64_t>();
}

// The run's settings, as the first peer that says them (every peer of a run has the same).
void take_run_settings(const ReportScan& scan, LaunchOptions& o, RunFacts& facts) {
  for (const auto& p : scan.peers) {
    if (p.clocks.empty()) continue;
    const json& c = p.clocks.front();
    take(c, "partition", o.partition);
    take(c, "data", o.data);
    take(c, "seed", o.seed);
    take(c, "model", facts.model);
    take(c, "epochs", facts.epochs);
    take(c, "batch", facts.batch);
    return;
  }
}

// The earliest clock of any peer: the report's launch time 0 (0 when no peer has a clock line).
double earliest_clock(const ReportScan& scan) {
  double t0 = 0.0;
  for (const auto& p : scan.peers)
    for (const auto& c : p.clocks)
      if (const double u = unix_of(c); u > 0 && (t0 == 0.0 || u < t0)) t0 = u;
  return t0;
}

// Each peer's lines folded into its figures and outcome, and split into its processes.
struct Folded {
  std::vector<PeerStats> stats;
  std::vector<PeerOutcome> outcomes;
  std::vector<std::vector<Life>> lives;
  std::map<std::string, std::size_t> by_id;  // a peer's id -> its place in scan.peers
  double end = 0.0;                          // launch time of the last line of any peer
  // Per peer: its processes after the first (restarts by the engine or a --churn crash), how
  // long each process ran (to its last line) and their sum, and why it failed or how it ended
  // when that is not plain "done".
  std::vector<int> restarts;
  std::vector<std::vector<double>> life_seconds;
  std::vector<double> seconds;
  std::vector<std::string> note;
};

// The run's size as it last started: num_shards of the latest clock line of any peer (0: none
// says). A run restarted at another size (docs/cluster.md, "One run") ends with that many peers.
int last_size(const ReportScan& scan) {
  double latest = -1.0;
  int size = 0;
  for (const auto& p : scan.peers)
    for (const auto& c : p.clocks)
      if (const double u = unix_of(c);
          u > latest && c.contains("num_shards") && c["num_shards"].is_number_integer()) {
        latest = u;
        size = int(std::clamp<long long>(c["num_shards"].get<long long>(), 0, 1000000));
      }
  return size;
}

// A peer past the run's last size whose last process belongs to a larger size: it left when the
// run restarted with fewer shards, which is no failure.
bool left_by_resize(const ReportPeer& p, int size) {
  if (size <= 0 || p.index < size || p.clocks.empty()) return false;
  const json& c = p.clocks.back();
  return c.contains("num_shards") && c["num_shards"].is_number_integer() &&
         c["num_shards"].get<long long>() > size;
}

Folded fold_peers(const ReportScan& scan, double target_acc, double t0) {
  const std::size_t n = scan.peers.size();
  const int size = last_size(scan);
  Folded f{std::vector<PeerStats>(n),
           std::vector<PeerOutcome>(n),
           std::vector<std::vector<Life>>(n),
           {},
           0.0,
           std::vector<int>(n, 0),
           std::vector<std::vector<double>>(n),
           std::vector<double>(n, 0.0),
           std::vector<std::string>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    const ReportPeer& p = scan.peers[i];
    PeerStats& st = f.stats[i];
    for (const auto& l : p.lines) st.add_line(l, target_acc);
    st.bad_lines += p.bad_lines + (p.truncated ? 1 : 0);
    if (!st.id.empty() && st.id != "local") f.by_id[st.id] = i;
    const std::vector<Life>& lives = f.lives[i] = lives_of(p, t0);
    PeerOutcome& out = f.outcomes[i];
    out.start_offset_s = lives.front().offset;
    for (const auto& life : lives) out.life_offsets_s.push_back(life.offset);
    f.restarts[i] = int(lives.size()) - 1;
    for (const auto& life : lives) {
      f.life_seconds[i].push_back(life.end_t);
      f.seconds[i] += life.end_t;
    }
    // How the peer ended is how its last process ended.
    const std::string end = life_end(lives.back());
    out.failed = false;
    if (end == "done") {
      out.state = "done";
    } else if (end == "stop" || (end == "stopped" && played_stop(lives.back()))) {
      out.state = "stopped";
      f.note[i] = "stopped by its --churn scenario";
    } else if (end == "stopped") {
      out.state = "stopped";
      out.failed = true;
      f.note[i] = "stopped before it finished (SIGTERM or SIGINT from outside, not its --churn "
                  "scenario)";
    } else if (end == "crash") {
      out.state = "crashed";
      out.alive_at_end = false;
      f.note[i] = "crashed by its --churn scenario, not restarted";
    } else {
      out.state = "no done line (crashed, killed or still running)";
      out.failed = true;
      f.note[i] = "its last process ended without a done line (killed from outside, crashed, or "
                  "still running)";
    }
    if (out.state != "done" && left_by_resize(p, size)) {
      out.state = "left (resized)";
      out.failed = false;
      out.alive_at_end = false;
      f.note[i] = "not in the run's last start, with " + std::to_string(size) +
                  " shards: it left when the run restarted at that size";
    }
    f.end = std::max(f.end, lives.back().offset + lives.back().end_t);
  }
  return f;
}

// The peers' events on one clock, as gossip-launch's events.jsonl has them, and the churn
// scenario events the peers played.
class EventsOnOneClock {
 public:
  EventsOnOneClock(const ReportScan& scan, const Folded& f) : scan_(scan), f_(f) {}

  void collect() {
    for (std::size_t i = 0; i < scan_.peers.size(); ++i)
      for (std::size_t k = 0; k < f_.lives[i].size(); ++k) {
        const Life& life = f_.lives[i][k];
        add_life(scan_.peers[i].index, life, k > 0);
        // A process that ended without its done line and without a crash or stop it played
        // itself died from outside (kill -9, OOM, a node lost): a death the report counts, at its
        // last line, whether the engine restarted it or not.
        if (!ended_cleanly(life)) {
          events.push_back({{"t", life.offset + life.end_t},
                            {"event", "churn"},
                            {"kind", "crash"},
                            {"source", "unscripted"},
                            {"applied_to", json::array({scan_.peers[i].index})}});
          churn = true;
          unscripted = true;
        }
      }
    std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) {
      return a["t"].get<double>() < b["t"].get<double>();
    });
  }

  std::vector<json> events;
  json scenario_events = json::array();
  bool churn = false;
  bool scripted = false;    // the peers played churn events of a scenario
  bool unscripted = false;  // a process died from outside, or the engine restarted one

 private:
  static bool ended_cleanly(const Life& life) { return !life_end(life).empty(); }

  // A process's start and exit (a restart of the engine before all but the first) and its lines.
  void add_life(int idx, const Life& life, bool restarted) {
    if (restarted) {
      events.push_back({{"t", life.offset},
                        {"event", "churn"},
                        {"kind", "restart"},
                        {"source", "engine"},
                        {"applied_to", json::array({idx})}});
      churn = true;
      unscripted = true;
    }
    events.push_back({{"t", life.offset}, {"event", "start"}, {"peer", idx}});
    for (const std::string* l : life.lines) {
      if (l->find("\"event\":\"churn\"") != std::string::npos)
        add_churn_line(idx, life, *l);
      else
        add_observed_line(idx, life, *l);
    }
    events.push_back({{"t", life.offset + life.end_t}, {"event", "exit"}, {"peer", idx}});
  }

  // A churn event the peer played.
  void add_churn_line(int idx, const Life& life, const std::string& l) {
    const json j = json::parse(l, nullptr, false);
    events.push_back({{"t", life.offset + j["t"].get<double>()},
                      {"event", "churn"},
                      {"kind", j.value("kind", "?")},
                      {"source", "peer"},
                      {"applied_to", json::array({idx})}});
    churn = true;
    scripted = true;
    if (j.contains("scenario") && j["scenario"].is_object())
      scenario_events.push_back(j["scenario"]);
  }

  // What the peer observed of the others (their ids named by their report index).
  void add_observed_line(int idx, const Life& life, const std::string& l) {
    auto ob = observed_line(std::size_t(idx), l, [&](const std::string& id) {
      auto it = f_.by_id.find(id);
      return it == f_.by_id.end()
                 ? std::nullopt
                 : std::optional<std::size_t>(std::size_t(scan_.peers[it->second].index));
    });
    if (!ob) return;
    const json j = json::parse(l, nullptr, false);
    json e = ob->second;
    e["t"] = life.offset + j["t"].get<double>();
    e["event"] = ob->first;
    events.push_back(std::move(e));
  }

  const ReportScan& scan_;
  const Folded& f_;
};

// summary.json's churn section, from the events the peers played and the deaths and restarts
// nobody scripted.
json played_churn_report(const std::vector<json>& events, const json& scenario_events, int n,
                         bool scripted, bool unscripted) {
  core::ChurnScenario sc;
  sc.initial_peers = std::max(1, n);
  try {
    if (scripted) sc = core::parse_churn_scenario({{"events", scenario_events}}, std::max(1, n));
  } catch (const core::ScenarioError&) {
    // The peers' own events name shards beyond the peers found: the section still stands.
  }
  std::string what = scripted ? "gossip-peer --churn (played by the peers)" : "";
  if (unscripted)
    what += std::string(scripted ? "; " : "") +
            "deaths from outside and restarts by the engine (not scripted)";
  return churn_report(events, sc, what);
}

// The table's state: the peer's, its restarts and the time its processes ran, e.g.
// "done (1 restart) 23.4 s", "stopped, FAILED: stopped before it finished (...)".
std::string table_state(const Folded& f, std::size_t i) {
  std::string s = f.outcomes[i].state;
  if (f.restarts[i] > 0)
    s += " (" + std::to_string(f.restarts[i]) + (f.restarts[i] == 1 ? " restart)" : " restarts)");
  char secs[32];
  std::snprintf(secs, sizeof secs, " %.1f s", f.seconds[i]);
  s += secs;
  if (f.outcomes[i].failed)
    s += ", FAILED: " + f.note[i];
  else if (!f.note[i].empty())
    s += ": " + f.note[i];
  return s;
}

std::string report_table(const ReportScan& scan, const Folded& f, int epochs,
                         const std::string& dir) {
  std::string table = "gossip-launch --report " + dir + "  " + std::to_string(scan.peers.size()) +
                      " peer" + (scan.peers.size() == 1 ? "" : "s") + "\n" + peer_table_header() +
                      "\n";
  for (std::size_t i = 0; i < scan.peers.size(); ++i)
    table += peer_table_row(std::size_t(scan.peers[i].index), f.stats[i], epochs,
                            table_state(f, i)) +
             "\n";
  return table;
}

}  // namespace

Report build_report(const ReportScan& scan, const LaunchOptions& o_in, const std::string& dir) {
  LaunchOptions o = o_in;
  RunFacts facts;
  facts.options = &o;
  facts.run_dir = dir;
  take_run_settings(scan, o, facts);
  const double t0 = earliest_clock(scan);
  facts.started_at = t0 > 0 ? iso_utc(t0) : "";
  facts.consensus_note =
      "not measured by --report (the peers' checkpoints are not compared side by side)";
  const Folded f = fold_peers(scan, o.target_acc, t0);
  facts.seconds = f.end;
  EventsOnOneClock ev(scan, f);
  ev.collect();

  Report r;
  r.summary = make_summary(facts, f.stats, f.outcomes);
  // A peer's time is the sum of its processes' (a restarted one's earlier lives count, the time
  // it was down does not); its restarts and how it ended, and the peers that failed.
  json failed = json::array();
  for (std::size_t i = 0; i < scan.peers.size() && i < r.summary["peers"].size(); ++i) {
    json& p = r.summary["peers"][i];
    p["seconds"] = f.seconds[i];
    p["life_seconds"] = f.life_seconds[i];
    p["restarts"] = f.restarts[i];
    p["end"] = f.note[i].empty() ? json(nullptr) : json(f.note[i]);
    if (f.outcomes[i].failed)
      failed.push_back({{"peer", scan.peers[i].index}, {"why", f.note[i]}});
  }
  r.summary["failed_peers"] = failed;
  r.summary["ended_by"] = o.ended_by.empty() ? json(nullptr) : json(o.ended_by);
  json files = json::array();
  for (const auto& p : scan.peers) files.push_back({{"peer", p.index}, {"file", p.path}});
  r.summary["report"] = {{"source_dir", dir}, {"files", files}, {"skipped", scan.notes}};
  if (ev.churn)
    r.summary["churn"] = played_churn_report(ev.events, ev.scenario_events, int(scan.peers.size()),
                                             ev.scripted, ev.unscripted);
  r.events = std::move(ev.events);
  for (const auto& l : f.lives) {
    r.life_offsets.emplace_back();
    for (const auto& life : l) r.life_offsets.back().push_back(life.offset);
  }
  r.table = report_table(scan, f, facts.epochs, dir);
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
        "scripts/plot/plot_run.py not found (set GT_SCRIPTS_DIR to the folder that holds it)";
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
  if (!o.ended_by.empty())
    std::fprintf(stderr, "gossip-launch --report: the run was ended by %s\n", o.ended_by.c_str());
  // Exit 1 when a peer failed: it never finished and neither its --churn scenario nor a
  // restart explains it (a peer stopped from outside, one killed and not restarted).
  for (const auto& p : r.summary["failed_peers"])
    std::fprintf(stderr, "gossip-launch --report: FAILED: peer %d: %s\n", p["peer"].get<int>(),
                 p["why"].get<std::string>().c_str());
  return r.summary["failed_peers"].empty() ? 0 : 1;
}

}  // namespace gossiptrain::apps
