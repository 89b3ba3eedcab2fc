// gossip-launch's run itself: preparing the run folder, the plan and config, watching the metric
// lines, the live table and table.txt, the summary, the plots and the exit code (process control:
// process.cpp).
#include "apps/launch/launch.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>
#include "apps/common/blas.hpp"
#include "apps/common/plots.hpp"
#include "apps/launch/churn.hpp"
#include "apps/launch/consensus.hpp"
#include "apps/launch/fedavg_report.hpp"
#include "apps/launch/metrics.hpp"
#include "apps/launch/netns.hpp"
#include "apps/launch/options.hpp"
#include "apps/launch/ports.hpp"
#include "apps/launch/resources.hpp"
#include "apps/launch/observe.hpp"
#include "apps/launch/report.hpp"
#include "apps/launch/summary.hpp"
#include "apps/launch/view.hpp"
#include "gossip/exchange/wire_format.hpp"

namespace gossiptrain::apps::launcher {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "gossip-launch: %s\nrun 'gossip-launch --help' for the flags\n", msg.c_str());
  return 2;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./:=,+@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string utc_now(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string write_network_key(const fs::path& path) {
  std::ifstream rnd("/dev/urandom", std::ios::binary);
  unsigned char key[32];
  if (!rnd.read(reinterpret_cast<char*>(key), sizeof key))
    throw std::runtime_error("cannot read /dev/urandom for the network key");
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : key) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  hex += "\n";
  bool ok = ::write(fd, hex.data(), hex.size()) == ssize_t(hex.size());
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path.string());
  return path.string();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

RunClock Launch::make_run_clock(bool resume, double unix_now) const {
  if (!resume) return RunClock(unix_now);
  std::vector<nlohmann::json> events;
  std::ifstream ev(run_dir_ / "events.jsonl");
  for (std::string line; std::getline(ev, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);  // a line cut by a kill is skipped
    if (j.is_object()) events.push_back(std::move(j));
  }
  std::optional<double> seconds;
  std::ifstream sum(run_dir_ / "summary.json");
  const auto s = nlohmann::json::parse(sum, nullptr, false);
  if (s.is_object() && s.contains("seconds") && s["seconds"].is_number())
    seconds = s["seconds"].get<double>();
  return RunClock(events, seconds, unix_now);
}

void Launch::prepare(int argc, char** argv) {
  t0_ = Clock::now();
  const double unix0 =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  started_at_ = utc_now("%Y-%m-%dT%H:%M:%SZ");
  std::string part = o_.partition;
  for (char& c : part)
    if (c == ':') c = '-';
  run_dir_ = o_.out.empty() ? fs::path("runs") / (std::string(mode_name(o_.mode)) + "-" + part + "-" +
                                                  std::to_string(o_.peers) + "p-" +
                                                  utc_now("%Y%m%d-%H%M%S"))
                            : fs::path(o_.out);
  std::error_code ec;
  const bool resume = !o_.resume.empty();
  if (!resume && fs::exists(run_dir_, ec) &&
      !(fs::is_directory(run_dir_, ec) && fs::is_empty(run_dir_, ec)))
    throw UsageError("run folder " + run_dir_.string() +
                     " exists and is not empty (peers would resume from its checkpoints and append "
                     "to its metrics): pass another --out, or continue that run with "
                     "'gossip-launch --resume " +
                     run_dir_.string() + "'");
  std::vector<int> ports(std::size_t(o_.slots()), 0);
  const bool networked = o_.mode == LaunchMode::Gossip || o_.mode == LaunchMode::Fedavg;
  if (networked) ports = pick_ports(o_.slots(), o_.base_port);
  fs::create_directories(run_dir_);
  // Resumed, the peers keep the run's key (and their identity.key files, in their folders).
  const fs::path key = run_dir_ / "network.key";
  if (networked && o_.network_key.empty())
    network_key_ = resume && fs::exists(key, ec) ? key.string() : write_network_key(key);
  plans_ = plan_peers(o_, run_dir_.string(), ports, network_key_);
  for (const auto& p : plans_) fs::create_directories(p.dir);
  if (o_.prometheus_base_port > 0)
    write_file(run_dir_ / "prometheus.yml", prometheus_config(plans_, o_.prometheus_base_port));
  run_clock_ = make_run_clock(resume, unix0);
  events_ = std::make_unique<EventLog>((run_dir_ / "events.jsonl").string());
  // Where this launch starts on the run's clock: a later --resume places the peers' clock lines
  // of this launch by it.
  events_->write(now(), "launch", {{"unix_s", run_clock_->unix0_s()}, {"resumed", resume}});
  if (o_.netns) {
    netns_ = std::make_unique<NetnsSwarm>(NetnsSwarm::make_run_id(), o_.slots());
    for (int i = 0; i < o_.slots(); ++i) netns_->add_host(i);
    events_->write(now(), "netns", {{"run_id", netns_->run_id()}, {"hosts", o_.slots()}});
  }
  // The random model's schedule is drawn for this long; the launcher stops asking once training
  // is over, so it only has to outlast any run.
  constexpr double kChurnHorizonS = 7 * 24 * 3600.0;
  if (o_.churn) churn_ = std::make_unique<ChurnRunner>(*o_.churn, kChurnHorizonS, *events_);
  // A scenario with fault events is the experiment that gossip-peer --fault asks to be declared.
  if (o_.churn && std::any_of(o_.churn->events.begin(), o_.churn->events.end(),
                              [](const auto& e) { return e.kind == core::ChurnKind::Fault; }))
    ::setenv("GOSSIPTRAIN_ALLOW_FAULTS", "1", 1);

  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + shell_quote(argv[i]);
  if (resume) {
    // The first line stays the run's command (a later --resume reads it); each resume is noted.
    std::ofstream(run_dir_ / "command.txt", std::ios::app)
        << "# resumed " << started_at_ << ": " << cmd << "\n";
    note("gossip-launch: resuming " + run_dir_.string() +
         ": each peer restarts from its last checkpoint");
  } else {
    write_file(run_dir_ / "command.txt", cmd + "\n");
  }
  tty_ = ::isatty(STDERR_FILENO) == 1;
}

double Launch::mean_progress() const {
  // FedAvg: the server's rounds are the run's progress (its clients write no step lines).
  if (o_.mode == LaunchMode::Fedavg) return fedavg_progress(stats_.at(0), plans_.at(0).config);
  double sum = 0.0;
  int n = 0;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (!children_[i].ever_started) continue;
    sum += stats_[i].progress();
    ++n;
  }
  return n ? sum / n : 0.0;
}

// Once no peer runs, the run is over unless the churn scenario still has to restart one it took
// down (a Ctrl-C ends the run regardless).
bool Launch::keep_going(bool any_running) const {
  if (any_running) return true;
  return churn_ && !stop_requested_ && !fedavg_done_ && churn_->waiting_for_restart();
}

// FedAvg under churn: once the server has finished its rounds the run is over. The scenario stops
// (a client restarted now would wait --fedavg-wait for a server that is gone), and a client still
// running 10 s later (one redialling it) is stopped with SIGTERM, which is not a failure.
void Launch::end_fedavg_churn() {
  if (!churn_ || o_.mode != LaunchMode::Fedavg || children_.empty()) return;
  const Child& server = children_[0];
  if (!fedavg_done_ && !server.running && server.ever_started && server.outcome.exit_code == 0) {
    fedavg_done_ = true;
    fedavg_done_at_ = now();
    note("gossip-launch: the FedAvg server is done: the churn scenario ends here");
  }
  if (fedavg_done_ && !fedavg_clients_stopped_ && now() > fedavg_done_at_ + 10.0) {
    fedavg_clients_stopped_ = true;
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, SIGTERM);
  }
}

// What the launcher observes in a peer's metrics goes to events.jsonl with the launch time: how
// peers see each other (membership changes), evaluations and catch-ups, for the churn report.
void Launch::observe(std::size_t i, const std::string& line, double now) {
  auto index_of = [this](const std::string& id) -> std::optional<std::size_t> {
    for (std::size_t k = 0; k < stats_.size(); ++k)
      if (stats_[k].id == id) return k;
    return std::nullopt;
  };
  if (auto o = observed_line(i, line, index_of)) events_->write(now, o->first, std::move(o->second));
}

void Launch::write_config() {
  // config.json after the spawn so it records the pids and start offsets as well.
  nlohmann::json peers = nlohmann::json::array();
  for (std::size_t i = 0; i < plans_.size(); ++i) {
    const auto& p = plans_[i];
    std::vector<std::string> full{peer_bin_};
    full.insert(full.end(), p.argv.begin(), p.argv.end());
    peers.push_back({{"peer", p.index},
                     {"dir", p.dir},
                     {"listen", p.listen},
                     {"seeds", p.seeds},
                     {"shard", p.config.shard},
                     {"num_shards", p.config.num_shards},
                     {"pid", children_[i].pid},
                     {"start_offset_s", children_[i].outcome.start_offset_s},
                     {"argv", full}});
  }
  std::error_code ec;
  nlohmann::json cfg = {
      {"mode", mode_name(o_.mode)},
      {"peers", o_.peers},
      {"peers_requested", o_.peers_requested},
      {"run_dir", run_dir_.string()},
      {"cwd", fs::current_path(ec).string()},
      {"started_at", started_at_},
      {"peer_bin", peer_bin_},
      {"partition", o_.partition},
      {"data", o_.data},
      {"seed", o_.seed},
      {"model", plans_[0].config.train.model},
      {"epochs", plans_[0].config.train.epochs},
      {"batch", plans_[0].config.train.batch},
      {"lr", plans_[0].config.train.lr},
      {"gossip_every", plans_[0].config.node.averager.gossip_every},
      {"wire", std::string(gossip::wire_name(plans_[0].config.node.averager.wire))},
      {"network_key", o_.network_key.empty() ? network_key_ : o_.network_key},
      {"base_port", o_.base_port},
      {"target_acc", o_.target_acc},
      {"stop_timeout_s", o_.stop_timeout_s},
      {"consensus_every_s", o_.consensus_every_s},
      {"forwarded", o_.forward},
      {"peer_list", peers},
  };
  write_file(run_dir_ / "config.json", cfg.dump(2) + "\n");
}

void Launch::note(const std::string& line) {
  if (tty_ && drawn_lines_ > 0) {
    std::fprintf(stderr, "\x1b[%dA\r\x1b[J", drawn_lines_);
    drawn_lines_ = 0;
    last_draw_ = -1e9;  // redraw the table under the note at the next tick
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Launch::note_churn() {
  const auto& lines = events_->lines();
  for (; churn_noted_ < lines.size(); ++churn_noted_) {
    std::string d = describe_churn(lines[churn_noted_]);
    if (d.empty()) continue;
    note("gossip-launch: " + d);
    last_churn_ = std::move(d);
  }
}

// The run time of a process's t = 0 that its `clock` line gives (the wall time of its t = 0).
std::optional<double> clock_line_start(const std::string& line, const RunClock& clock) {
  if (line.find("\"event\":\"clock\"") == std::string::npos) return std::nullopt;
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("unix_s") || !j["unix_s"].is_number()) return std::nullopt;
  return clock.at_unix(j["unix_s"].get<double>());
}

void Launch::poll_metrics() {
  for (std::size_t i = 0; i < tails_.size(); ++i) {
    const double now_s = now();
    tails_[i].poll([&](const std::string& line) {
      const auto t = stats_[i].add_line(line, o_.target_acc);
      std::optional<double> offset;
      if (t) {
        lives_[i].add(stats_[i].life, *t, now_s, clock_line_start(line, *run_clock_));
        offset = lives_[i].offsets().back();
      }
      // FedAvg rounds take a fraction of a tick on small models: the server's outage report
      // needs each round's time on the run's clock (from the line's own), not when it was read.
      const bool own_clock = o_.mode == LaunchMode::Fedavg && t;
      observe(i, line, own_clock ? std::min(now_s, *offset + *t) : now_s);
    });
    const PeerStats& s = stats_[i];
    if (s.averaging_alerts > children_[i].averaging_alerts_noted) {
      children_[i].averaging_alerts_noted = s.averaging_alerts;
      note("gossip-launch: peer " + std::to_string(i) + " is not averaging: its exchanges keep " +
           "failing (mostly '" + s.alert_reason + "'" +
           (s.alert_addr.empty() ? std::string() : ", dialling " + s.alert_addr) + ")");
    }
  }
}

void Launch::sample_consensus(bool final) {
  std::vector<bool> started;
  for (const auto& c : children_) started.push_back(c.ever_started);
  consensus_->sample(final, started, now());
}

std::string Launch::peer_state(std::size_t i) const {
  const PeerStats& s = stats_[i];
  const Child& c = children_[i];
  std::string state = c.outcome.state;
  if (c.running && s.lines == 0) state = "starting";
  else if (c.running && s.done) state = "finishing";
  else if (c.running && !s.hold.empty()) state = "on hold (" + s.hold + ")";
  if (s.not_averaging) state += " NOT AVERAGING (" + s.alert_reason + ")";
  if (churn_ && c.running && churn_->state(int(i)) == SlotState::Paused) state = "paused (churn)";
  if (c.running && !c.fault.empty()) state += " FAULTY (" + c.fault + ")";
  if (netns_ && netns_->partition_state().active())
    state += " partition group " + std::to_string(netns_->partition_state().group_of(int(i)));
  if (netns_ && netns_->link(int(i)).shaped())
    state += " link " + netns_->link(int(i)).to_json().dump();
  return state;
}

// The live view (full false): every peer's row up to kViewAllRows peers, else a summary line
// and the failing and slowest peers; full: every row (table.txt in the run folder).
std::vector<std::string> Launch::table(bool full) const {
  std::vector<std::string> lines;
  char buf[256];
  std::snprintf(buf, sizeof buf, "gossip-launch  %s  %s  %s  %.0f s", mode_name(o_.mode),
                who().c_str(), run_dir_.c_str(), now());
  lines.push_back(buf);
  lines.push_back(peer_table_header());
  const int epochs = plans_.empty() ? 0 : plans_[0].config.train.epochs;
  std::vector<ViewRow> rows;
  for (std::size_t i = 0; i < stats_.size(); ++i) {
    const PeerStats& s = stats_[i];
    const Child& c = children_[i];
    const bool failing =
        c.outcome.failed || s.not_averaging || (!c.running && c.outcome.exit_code > 0);
    rows.push_back({i, peer_table_row(i, s, epochs, peer_state(i)), s.progress(), failing,
                    c.running});
  }
  const std::size_t max_rows = full ? rows.size() : kViewAllRows;
  if (rows.size() > max_rows) lines.insert(lines.begin() + 1, view_summary(rows));
  for (auto& l : view_rows(rows, max_rows, kViewSlowest, (run_dir_ / "table.txt").string()))
    lines.push_back(std::move(l));
  if (!last_churn_.empty()) lines.push_back("last " + last_churn_);
  return lines;
}

void Launch::write_table_file(bool force) {
  const double now = this->now();
  if (!force && now - last_table_file_ < kTableFileS) return;
  last_table_file_ = now;
  std::string text;
  for (const auto& l : table(true)) text += l + "\n";
  write_file(run_dir_ / "table.txt", text);
}

std::string Launch::progress_line() const {
  int running = 0, ok = 0, failed = 0;
  std::optional<int> emin, emax;
  double bytes = 0, sum = 0, mn = 2;
  int with_acc = 0;
  for (std::size_t i = 0; i < stats_.size(); ++i) {
    running += children_[i].running;
    if (const auto e = stats_[i].epoch) {
      emin = std::min(emin.value_or(*e), *e);
      emax = std::max(emax.value_or(*e), *e);
    }
    ok += stats_[i].exchanges_ok;
    failed += stats_[i].exchanges_failed;
    bytes += double(stats_[i].bytes);
    if (stats_[i].test_acc) {
      sum += *stats_[i].test_acc;
      mn = std::min(mn, *stats_[i].test_acc);
      ++with_acc;
    }
  }
  char buf[256];
  const int epochs = plans_.empty() ? 0 : plans_[0].config.train.epochs;
  std::string acc = with_acc ? "acc mean " + pct(sum / with_acc) + " min " + pct(mn) : "acc -";
  const std::string ep = emin ? std::to_string(*emin) + ".." + std::to_string(*emax) : "-";
  std::snprintf(buf, sizeof buf,
                "gossip-launch: %4.0f s  running %d/%zu  epoch %s/%d  %s  exchanges %d ok %d "
                "failed  %.1f MB",
                now(), running, stats_.size(), ep.c_str(), epochs, acc.c_str(), ok, failed,
                bytes / 1e6);
  return buf;
}

void Launch::draw(bool force) {
  const double now = this->now();
  write_table_file(force);
  if (tty_) {
    if (!force && now - last_draw_ < kTtyRedrawS) return;
    last_draw_ = now;
    std::string out;
    if (drawn_lines_ > 0) out += "\x1b[" + std::to_string(drawn_lines_) + "A\r\x1b[J";
    auto lines = table();
    for (const auto& l : lines) out += l + "\n";
    std::fputs(out.c_str(), stderr);
    drawn_lines_ = int(lines.size());
  } else {
    if (!force && now - last_draw_ < kPlainProgressS) return;
    last_draw_ = now;
    std::fprintf(stderr, "%s\n", progress_line().c_str());
  }
  std::fflush(stderr);
}

void Launch::export_swarm(nlohmann::json& summary) {
  std::vector<std::string> ckpts;
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (children_[i].ever_started && children_[i].outcome.exit_code == 0)
      ckpts.push_back(plans_[i].dir + "/ckpt");
  note("gossip-launch: exporting the average of " + std::to_string(ckpts.size()) +
       " finished peer(s) to swarm/model.safetensors");
  nlohmann::json m = export_swarm_model(run_dir_.string(), ckpts, plans_[0].config, peer_bin_);
  if (m.contains("test_acc"))
    note("gossip-launch: swarm model test acc " + pct(m["test_acc"].get<double>()) +
         " (the average of " + std::to_string(ckpts.size()) + " peers)");
  else
    note("gossip-launch: swarm model not exported: " + m.value("error", std::string("?")));
  summary["swarm_model"] = m;
}

void Launch::finish_plots(nlohmann::json& summary) {
  nlohmann::json plots = {{"ok", false}};
  auto script = find_script(self_dir(), "plot_run.py");
  if (!o_.plots) {
    plots["message"] = "skipped (--no-plots)";
  } else if (!script) {
    plots["message"] =
        "scripts/plot/plot_run.py not found (set GT_SCRIPTS_DIR to the folder that holds it)";
  } else {
    plots = run_plot_script(*script, run_dir_, kPlotTimeoutS, kTickMs);
  }
  summary["plots"] = plots;
  if (o_.plots)
    std::fprintf(stderr, "plots: %s%s\n", plots["ok"].get<bool>() ? "" : "NOT MADE: ",
                 plots["message"].get<std::string>().c_str());
}

int Launch::exit_code() const {
  if (config_rejected_) return 2;
  // A peer that failed on its own is a failure even when the user stopped the run later; one that
  // only failed to stop in time after Ctrl-C is part of the interruption.
  bool failed_on_its_own = false, failed = false;
  for (const auto& c : children_) {
    failed |= c.outcome.failed;
    failed_on_its_own |= c.failed_before_stop;
  }
  if (failed_on_its_own) return 1;
  if (interrupted_) return 130;
  return failed ? 1 : 0;
}

// One pass of the launcher's loop: signals, churn, exits, starts, metrics, consensus. False once
// the run is over.
bool Launch::tick() {
  int sig = g_signals.load();
  if (sig > signals_seen_) {
    signals_seen_ = sig;
    interrupted_ = true;
    handle_stop();
  }
  if (stop_requested_ && !killed_ && now() > stop_deadline_) handle_stop();
  end_fedavg_churn();
  if (churn_ && !stop_requested_ && !fedavg_done_) {
    churn_->tick(now(), mean_progress(), *this);
    churn_->release_paused(now(), *this);
  }
  if (churn_) note_churn();
  reap();
  if (!all_started_ && !stop_requested_ && (seeds_ready() || since(t0_) > kSeedWaitS)) {
    if (!seeds_ready())
      note("gossip-launch: the seeds do not listen after " + std::to_string(int(kSeedWaitS)) +
           " s; starting the other peers anyway");
    start_rest();
  }
  poll_metrics();
  sample_consensus(false);
  bool any = false;
  for (const auto& c : children_) any |= c.running;
  return keep_going(any);
}

nlohmann::json Launch::summarize() {
  RunFacts facts;
  facts.options = &o_;
  facts.run_dir = run_dir_.string();
  facts.started_at = started_at_;
  facts.seconds = now();
  facts.interrupted = interrupted_;
  facts.consensus_distance = consensus_->final_distance();
  facts.consensus_note = consensus_->note();
  facts.consensus_points = consensus_->points();
  facts.epochs = plans_[0].config.train.epochs;
  facts.batch = plans_[0].config.train.batch;
  facts.model = plans_[0].config.train.model;
  std::vector<PeerOutcome> outcomes;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    PeerOutcome out = children_[i].outcome;
    out.started = children_[i].ever_started;
    out.life_offsets_s = lives_[i].offsets();
    // With churn, the final figures are over the peers alive at the end: not one the scenario
    // crashed or stopped for good.
    out.alive_at_end = out.started && (!churn_ || churn_->state(int(i)) == SlotState::Up);
    out.ckpt_samples = consensus_->final_samples(i);
    out.consensus = consensus_->peer_distance(i);
    outcomes.push_back(out);
  }
  nlohmann::json summary = make_summary(facts, stats_, outcomes);
  const FedAvgOptions& fa = plans_[0].config.fedavg;
  add_target_figures(summary, o_.mode, fa.local_steps > 0 ? 0 : fa.local_epochs, stats_);
  if (churn_) summary["churn"] = churn_report(events_->lines(), *o_.churn, o_.churn_arg);
  if (o_.mode == LaunchMode::Fedavg) summary["fedavg"] = fedavg_report(events_->lines(), facts.seconds);
  return summary;
}

// The run's figures and outcome on stderr; the exit code.
int Launch::report(const nlohmann::json& summary) const {
  auto fig = [&](const char* k) {
    const auto& v = summary[k];
    return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
  };
  char ttt[32] = "not reached", cons[32] = "-";
  if (auto v = fig("time_to_target_s")) std::snprintf(ttt, sizeof ttt, "%.1f s", *v);
  if (auto v = fig("consensus_distance")) std::snprintf(cons, sizeof cons, "%.4g", *v);
  std::fprintf(stderr,
               "final test acc: mean %s  min %s  max %s  best %s  time to %.0f%% (all peers): %s  "
               "consensus distance: %s\n",
               pct(fig("final_test_acc_mean")).c_str(), pct(fig("final_test_acc_min")).c_str(),
               pct(fig("final_test_acc_max")).c_str(), pct(fig("best_test_acc")).c_str(),
               100 * o_.target_acc, ttt, cons);
  if (summary.contains("fedavg"))
    for (const auto& l : describe_fedavg_outages(summary["fedavg"]))
      std::fprintf(stderr, "gossip-launch: %s\n", l.c_str());
  const int code = exit_code();
  int failed = 0;
  for (const auto& c : children_) failed += c.outcome.failed;
  std::fprintf(stderr, "gossip-launch: %s; run folder %s (summary.json)\n",
               code == 0     ? "all peers done"
               : code == 130 ? "interrupted"
               : code == 2   ? "a peer rejected its configuration"
                             : (std::to_string(failed) + " peer(s) failed").c_str(),
               run_dir_.c_str());
  return code;
}

int Launch::run(int argc, char** argv) {
  prepare(argc, argv);
  if (o_.mode == LaunchMode::Central && o_.peers_requested != 1)
    std::fprintf(stderr,
                 "gossip-launch: central mode runs one peer on all the data (--peers %d ignored)\n",
                 o_.peers_requested);
  install_signal_handlers();
  start_peers();
  std::fprintf(stderr, "gossip-launch: %s (%s, partition %s) -> %s\n", who().c_str(),
               mode_name(o_.mode), o_.partition.c_str(),
               run_dir_.c_str());
  while (tick()) {
    draw(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
  }
  if (!all_started_) {
    for (auto& c : children_)
      if (c.pid < 0 && c.outcome.state != "not joined yet")
        c.outcome.state = "not started (the run stopped first)";
    write_config();
  }
  poll_metrics();
  sample_consensus(true);
  draw(true);
  if (!tty_)
    for (const auto& l : table()) std::fprintf(stderr, "%s\n", l.c_str());
  nlohmann::json summary = summarize();
  if (o_.export_model) export_swarm(summary);
  // Written before plotting so plot_run.py can read it, and again with the plot result.
  write_file(run_dir_ / "summary.json", summary.dump(2) + "\n");
  finish_plots(summary);
  write_file(run_dir_ / "summary.json", summary.dump(2) + "\n");
  return report(summary);
}

}  // namespace gossiptrain::apps::launcher
