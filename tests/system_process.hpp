// Helpers for the multi-process tests: start real gossip-peer processes, wait for them with a bound,
// kill them for real, and read their metrics files.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/dataset.hpp"
#include "tests/test_util.hpp"

extern char** environ;

namespace gt_test {

// One of our programs (gossip-peer, gossip-launch, gossip-bench) in the build tree.
inline std::string app_bin(const std::string& name) { return std::string(GT_BIN_DIR) + "/" + name; }
inline std::string peer_bin() { return app_bin("gossip-peer"); }
// Whether Debian's dataset-fashion-mnist is installed (tests that train on it skip without it).
inline bool fashion_mnist_present() {
  std::error_code ec;
  return std::filesystem::exists(
      std::string(gossiptrain::core::kDefaultFashionMnistDir) + "/train-labels-idx1-ubyte.gz", ec);
}

// A child process with stdout+stderr in a log file; killed (SIGKILL) if still running on scope exit.
class Process {
 public:
  // cwd: the child's working directory ("" = ours).
  Process(const std::vector<std::string>& argv, const std::string& log, const std::string& cwd = "") {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed");
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_for(std::chrono::seconds(10));
    }
  }
  pid_t pid() const { return pid_; }
  bool running() const { return !exited_; }
  void signal(int sig) { ::kill(pid_, sig); }
  // Waits up to timeout; returns true when the process has exited (status() then valid).
  bool wait_for(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!exited_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = st;
        break;
      }
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Exit code, or 128 + signal for a killed process.
  int exit_code() const {
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// Every whole JSON line of a metrics file (a partial last line is skipped).
inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
    }
  }
  return out;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs one of our programs to its end (the test fails if it runs past limit); returns its exit
// code, and its output (stdout and stderr, also left in the file log) in *out.
inline int run_app(const std::string& name, const std::vector<std::string>& args,
                   const std::string& log, std::string* out, std::chrono::seconds limit) {
  std::vector<std::string> argv{app_bin(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, log);
  REQUIRE(p.wait_for(limit));
  *out = read_file(log);
  return p.exit_code();
}

// Polls pred every 50 ms until it holds or timeout passes.
template <typename Pred>
bool eventually(std::chrono::milliseconds timeout, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}


// True when something accepts TCP connections on 127.0.0.1:port.
inline bool port_open(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(std::uint16_t(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// n consecutive ports on 127.0.0.1 that bind now, below Linux's ephemeral range (32768 and up,
// where other tests' connections take theirs): the first of them. A base derived from one free
// port, unchecked, collided now and then (a peer's metrics port taken: Prometheus saw nothing).
inline int free_port_block(int n) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(10000, 32000 - n);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = pick(rng);
    bool all = true;
    for (int i = 0; i < n && all; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(std::uint16_t(base + i));
      all = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (fd >= 0) ::close(fd);
    }
    if (all) return base;
  }
  throw std::runtime_error("free_port_block: no block of free ports");
}

// A free TCP port on 127.0.0.1, below the ephemeral range as free_port_block's: a port bound to 0
// and released is one the kernel hands out again to the next listener on port 0 or outbound
// connection of any test process running beside us.
inline int free_port() { return free_port_block(1); }

// Mean over peers of ||x_i - avg||, from the parameters in their final checkpoints (one folder
// per peer): the consensus distance, computed independently of the launcher.
inline double consensus_distance(const std::vector<std::string>& ckpt_dirs) {
  std::vector<std::vector<float>> p;
  for (const auto& dir : ckpt_dirs) p.push_back(gossiptrain::core::load_checkpoint(dir).params);
  const double n = double(p.size());
  std::vector<double> avg(p.at(0).size(), 0.0);
  for (const auto& v : p)
    for (std::size_t k = 0; k < v.size(); ++k) avg[k] += v[k] / n;
  double sum = 0;
  for (const auto& v : p) {
    double d = 0;
    for (std::size_t k = 0; k < v.size(); ++k) d += (v[k] - avg[k]) * (v[k] - avg[k]);
    sum += std::sqrt(d);
  }
  return sum / n;
}

}  // namespace gt_test
