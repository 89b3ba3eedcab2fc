// gossip-launch's run: the Launch object (apps/launch/launch.cpp: the run itself, its table,
// summary and plots; apps/launch/process.cpp: process control, starting, reaping and stopping the
// peers) and what its files share. main() is apps/launch/gossip_launch.cpp.
#pragma once

#include <sys/types.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch/churn.hpp"
#include "apps/launch/consensus.hpp"
#include "apps/launch/metrics.hpp"
#include "apps/launch/netns.hpp"
#include "apps/launch/options.hpp"
#include "apps/launch/observe.hpp"
#include "apps/launch/run_clock.hpp"
#include "apps/launch/summary.hpp"

namespace gossiptrain::apps::launcher {

namespace fs = std::filesystem;

constexpr int kTickMs = 200;
constexpr double kTtyRedrawS = 1.0;
constexpr double kPlainProgressS = 10.0;
constexpr std::size_t kViewSlowest = 8;  // the slowest peers the compact live view shows
constexpr double kTableFileS = 2.0;      // how often table.txt is rewritten
constexpr double kPlotTimeoutS = 120.0;
constexpr int kLogTailLines = 5;
constexpr double kSeedWaitS = 60.0;  // loading Fashion-MNIST on a busy machine takes a while

// SIGINT/SIGTERM/SIGHUP seen so far (install_signal_handlers).
inline std::atomic<int> g_signals{0};
void install_signal_handlers();

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0);
int usage_error(const std::string& msg);
std::string shell_quote(const std::string& s);
std::string utc_now(const char* format);
// A fresh 32-byte network key, hex, in a new file of mode 0600; its path.
std::string write_network_key(const fs::path& path);
void write_file(const fs::path& path, const std::string& text);

struct Child {
  pid_t pid = -1;
  bool running = false;
  bool failed_before_stop = false;
  bool ever_started = false;
  int averaging_alerts_noted = 0;
  std::string fault;                    // --churn fault event: gossip-peer --fault at next start
  std::vector<std::string> extra_args;  // after the plan's argv (restarts and joins)
  Clock::time_point started;
  PeerOutcome outcome;
};

// fork + exec with stdout/stderr into log, stdin from /dev/null, and SIGTERM to the child if the
// launcher itself dies, so no peer outlives a killed launcher.
pid_t spawn(const std::string& bin, const std::vector<std::string>& args, const std::string& log);
std::string signal_name(int sig);

class Launch : private ChurnPeers {
 public:
  Launch(LaunchOptions o, std::string peer_bin) : o_(std::move(o)), peer_bin_(std::move(peer_bin)) {}
  int run(int argc, char** argv);

 private:
  void prepare(int argc, char** argv);
  void start_peers();
  void spawn_peer(std::size_t i);
  bool seeds_ready() const;
  void start_rest();
  void write_config();
  void reap();
  void poll_metrics();
  // Consensus sampling (ConsensusSampler): during the run when due, and once at the end (final).
  void sample_consensus(bool final);
  void handle_stop();
  void draw(bool force);
  std::vector<std::string> table(bool full = false) const;
  // Peer i's state column: its outcome, or what it is doing now (starting, on hold, paused...),
  // and what is wrong or imposed on it (not averaging, faulty, partition group, link shaping).
  std::string peer_state(std::size_t i) const;
  void write_table_file(bool force);
  std::string progress_line() const;
  void note(const std::string& line);
  // Says each churn event of events.jsonl as it happens, and keeps the last for the live table.
  void note_churn();
  void finish_plots(nlohmann::json& summary);
  // --export-model: the average of the peers that finished, exported and evaluated once.
  void export_swarm(nlohmann::json& summary);
  int exit_code() const;
  bool tick();
  nlohmann::json summarize();
  int report(const nlohmann::json& summary) const;
  // Churn (--churn): what the runner may do to the peers, and what the launcher observes.
  bool running(int i) const override { return children_.at(std::size_t(i)).running; }
  void send_signal(int i, int sig) override { ::kill(children_.at(std::size_t(i)).pid, sig); }
  void start_peer(int i) override;
  void partition(const std::vector<std::vector<int>>& groups) override { netns_->partition(groups); }
  void heal() override { netns_->heal(); }
  void set_fault(int i, const std::string& mode) override { children_.at(std::size_t(i)).fault = mode; }
  void set_link(int i, std::optional<double> rate_mbit, std::optional<double> loss) override {
    netns_->set_link(i, rate_mbit, loss);
  }
  double mean_progress() const;
  // "N peers", or "N clients + server" (a FedAvg server trains nothing: it is not a peer).
  std::string who() const {
    const bool fedavg = o_.mode == LaunchMode::Fedavg;
    const int n = fedavg ? o_.peers - 1 : o_.peers;
    return std::to_string(n) + (fedavg ? " client" : " peer") + (n == 1 ? "" : "s") +
           (fedavg ? " + server" : "");
  }
  void observe(std::size_t i, const std::string& line, double now);
  // Run time now: this launch's time plus what the run's earlier launches ran (--resume). Every
  // time the launcher writes (events, consensus, summary) is on it.
  double now() const { return run_clock_->base_s() + since(t0_); }
  // The run's clock with this launch starting at wall time unix_now: a resumed run's from its
  // events.jsonl and summary.json, a fresh run's at 0.
  RunClock make_run_clock(bool resume, double unix_now) const;
  bool keep_going(bool any_running) const;
  void end_fedavg_churn();
  bool fedavg_done_ = false;  // the FedAvg server finished its rounds (--churn runs end there)
  bool fedavg_clients_stopped_ = false;
  double fedavg_done_at_ = 0.0;

  LaunchOptions o_;
  std::string peer_bin_;
  fs::path run_dir_;
  std::string network_key_;
  std::vector<PeerPlan> plans_;
  std::vector<Child> children_;
  std::size_t seeds_ = 0;  // peers started first
  bool all_started_ = false;
  std::vector<MetricsTail> tails_;
  std::vector<PeerStats> stats_;
  std::vector<LifeOffsets> lives_;  // per peer: each process's start on the run's clock
  Clock::time_point t0_;
  std::optional<RunClock> run_clock_;
  std::string started_at_;
  bool tty_ = false;
  int drawn_lines_ = 0;
  double last_draw_ = -1e9;
  double last_table_file_ = -1e9;
  // Stop handling.
  int signals_seen_ = 0;
  std::size_t churn_noted_ = 0;  // events.jsonl lines looked at by note_churn
  std::string last_churn_;
  bool stop_requested_ = false;
  bool interrupted_ = false;
  bool config_rejected_ = false;
  double stop_deadline_ = 0;
  bool killed_ = false;
  std::unique_ptr<EventLog> events_;             // events.jsonl
  std::unique_ptr<ConsensusSampler> consensus_;  // from start_peers
  std::unique_ptr<ChurnRunner> churn_;           // with --churn
  std::unique_ptr<NetnsSwarm> netns_;  // with --netns; removes its namespaces when destroyed
};

}  // namespace gossiptrain::apps::launcher
