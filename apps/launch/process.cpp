// gossip-launch's process control: spawning the peers (fork + exec, the launcher's death kills
// them), starting the first cohort and the rest, restarts for churn, reaping, and a clean stop on
// Ctrl-C (SIGTERM, then SIGKILL after the grace).
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

namespace gossiptrain::apps::launcher {

namespace {
extern "C" void on_signal(int) { g_signals.fetch_add(1); }
}  // namespace

// fork + exec with stdout/stderr into log, stdin from /dev/null, and SIGTERM to the child if the
// launcher itself dies, so no peer outlives a killed launcher.
pid_t spawn(const std::string& bin, const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s;
  argv_s.push_back(bin);
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || in < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(bin.c_str(), argv.data());
    std::fprintf(stderr, "gossip-launch: cannot exec %s: %s\n", bin.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void Launch::start_peers() {
  children_.resize(plans_.size());
  stats_.resize(plans_.size());
  lives_.resize(plans_.size());
  std::vector<std::string> dirs;
  for (const auto& p : plans_) {
    tails_.emplace_back(p.dir + "/metrics.jsonl");
    dirs.push_back(p.dir);
  }
  consensus_ = std::make_unique<ConsensusSampler>(o_, std::move(dirs), run_dir_, *events_);
  for (std::size_t i = 0; i < children_.size(); ++i)
    children_[i].outcome.state = int(i) < o_.peers ? "waiting for the seeds" : "not joined yet";
  // OpenBLAS threads spin while they wait: N peers with a thread per core each on one machine
  // oversubscribe it many times over (a 4-peer run was 10x slower). Share the cores out instead,
  // unless the user chose.
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    ::setenv("OPENBLAS_NUM_THREADS",
             std::to_string(blas_threads_per_peer(int(plans_.size()))).c_str(), 1);
  if (const std::string g = gpu_plan_note(o_); !g.empty()) note("gossip-launch: " + g);
  // In gossip mode the seeds (the first seed_count peers) start first and the others once the seeds
  // listen: a peer whose seeds refuse it trains alone until its next re-dial, seconds later.
  const std::size_t initial = std::size_t(o_.peers);  // the other slots are for joins (--churn)
  seeds_ = o_.mode == LaunchMode::Gossip   ? std::size_t(std::min(seed_count(o_.peers), o_.peers))
           : o_.mode == LaunchMode::Fedavg ? 1  // the server, before its clients dial it
                                           : initial;
  for (std::size_t i = 0; i < seeds_; ++i) spawn_peer(i);
  if (seeds_ == initial) start_rest();
}

void Launch::spawn_peer(std::size_t i) {
  Child& c = children_[i];
  c.started = Clock::now();
  c.outcome.start_offset_s = since(t0_);
  std::vector<std::string> args = plans_[i].argv;
  args.insert(args.end(), c.extra_args.begin(), c.extra_args.end());
  if (netns_) {
    std::vector<std::string> argv = netns_->exec_prefix(int(i));
    const std::string ip = argv[0];
    argv.erase(argv.begin());
    argv.push_back(peer_bin_);
    argv.insert(argv.end(), args.begin(), args.end());
    c.pid = spawn(ip, argv, plans_[i].dir + "/log.txt");
  } else {
    c.pid = spawn(peer_bin_, args, plans_[i].dir + "/log.txt");
  }
  c.running = true;
  c.ever_started = true;
  c.outcome.state = "running";
  if (churn_) churn_->started(int(i));
  events_->write(since(t0_), "start", {{"peer", i}, {"pid", c.pid}});
}

// A restart or a join (--churn). A restarted peer appends to its metrics with a clock that starts
// again at 0: its lines tell the new process apart (PeerStats::life).
void Launch::start_peer(int i) {
  Child& c = children_.at(std::size_t(i));
  c.outcome.exit_code = -1;
  c.outcome.signal = 0;
  // A restarted or joining peer finds the swarm running: it must not wait for the first peers'
  // --min-peers cohort (most may be done), and without a checkpoint it catches up.
  c.extra_args = {"--min-peers", "1"};  // the last value given wins
  if (o_.mode == LaunchMode::Fedavg) c.extra_args = fedavg_restart_args(i);
  if (!c.fault.empty()) c.extra_args.insert(c.extra_args.end(), {"--fault", c.fault});
  spawn_peer(std::size_t(i));
}

bool Launch::seeds_ready() const {
  for (std::size_t i = 0; i < seeds_; ++i) {
    if (!children_[i].running) return true;  // a dead seed will not start listening: go on
    const std::string& l = plans_[i].listen;
    if (!port_listening(children_[i].pid, std::stoi(l.substr(l.rfind(':') + 1)))) return false;
  }
  return true;
}

void Launch::start_rest() {
  for (std::size_t i = seeds_; i < std::size_t(o_.peers); ++i) spawn_peer(i);
  all_started_ = true;
  write_config();
}

void Launch::reap() {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (!c.running) continue;
    int status = 0;
    pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r != c.pid) continue;
    c.running = false;
    PeerOutcome& out = c.outcome;
    const std::string log = plans_[i].dir + "/log.txt";
    const bool by_churn = churn_ && churn_->exited(int(i));
    events_->write(since(t0_), "exit",
                   {{"peer", i},
                    {"exit_code", WIFEXITED(status) ? nlohmann::json(WEXITSTATUS(status)) : nullptr},
                    {"signal", WIFSIGNALED(status) ? nlohmann::json(signal_name(WTERMSIG(status)))
                                                   : nullptr},
                    {"by_churn", by_churn}});
    if (by_churn) {
      out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      out.state = std::string(slot_state_name(churn_->state(int(i)))) + " (churn)";
      continue;
    }
    if (WIFEXITED(status)) {
      out.exit_code = WEXITSTATUS(status);
      if (out.exit_code == 0) {
        out.state = "done";
      } else if (out.exit_code == 130 && (stop_requested_ || fedavg_done_)) {
        out.state = "stopped";
      } else {
        out.state = "exited with code " + std::to_string(out.exit_code);
        out.failed = true;
      }
    } else if (WIFSIGNALED(status)) {
      out.signal = WTERMSIG(status);
      out.state = "killed by " + signal_name(out.signal);
      if (killed_) out.state += " after --stop-timeout";
      out.failed = true;
    }
    c.failed_before_stop = out.failed && !stop_requested_;
    if (out.failed) {
      note("gossip-launch: peer " + std::to_string(i) + " " + out.state + " (log: " + log + ")");
      for (const auto& l : last_lines(log, kLogTailLines)) note("  | " + l);
    }
    // Exit code 2 is the peer refusing its configuration (bad data, too many shards, ...): every
    // peer got the same flags, so the run cannot go on.
    if (out.exit_code == 2 && !stop_requested_) {
      config_rejected_ = true;
      note("gossip-launch: peer " + std::to_string(i) +
           " rejected its configuration; stopping the other peers");
      handle_stop();
    }
  }
}

void Launch::handle_stop() {
  if (!stop_requested_) {
    stop_requested_ = true;
    stop_deadline_ = since(t0_) + o_.stop_timeout_s;
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, SIGTERM);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "gossip-launch: stopping the peers (SIGTERM; SIGKILL in %.0f s or on a second "
                  "Ctrl-C)",
                  o_.stop_timeout_s);
    note(buf);
    return;
  }
  if (!killed_) {
    killed_ = true;
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, SIGKILL);
    note("gossip-launch: SIGKILL sent to the peers still running");
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace gossiptrain::apps::launcher
