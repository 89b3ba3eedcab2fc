// Multi-process tests over loopback: real gossip-peer processes on the encrypted channel train
// together, end closer to each other than without gossip, and survive a peer killed for real.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/checkpoint.hpp"
#include "tests/system_process.hpp"

using namespace std::chrono_literals;
using gt_test::Process;

namespace {

// The nice value of one thread of a process (Linux /proc), or -100 when it cannot be read.
int thread_nice(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -100;
  const auto close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -100;
  std::istringstream fields(line.substr(close + 1));
  std::string f;
  for (int k = 3; k <= 19; ++k) fields >> f;  // field 19 of stat is the nice value
  return fields ? std::atoi(f.c_str()) : -100;
}

struct Swarm {
  gt_test::TempDir dir;
  int n;
  std::vector<int> ports;
  std::vector<std::unique_ptr<Process>> procs;
  std::vector<std::string> extra;  // flags for every peer
  int shards = 0;  // --num-shards; 0: n (a swarm of fewer peers than ports: a run resized)
  bool pin = false;  // peer i on CPU i (modulo the CPUs): the cores of separate machines

  Swarm(const std::string& name, int n_peers, std::vector<std::string> flags)
      : dir(name), n(n_peers), extra(std::move(flags)) {
    // One BLAS thread per peer: spinning OpenBLAS threads of several peers on 2 cores slow the
    // whole swarm down many times over (gossip-launch does the same).
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (int i = 0; i < n; ++i) ports.push_back(gt_test::free_port());
    std::ofstream(dir / "net.key")
        << "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";
  }
  std::string peer_dir(int i) const { return dir / ("peer" + std::to_string(i)); }
  std::string metrics(int i) const { return peer_dir(i) + "/metrics.jsonl"; }
  std::string log(int i) const { return peer_dir(i) + "/log.txt"; }
  std::string addr(int i) const { return "127.0.0.1:" + std::to_string(ports[i]); }

  std::vector<std::string> argv(int i, bool gossip) const {
    std::vector<std::string> a;
    if (pin) {
      const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
      a = {"/usr/bin/taskset", "-c", std::to_string(unsigned(i) % cpus)};  // util-linux
    }
    a.insert(a.end(), {gt_test::peer_bin(), "--num-shards",     std::to_string(shards > 0 ? shards : n),
                                  "--shard",           std::to_string(i),  "--metrics",
                                  metrics(i),          "--checkpoint-dir", peer_dir(i) + "/ckpt"});
    if (gossip) {
      a.insert(a.end(), {"--listen", addr(i), "--identity", peer_dir(i) + "/identity.key",
                         "--network-key", dir / "net.key"});
      if (i > 0) a.insert(a.end(), {"--seeds", addr(0)});
    }
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  void start(int i, bool gossip) {
    std::filesystem::create_directories(peer_dir(i));
    procs.at(i) = std::make_unique<Process>(argv(i, gossip), log(i));
  }
  // With gossip, the seed (peer 0) first, the others once it listens: a peer whose seed is not up
  // yet retries only after its backoff, and a short run may be over by then.
  void start_all(bool gossip) {
    procs.resize(n);
    start(0, gossip);
    if (gossip && !gt_test::eventually(30s, [&] { return gt_test::port_open(ports[0]); }))
      throw std::runtime_error("peer 0 did not start listening:\n" + gt_test::read_file(log(0)));
    for (int i = 1; i < n; ++i) start(i, gossip);
  }
  // Mean distance of the peers' final parameter vectors to their average.
  double consensus_distance() const {
    std::vector<std::string> dirs;
    for (int i = 0; i < n; ++i) dirs.push_back(peer_dir(i) + "/ckpt");
    return gt_test::consensus_distance(dirs);
  }
  std::string peer_id(int i) const {
    for (const auto& j : gt_test::read_metrics(metrics(i)))
      if (j.contains("peer") && j["peer"] != "local") return j["peer"];
    return "";
  }
  // Distinct partners of successful exchanges of peer i.
  std::set<std::string> partners(int i) const {
    std::set<std::string> s;
    for (const auto& j : gt_test::read_metrics(metrics(i)))
      if (j["event"] == "exchange" && j["ok"] == true) s.insert(j["partner"].get<std::string>());
    return s;
  }
  int ok_exchanges(int i) const {
    int c = 0;
    for (const auto& j : gt_test::read_metrics(metrics(i)))
      if (j["event"] == "exchange" && j["ok"] == true) ++c;
    return c;
  }
  // How peer i's exchanges after metrics line `from` ended: count by role, partner and reason.
  std::string exchange_summary(int i, long from) const {
    std::map<std::string, int> n;
    const auto lines = gt_test::read_metrics(metrics(i));
    for (std::size_t k = std::size_t(from + 1); k < lines.size(); ++k) {
      const auto& j = lines[k];
      if (j["event"] != "exchange") continue;
      ++n[j["role"].get<std::string>() + " " + j["partner"].get<std::string>().substr(0, 8) + " " +
          (j["ok"] == true ? "ok" : j["reason"].get<std::string>())];
    }
    std::string out;
    for (const auto& [k, v] : n) out += k + ": " + std::to_string(v) + "; ";
    return out.empty() ? "none" : out;
  }
  // Index of the first `member` line of peer i saying `who` is in `state`, after line `from`.
  long member_event(int i, const std::string& who, const std::string& state, long from = -1) const {
    const auto lines = gt_test::read_metrics(metrics(i));
    for (long k = from + 1; k < long(lines.size()); ++k) {
      const auto& j = lines[std::size_t(k)];
      if (j["event"] == "member" && j["member"] == who && j["state"] == state) return k;
    }
    return -1;
  }
};

const std::vector<std::string> kTrainFlags = {
    "--data", "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10", "--batch", "32",
    "--seed", "3", "--gossip-every", "2", "--log-level", "info",
    // Several peers on one machine: as gossip-launch does, training yields to the network threads.
    "--net-nice", "0", "--train-nice", "5"};

}  // namespace

TEST_CASE("4 peers on the encrypted channel train together and end closer than alone",
          "[system][gossip][slow]") {
  auto flags = kTrainFlags;
  flags.insert(flags.end(), {"--epochs", "300", "--linger", "3"});

  Swarm gossip("gt-swarm-gossip", 4, flags);
  gossip.start_all(true);
  {
    // --train-nice 5: the training thread (the main one) runs 5 nice levels below the process's
    // other threads, the network thread among them.
    const pid_t pid = gossip.procs[0]->pid();
    const int base = ::getpriority(PRIO_PROCESS, 0);  // what the peer inherits from this test
    const int want = std::min(19, base + 5);
    INFO("peer 0 log:\n" << gt_test::read_file(gossip.log(0)));
    CHECK(gt_test::eventually(30s, [&] { return thread_nice(pid, pid) == want; }));
    int at_base = 0;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      const pid_t tid = static_cast<pid_t>(std::stol(e.path().filename().string()));
      if (tid != pid && thread_nice(pid, tid) == base) ++at_base;
    }
    CHECK(at_base >= 1);
  }
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(gossip.log(i)));
    REQUIRE(gossip.procs[i]->wait_for(180s));
    CHECK(gossip.procs[i]->exit_code() == 0);
  }
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i);
    CHECK(gossip.partners(i).size() >= 2);
  }

  Swarm alone("gt-swarm-alone", 4, flags);
  alone.start_all(false);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(alone.procs[i]->wait_for(180s));
    CHECK(alone.procs[i]->exit_code() == 0);
  }
  const double d_gossip = gossip.consensus_distance(), d_alone = alone.consensus_distance();
  WARN("consensus distance of the final parameters: gossip " << d_gossip << ", alone " << d_alone);
  CHECK(d_gossip < 0.5 * d_alone);
}

TEST_CASE("a peer run with --net-nice 7 has its network thread 7 nice levels below training",
          "[system][gossip]") {
  gt_test::TempDir dir("gt-peer-nice");
  const int port = gt_test::free_port();
  Process p({gt_test::peer_bin(), "--data", "synthetic", "--backend", "cpu", "--model",
             "mlp:784-32-10", "--epochs", "1000", "--listen", "127.0.0.1:" + std::to_string(port),
             "--identity", dir / "id.key", "--metrics", dir / "metrics.jsonl", "--net-nice", "7"},
            dir / "log.txt");
  INFO("peer log:\n" << gt_test::read_file(dir / "log.txt"));
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(port); }));
  const pid_t pid = p.pid();
  const int base = ::getpriority(PRIO_PROCESS, 0);  // what the peer inherits from this test
  if (base > 12) {
    WARN("skipped: this test runs at nice " << base << ", too high to nice a thread 7 below it");
    return;
  }
  CHECK(thread_nice(pid, pid) == base);  // training keeps the priority it was given
  // The port opens before the network thread has lowered its own priority: poll a moment.
  auto niced = [&] {
    int n = 0;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      const pid_t tid = static_cast<pid_t>(std::stol(e.path().filename().string()));
      if (tid != pid && thread_nice(pid, tid) == base + 7) ++n;
    }
    return n;
  };
  gt_test::eventually(10s, [&] { return niced() >= 1; });
  CHECK(niced() == 1);  // the network thread
  p.signal(SIGTERM);
  REQUIRE(p.wait_for(60s));
  CHECK(p.exit_code() == 130);
}

TEST_CASE("a --backend cpu peer maps no CUDA library, whatever the build", "[system][gossip]") {
  gt_test::TempDir dir("gt-peer-nocuda");
  const int port = gt_test::free_port();
  Process p({gt_test::peer_bin(), "--data", "synthetic", "--backend", "cpu", "--model",
             "mlp:784-32-10", "--epochs", "1000", "--listen", "127.0.0.1:" + std::to_string(port),
             "--identity", dir / "id.key", "--metrics", dir / "metrics.jsonl"},
            dir / "log.txt");
  INFO("peer log:\n" << gt_test::read_file(dir / "log.txt"));
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(port); }));
  // Training has started once the port is open: every library the peer will map is mapped.
  const std::string maps = gt_test::read_file("/proc/" + std::to_string(p.pid()) + "/maps");
  REQUIRE(maps.find("gossip-peer") != std::string::npos);  // the file was read
  CHECK(maps.find("libcublas") == std::string::npos);
  CHECK(maps.find("libcudart") == std::string::npos);
  CHECK(maps.find("libgt_kernels_cuda") == std::string::npos);
  p.signal(SIGTERM);
  REQUIRE(p.wait_for(60s));
}

TEST_CASE("a peer asked for the CUDA backend whose module cannot be loaded exits 2 with the reason",
          "[system][gossip]") {
  gt_test::TempDir dir("gt-peer-badmodule");
  ::setenv("GOSSIPTRAIN_CUDA_MODULE", (dir / "missing.so").c_str(), 1);
  Process p({gt_test::peer_bin(), "--data", "synthetic", "--backend", "cuda", "--model",
             "mlp:784-32-10", "--epochs", "1", "--listen",
             "127.0.0.1:" + std::to_string(gt_test::free_port()), "--identity", dir / "id.key"},
            dir / "log.txt");
  ::unsetenv("GOSSIPTRAIN_CUDA_MODULE");
  REQUIRE(p.wait_for(60s));
  const std::string log = gt_test::read_file(dir / "log.txt");
  INFO("peer log:\n" << log);
  CHECK(p.exit_code() == 2);
#if defined(GT_HAVE_CUDA)
  CHECK(log.find("missing.so: not found") != std::string::npos);
#else
  CHECK(log.find("no CUDA support") != std::string::npos);
#endif
}

TEST_CASE(
    "a peer killed with SIGKILL is declared dead, the rest go on, and it rejoins from its "
    "checkpoint",
    "[system][fault]") {
  auto flags = kTrainFlags;
  // Long enough that the test, not the epochs, decides when the peers stop.
  flags.insert(flags.end(), {"--epochs", "100000"});
  Swarm s("gt-swarm-fault", 3, flags);
  s.start_all(true);
  for (int i = 0; i < 3; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    REQUIRE(gt_test::eventually(60s, [&] { return s.ok_exchanges(i) >= 1; }));
  }
  const std::string victim = s.peer_id(2);
  REQUIRE(!victim.empty());
  REQUIRE(gt_test::eventually(
      30s, [&] { return std::filesystem::exists(s.peer_dir(2) + "/ckpt/checkpoint.bin"); }));
  s.procs[2]->signal(SIGKILL);
  REQUIRE(s.procs[2]->wait_for(10s));
  CHECK(s.procs[2]->exit_code() == 128 + SIGKILL);

  // Both survivors declare it dead within the suspicion bound (4 s at n = 3, plus probing).
  long dead_at[2];
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    REQUIRE(gt_test::eventually(30s, [&] { return s.member_event(i, victim, "dead") >= 0; }));
    dead_at[i] = s.member_event(i, victim, "dead");
    CHECK(s.procs[i]->running());
  }
  // ... and keep averaging with each other.
  {
    const int before = s.ok_exchanges(0);
    const bool averaging = gt_test::eventually(30s, [&] { return s.ok_exchanges(0) > before + 2; });
    // Both logs, and how peer 0's exchanges ended, should this fail again (once in CI).
    INFO("peer 0 log:\n"
         << gt_test::read_file(s.log(0)) << "\npeer 1 log:\n"
         << gt_test::read_file(s.log(1))
         << "\npeer 0 exchanges since the death: " << s.exchange_summary(0, dead_at[0]));
    CHECK(averaging);
  }

  // Restarted with the same identity and checkpoint folder: it resumes and rejoins.
  const std::size_t lines_before_restart = gt_test::read_metrics(s.metrics(2)).size();
  s.start(2, true);
  {
    INFO("restarted peer log:\n" << gt_test::read_file(s.log(2)));
    CHECK(gt_test::eventually(30s, [&] {
      return gt_test::read_file(s.log(2)).find("resumed from checkpoint") != std::string::npos;
    }));
  }
  {
    // A peer with a checkpoint resumes from it: no catch-up from a neighbour.
    const auto lines = gt_test::read_metrics(s.metrics(2));
    for (std::size_t k = lines_before_restart; k < lines.size(); ++k)
      CHECK(lines[k]["event"] != "catch_up");
  }
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i << " sees the restarted peer alive again");
    CHECK(gt_test::eventually(30s,
                              [&] { return s.member_event(i, victim, "alive", dead_at[i]) >= 0; }));
  }

  for (int i = 0; i < 3; ++i) s.procs[i]->signal(SIGTERM);
  for (int i = 0; i < 3; ++i) {
    INFO("peer " << i << " stops cleanly on SIGTERM");
    REQUIRE(s.procs[i]->wait_for(20s));
    CHECK(s.procs[i]->exit_code() == 130);
  }
}

namespace {
// The events of one kind in a peer's metrics, in order.
std::vector<nlohmann::json> events(const std::string& metrics, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (auto& j : gt_test::read_metrics(metrics))
    if (j["event"] == kind) out.push_back(j);
  return out;
}
}  // namespace

TEST_CASE("a peer joining a running one catches up: its step, its state, its accuracy",
          "[system][catchup]") {
  auto flags = kTrainFlags;
  // lr 0.01: the synthetic set is learnt in a few epochs of a few ms each (0.05 diverges on it).
  flags.insert(flags.end(), {"--epochs", "100000", "--lr", "0.01", "--catch-up", "auto"});
  Swarm s("gt-swarm-catchup", 2, flags);
  s.procs.resize(2);
  s.start(0, true);
  INFO("peer A log:\n" << gt_test::read_file(s.log(0)));
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
  // A trains alone for a few epochs, well past chance (10 classes).
  REQUIRE(gt_test::eventually(120s, [&] { return events(s.metrics(0), "eval").size() >= 4; }));
  const double a_acc = events(s.metrics(0), "eval").back()["test_acc"];
  REQUIRE(a_acc > 0.5);

  s.start(1, true);
  INFO("peer B log:\n" << gt_test::read_file(s.log(1)));
  REQUIRE(gt_test::eventually(60s, [&] { return !events(s.metrics(1), "eval").empty(); }));
  const auto cu = events(s.metrics(1), "catch_up");
  REQUIRE(cu.size() == 1);
  CHECK(cu[0]["ok"] == true);
  CHECK(cu[0]["from"] == s.peer_id(0));
  const std::int64_t step = cu[0]["step"];
  CHECK(step > 0);
  CHECK(cu[0]["bytes"].get<std::int64_t>() > 4 * 25450 * 2);  // parameters and momentum
  // B went on from A's position: its first evaluation is at the end of A's epoch then, and
  // about as good as A's by then (a fresh peer's first epoch starts near chance, 0.1).
  const auto b_eval = events(s.metrics(1), "eval").front();
  CHECK(b_eval["epoch"].get<std::int64_t>() == cu[0]["epoch"].get<std::int64_t>() + 1);
  CHECK(b_eval["step"].get<std::int64_t>() >= step);
  const double b_acc = b_eval["test_acc"];
  double a_then = 0;
  for (const auto& e : events(s.metrics(0), "eval"))
    if (e["epoch"] == b_eval["epoch"]) a_then = e["test_acc"];
  WARN("catch-up: " << cu[0]["bytes"] << " bytes in " << cu[0]["ms"] << " ms at A's step " << step
                    << "; B's first eval (epoch " << b_eval["epoch"] << ") test_acc " << b_acc
                    << ", A's at that epoch " << a_then << ", A's when B started " << a_acc);
  CHECK(b_acc > 0.5);
  CHECK(b_acc > a_acc - 0.1);
  CHECK(events(s.metrics(0), "catch_up_served").size() == 1);

  for (int i = 0; i < 2; ++i) s.procs[i]->signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(s.procs[i]->wait_for(30s));
    CHECK(s.procs[i]->exit_code() == 130);
  }
}

namespace {
// The step of the first `step` metric line (one every 50 steps) after metrics line `from`; -1 none.
std::int64_t first_step_line(const std::string& metrics, std::size_t from = 0) {
  const auto lines = gt_test::read_metrics(metrics);
  for (std::size_t k = from; k < lines.size(); ++k)
    if (lines[k]["event"] == "step") return lines[k]["step"].get<std::int64_t>();
  return -1;
}
// The step a peer resumed its checkpoint at, from its log ("resumed from ...: epoch E, step S");
// -1 none.
std::int64_t resumed_step(const std::string& log) {
  static const std::regex re("resumed from .*: epoch [0-9]+, step ([0-9]+)");
  std::smatch m;
  const std::string text = gt_test::read_file(log);
  return std::regex_search(text, m, re) ? std::stoll(m[1]) : -1;
}
}  // namespace

// Issue 44: a run (--run-id, a cohort waiting with --min-peers as --cluster sets it) of 3 peers,
// stopped with checkpoints and started again with 5: peers 0-2 resume from their checkpoints,
// peers 3 and 4 (new ordinals, no checkpoint) catch up from one of them instead of starting from
// the run's initial weights at step 0. The first start of the cohort catches up from nobody.
TEST_CASE("a run resumed with more peers: the new ones catch up, a first start does not",
          "[system][catchup]") {
  auto base = kTrainFlags;
  base.insert(base.end(), {"--epochs", "100000", "--lr", "0.01", "--run-id", "grow-1",
                           "--catch-up", "auto", "--progress-every", "0"});
  auto with = [&](int min_peers) {
    auto f = base;
    f.insert(f.end(), {"--min-peers", std::to_string(min_peers)});
    return f;
  };
  Swarm s("gt-swarm-grow", 5, with(3));
  s.shards = 3;
  s.procs.resize(5);
  auto start_cohort = [&](int peers) {
    s.start(0, true);
    REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
    for (int i = 1; i < peers; ++i) s.start(i, true);
  };
  auto stop = [&](int peers) {
    for (int i = 0; i < peers; ++i) s.procs[i]->signal(SIGTERM);
    for (int i = 0; i < peers; ++i) {
      REQUIRE(s.procs[i]->wait_for(30s));
      CHECK(s.procs[i]->exit_code() == 130);
    }
  };

  // The first start: 3 fresh peers, nobody ahead.
  start_cohort(3);
  for (int i = 0; i < 3; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    REQUIRE(gt_test::eventually(90s, [&] { return events(s.metrics(i), "eval").size() >= 3; }));
  }
  stop(3);
  std::vector<std::size_t> lines_before(3);
  for (int i = 0; i < 3; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    CHECK(events(s.metrics(i), "catch_up").empty());
    CHECK(events(s.metrics(i), "catch_up_served").empty());
    CHECK(first_step_line(s.metrics(i)) == 50);  // from step 0
    CHECK(events(s.metrics(i), "eval").front()["epoch"] == 1);
    if (i > 0)  // peer 0 has no seeds: it asks nobody
      CHECK_THAT(gt_test::read_file(s.log(i)),
                 Catch::Contains("start from their own initial weights too"));
    lines_before[std::size_t(i)] = gt_test::read_metrics(s.metrics(i)).size();
  }

  // The same run with 5 peers.
  s.shards = 5;
  s.extra = with(5);
  start_cohort(5);
  for (int i = 0; i < 5; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    REQUIRE(gt_test::eventually(90s, [&] { return first_step_line(s.metrics(i),
                                                                  i < 3 ? lines_before[std::size_t(i)] : 0) >= 0; }));
  }
  std::set<std::string> old_ids;
  std::int64_t min_resumed = -1;
  std::string figures;
  for (int i = 0; i < 3; ++i) {
    old_ids.insert(s.peer_id(i));
    const std::int64_t r = resumed_step(s.log(i));
    CHECK(r > 0);
    min_resumed = min_resumed < 0 ? r : std::min(min_resumed, r);
    figures += "peer" + std::to_string(i) + " resumed at step " + std::to_string(r) +
               ", first step line " +
               std::to_string(first_step_line(s.metrics(i), lines_before[std::size_t(i)])) + "; ";
  }
  // The figures first (before and after the change: the first step lines of peers 3 and 4).
  for (int i = 3; i < 5; ++i) {
    const auto cu = events(s.metrics(i), "catch_up");
    figures += "peer" + std::to_string(i) +
               (cu.empty() ? std::string(" did not catch up")
                           : " caught up at step " +
                                 std::to_string(cu[0].value("step", std::int64_t(-1)))) +
               ", first step line " + std::to_string(first_step_line(s.metrics(i))) + "; ";
  }
  WARN("resized 3 -> 5: " << figures);
  for (int i = 3; i < 5; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    const auto cu = events(s.metrics(i), "catch_up");
    REQUIRE(cu.size() == 1);
    CHECK(cu[0]["ok"] == true);
    // From a resumed peer, or from the other new one once it had caught up (it carries the run
    // on then too).
    const std::string from = cu[0]["from"];
    CHECK((old_ids.count(from) == 1 || (from == s.peer_id(7 - i) && from != s.peer_id(i))));
    const std::int64_t step = cu[0]["step"];
    CHECK(step >= min_resumed);
    CHECK(cu[0]["counters"] == true);
    CHECK_THAT(gt_test::read_file(s.log(i)), Catch::Contains("caught up with"));
    const std::int64_t first = first_step_line(s.metrics(i));
    CHECK(first > step);
    CHECK(first <= step + 50);
  }
  stop(5);
}

namespace {
// Durations of a peer's epochs (seconds between consecutive training evals) whose end falls in
// [from_s, to_s] of its own clock.
std::vector<double> epoch_seconds(const std::string& metrics, double from_s, double to_s) {
  std::vector<double> out;
  double prev = -1;
  for (const auto& e : events(metrics, "eval")) {
    if (e.contains("final")) continue;
    const double t = e["t"];
    if (prev >= 0 && t >= from_s && t <= to_s) out.push_back(t - prev);
    prev = t;
  }
  return out;
}
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

// Issue 27, scenario 1: A runs alone for a while on a long run; B joins it with a run of one
// epoch. B must end with A's model (taken at catch-up, or pulled to it by averaging with catch-up
// off), nobody refuses or bans anybody, and neither waits on exchanges that cannot succeed.
TEST_CASE("a joiner with a shorter run than the swarm's ends with its model, banning nobody",
          "[system][catchup][robust][slow]") {
  const std::string catch_up = GENERATE(as<std::string>{}, "auto", "off");
  INFO("--catch-up " << catch_up);
  const std::vector<std::string> common = {
      "--data",     "synthetic", "--backend",    "cpu", "--model",     "mlp:784-64-10",
      "--lr",       "0.01",      "--seed",       "3",   "--log-level", "info",
      "--net-nice", "0",         "--train-nice", "5"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> f = common;
    f.insert(f.end(), more.begin(), more.end());
    return f;
  };
  // A trains until it is stopped with SIGTERM (the check of its exit code 130 below): with 1000
  // epochs a quiet machine let it finish first (exit 0, the final rehearsal of 2026-11-29).
  Swarm s("gt-swarm-join-" + catch_up, 2, with({"--epochs", "5000"}));
  // Swarm runs one BLAS thread per peer; users do not, and neither does this test.
  ::unsetenv("OPENBLAS_NUM_THREADS");
  // A core each, as on the two machines of the scenario: on one machine's shared cores, B's
  // training alone (no gossip) slows A 2.3x (scripts/experiments/join_scenario.py without --pin),
  // which says nothing of the protocol. Each peer then runs one BLAS thread, as OpenBLAS sizes its
  // pool to the process's CPUs.
  s.pin = true;
  s.procs.resize(2);
  using Clock = std::chrono::steady_clock;
  const auto a_start = Clock::now();
  s.start(0, true);
  INFO("peer A log:\n" << gt_test::read_file(s.log(0)));
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
  auto a_t = [&] { return std::chrono::duration<double>(Clock::now() - a_start).count(); };
  // A alone for a while, well trained (the synthetic set is learnt in a few epochs).
  REQUIRE(gt_test::eventually(90s, [&] {
    const auto ev = events(s.metrics(0), "eval");
    return ev.size() >= 20 && ev.back()["t"].get<double>() >= 6.0;
  }));

  // B's one epoch alone, beside A (the same load on this machine), without gossip.
  s.extra = with({"--epochs", "1"});
  const double alone_from = a_t();
  s.start(1, false);
  REQUIRE(s.procs[1]->wait_for(60s));
  REQUIRE(s.procs[1]->exit_code() == 0);
  const auto alone = events(s.metrics(1), "done");
  REQUIRE(alone.size() == 1);
  const double b_alone_s = alone[0]["seconds"];
  const double alone_to = a_t();
  const double a_alone_epoch = median_of(epoch_seconds(s.metrics(0), 0, alone_from));
  // A's epochs while B trained beside it without gossip: the same load, the baseline for A.
  const auto a_beside = epoch_seconds(s.metrics(0), alone_from, alone_to);
  const double a_before = events(s.metrics(0), "eval").back()["test_acc"];
  std::filesystem::remove_all(s.peer_dir(1));

  s.extra = with({"--epochs", "1", "--catch-up", catch_up, "--linger", "3"});
  const double b_from = a_t();
  s.start(1, true);
  INFO("peer B log:\n" << gt_test::read_file(s.log(1)));
  REQUIRE(s.procs[1]->wait_for(90s));
  CHECK(s.procs[1]->exit_code() == 0);
  const double b_to = a_t();
  const auto done = events(s.metrics(1), "done");
  REQUIRE(done.size() == 1);
  const double b_s = done[0]["seconds"];
  const double b_acc = done[0]["final_test_acc"];
  // A's model once B is gone: the median of its evaluations over the next 2 s (one evaluation
  // of 1000 test samples moves by a point or two from epoch to epoch while the pair mixes).
  REQUIRE(gt_test::eventually(
      60s, [&] { return events(s.metrics(0), "eval").back()["t"].get<double>() >= b_to + 2.0; }));
  std::vector<double> a_after;
  for (const auto& e : events(s.metrics(0), "eval"))
    if (e["t"].get<double>() >= b_to) a_after.push_back(e["test_acc"]);
  const double a_acc = median_of(a_after);
  const auto a_with_b = epoch_seconds(s.metrics(0), b_from, b_to);
  const double a_with_b_epoch = median_of(a_with_b);
  // Where A's time went while B was there: its --max-lag waits (the `waits` lines, cumulative).
  auto a_waits_at = [&](double t) {
    double w = 0;
    for (const auto& e : events(s.metrics(0), "waits"))
      if (e["t"].get<double>() <= t) w = e["lag_wait_s"];
    return w;
  };
  const double a_waited = a_waits_at(b_to + 1.0) - a_waits_at(b_from);
  s.procs[0]->signal(SIGTERM);
  REQUIRE(s.procs[0]->wait_for(30s));
  CHECK(s.procs[0]->exit_code() == 130);
  const std::string a_log = gt_test::read_file(s.log(0)), b_log = gt_test::read_file(s.log(1));
  WARN("--catch-up " << catch_up << ": B's epoch " << b_s << " s (alone beside A " << b_alone_s
                     << " s), B ends at " << b_acc << ", A at " << a_acc << " (" << a_before
                     << " before B); A's median epoch " << a_alone_epoch << " s alone, "
                     << median_of(a_beside) << " s beside B alone (" << a_beside.size()
                     << " epochs), " << a_with_b_epoch << " s with B (" << a_with_b.size()
                     << " epochs); A waited " << a_waited << " s of " << b_to - b_from
                     << " s for exchanges (--max-lag)");

  // B ends with A's model, and A's model is no worse for it.
  CHECK(std::abs(b_acc - a_acc) <= 0.01);
  CHECK(a_acc >= a_before - 0.01);
  const auto cu = events(s.metrics(1), "catch_up");
  if (catch_up == "auto") {
    REQUIRE(cu.size() == 1);
    CHECK(cu[0]["ok"] == true);
    CHECK(cu[0]["counters"] == false);  // A's epoch is beyond B's run: B keeps its own schedule
    CHECK(done[0]["epochs"] == 1);      // ... and trains its own one epoch
  } else {
    CHECK(cu.empty());
  }
  // Nobody refused or banned anybody.
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i);
    CHECK(events(s.metrics(i), "ban").empty());
    for (const auto& e : events(s.metrics(i), "exchange"))
      CHECK(e["reason"].get<std::string>().find("anomalous") == std::string::npos);
    CHECK(events(s.metrics(i), "exchange_alert").empty());
  }
  CHECK(a_log.find("saw no exchange average") == std::string::npos);
  CHECK(b_log.find("saw no exchange average") == std::string::npos);
  // B's epoch as long as alone, give or take: 1.5 x, plus a second for two processes and their
  // exchanges sharing this machine's cores (the bug made it 235 s against 1.2 s).
  CHECK(b_s <= 1.5 * b_alone_s + 1.0);
  // A's --max-lag waits while B was there: at most the time budget's share of A's training
  // (--max-lag-share 0.25), its 0.5 s burst and one wait of at most 2 s beyond it. Before the
  // budget, A (0.3 ms steps) waited for an exchange every 16 steps, a third of its time.
  CHECK(a_waited <= 0.25 * (b_to - b_from) + 0.5 + 2.0);
  // A's epochs with B against its epochs while B trained beside it alone: the protocol's cost to
  // A (exchanges, the mixes on its training thread, its --max-lag waits, serving B's catch-up),
  // with the load of B's training the same in both. Reported, not checked: the synthetic set's
  // epochs are 40 ms, so B's joined run covers two or three of A's, its handshake and catch-up
  // included, and other tests share the cores (1.1 to 2.0 here at load 9). Issue 27's 1.5 x is
  // measured on Fashion-MNIST by scripts/experiments/join_scenario.py --pin
  // (docs/results/robust.md).
  // (B alone beside A may end within one of A's epochs: then there is no baseline to report.)
  if (a_beside.size() >= 3 && !a_with_b.empty())
    WARN("A's epochs with B / beside B alone: " << a_with_b_epoch / median_of(a_beside));
}

TEST_CASE("min-peers: a peer waits for the swarm, and starts anyway at the deadline",
          "[system][catchup]") {
  gt_test::TempDir dir("gt-peer-min-peers");
  const int port = gt_test::free_port();
  std::string out;
  const int rc = gt_test::run_app("gossip-peer",
                                  {"--data",
                                   "synthetic",
                                   "--backend",
                                   "cpu",
                                   "--model",
                                   "mlp:784-32-10",
                                   "--epochs",
                                   "1",
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--identity",
                                   dir / "id.key",
                                   "--metrics",
                                   dir / "metrics.jsonl",
                                   "--min-peers",
                                   "2",
                                   "--min-peers-timeout",
                                   "1",
                                   "--linger",
                                   "0"},
                                  dir / "log.txt", &out, 60s);
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("waiting for 2 live members"));
  CHECK_THAT(out, Catch::Contains("starting anyway"));
  const auto w = events(dir / "metrics.jsonl", "min_peers");
  REQUIRE(w.size() == 1);
  CHECK(w[0]["ok"] == false);
  CHECK(w[0]["have"] == 1);
  CHECK(w[0]["s"].get<double>() >= 1.0);
  // The first peer of a swarm has nobody to catch up from.
  CHECK(events(dir / "metrics.jsonl", "catch_up").empty());
  CHECK_FALSE(events(dir / "metrics.jsonl", "eval").empty());
}

// Issue 26, item 3: a joiner whose network key is not the seed's saw only "connection closed by
// remote during handshake" and retried for ever.
TEST_CASE("a joiner refused by every seed in the handshake says why and exits 2", "[system]") {
  Swarm s("gt-peer-wrong-key", 1, kTrainFlags);
  s.extra.insert(s.extra.end(), {"--epochs", "1000", "--linger", "0"});
  s.start_all(true);
  std::ofstream(s.dir / "other.key")
      << "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n";
  std::filesystem::create_directories(s.dir / "joiner");
  Process joiner({gt_test::peer_bin(),
                  "--data",
                  "synthetic",
                  "--backend",
                  "cpu",
                  "--model",
                  "mlp:784-32-10",
                  "--epochs",
                  "1000",
                  "--listen",
                  "127.0.0.1:" + std::to_string(gt_test::free_port()),
                  "--identity",
                  s.dir / "joiner/id.key",
                  "--network-key",
                  s.dir / "other.key",
                  "--seeds",
                  s.addr(0),
                  "--metrics",
                  s.dir / "joiner/metrics.jsonl",
                  "--checkpoint-dir",
                  s.dir / "joiner/ckpt"},
                 s.dir / "joiner/log.txt");
  const bool exited = joiner.wait_for(60s);
  const std::string log = gt_test::read_file(s.dir / "joiner/log.txt");
  INFO(log);
  REQUIRE(exited);
  CHECK(joiner.exit_code() == 2);
  CHECK_THAT(log, Catch::Contains("--network-key"));
  CHECK_THAT(log, Catch::Contains("giving up joining after 3 attempts"));
  CHECK(events(s.dir / "joiner/metrics.jsonl", "join_refused").size() == 1);
  // The seed said why, once per refused handshake (issue 26, item 8: every network line twice).
  const std::string seed_log = gt_test::read_file(s.log(0));
  int refusals = 0, net_lines = 0;
  std::istringstream lines(seed_log);
  for (std::string l; std::getline(lines, l);)
    if (l.find("network key mismatch") != std::string::npos) {
      ++refusals;
      net_lines += l.find("net: handshake with") != std::string::npos;
    }
  INFO(seed_log);
  CHECK(refusals >= 3);
  CHECK(net_lines == refusals);
  // The seed is unharmed: still running.
  CHECK(::kill(s.procs[0]->pid(), 0) == 0);
  s.procs[0]->signal(SIGTERM);
  CHECK(s.procs[0]->wait_for(30s));
}

// Issue 26, item 4: a peer waiting to catch up through seeds that do not answer said nothing.
TEST_CASE("a peer waiting for its seeds before training says training is on hold, and how long",
          "[system][catchup]") {
  gt_test::TempDir dir("gt-peer-hold");
  std::string out;
  const int rc = gt_test::run_app("gossip-peer",
                                  {"--data",
                                   "synthetic",
                                   "--backend",
                                   "cpu",
                                   "--model",
                                   "mlp:784-32-10",
                                   "--epochs",
                                   "1",
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(gt_test::free_port()),
                                   "--identity",
                                   dir / "id.key",
                                   "--seeds",
                                   "127.0.0.1:" + std::to_string(gt_test::free_port()),
                                   "--metrics",
                                   dir / "metrics.jsonl",
                                   "--catch-up-timeout",
                                   "2",
                                   "--linger",
                                   "0"},
                                  dir / "log.txt", &out, 60s);
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("training on hold"));
  CHECK_THAT(out, Catch::Contains("2 s left of --catch-up-timeout 2 s"));
  const auto h = events(dir / "metrics.jsonl", "hold");
  REQUIRE_FALSE(h.empty());
  CHECK(h[0]["left_s"].get<double>() <= 2.0);
}

// Issue 26, item 6: a lone CNN peer printed nothing for 7 minutes, one line per epoch.
TEST_CASE("a peer prints its progress within an epoch (--progress-every)", "[system]") {
  gt_test::TempDir dir("gt-peer-progress");
  std::string out;
  // Batch 2: one epoch is 3,000 steps, long enough for a few progress lines (--lr 0.01: batches
  // this small diverge at the default 0.05).
  const int rc =
      gt_test::run_app("gossip-peer",
                       {"--data", "synthetic", "--backend", "cpu", "--epochs", "1", "--batch", "2", "--lr",
                        "0.01", "--progress-every", "0.1", "--metrics", dir / "metrics.jsonl"},
                       dir / "log.txt", &out, 120s);
  INFO(out);
  REQUIRE(rc == 0);
  const auto at = out.find("step ");
  REQUIRE(at != std::string::npos);
  CHECK(at < out.find("epoch 1/1  loss"));  // before the epoch's own line
  CHECK_THAT(out, Catch::Contains("s left in the epoch"));
  CHECK(std::regex_search(out, std::regex("epoch 1/1  step [0-9]+/[0-9]+ \\([0-9]+%\\)")));
}

namespace {

// Peer 2 of the swarm at about 40% speed, for real: stopped 60 ms of every 100 (SIGSTOP and
// SIGCONT) until it exits. Returns each peer's training seconds (its `done` line), or -1.
std::vector<double> run_with_a_slow_peer(const std::string& name, const std::string& max_ahead) {
  auto flags = kTrainFlags;
  // --max-lag off: otherwise a fast peer also waits for its exchanges with the stopped one, which
  // paces it by itself. --catch-up-behind off: without --max-ahead the slowed peer falls 10% of
  // the run behind, the others clip it away, and it takes their state and skips ahead (its
  // training then took 1.04-1.1 times theirs instead of about twice): what is measured is pace.
  flags.insert(flags.end(), {"--epochs", "150", "--linger", "2", "--min-peers", "3", "--max-lag",
                             "off", "--max-ahead", max_ahead, "--catch-up-behind", "off"});
  Swarm s(name, 3, flags);
  s.start_all(true);
  std::atomic<bool> done{false};
  std::thread slow([&] {
    while (!done.load()) {
      s.procs[2]->signal(SIGSTOP);
      std::this_thread::sleep_for(60ms);
      s.procs[2]->signal(SIGCONT);
      std::this_thread::sleep_for(40ms);
    }
  });
  bool exited = true;
  for (int i = 0; i < 3; ++i) exited = s.procs[i]->wait_for(180s) && exited;
  done = true;
  slow.join();
  std::vector<double> secs;
  for (int i = 0; i < 3; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    CHECK(exited);
    CHECK(s.procs[i]->exit_code() == 0);
    const auto d = events(s.metrics(i), "done");
    secs.push_back(d.empty() ? -1.0 : d.back()["seconds"].get<double>());
  }
  return secs;
}

}  // namespace

TEST_CASE(
    "keeping pace: the others wait for a peer slowed for real, and run ahead without "
    "--max-ahead",
    "[system][gossip][slow]") {
  const auto paced = run_with_a_slow_peer("gt-pace-on", "0.02");
  const auto free = run_with_a_slow_peer("gt-pace-off", "off");
  WARN("training seconds of peers 0, 1 and the slowed peer 2: --max-ahead 0.02: "
       << paced[0] << ", " << paced[1] << ", " << paced[2] << "; off: " << free[0] << ", "
       << free[1] << ", " << free[2]);
  for (const auto& secs : {paced, free})
    for (double t : secs) REQUIRE(t > 0);
  // Off: the fast peers finish well before the slowed peer. On: they wait for it, and finish
  // within a fifth of its time. How far ahead they run off depends on how much of the 2 cores the
  // machine leaves them: quiet, off 2.5-3.2 s against 4.7-6.8 s for the slowed peer (ratio
  // 0.46-0.54); beside the rest of the suite (ctest -j2), 5.7 s against 7.5 s (0.76), while on
  // stayed at 1.0. So off is checked against on, in the same run.
  const double off0 = free[0] / free[2], off1 = free[1] / free[2];
  CHECK(off0 < 0.85);
  CHECK(off1 < 0.85);
  CHECK(paced[0] > 0.8 * paced[2]);
  CHECK(paced[1] > 0.8 * paced[2]);
  CHECK(paced[0] / paced[2] - off0 > 0.15);
  CHECK(paced[1] / paced[2] - off1 > 0.15);
}

TEST_CASE("a peer whose training thread hangs says so, leaves the swarm, and still obeys SIGTERM, "
          "a repeated SIGTERM stops cleanly, a second SIGINT at once",
          "[system][fault]") {
  auto flags = kTrainFlags;
  flags.insert(flags.end(), {"--epochs", "100000", "--stall-timeout", "3", "--stop-grace", "3"});
  Swarm s("gt-swarm-stall", 3, flags);
  s.procs.resize(3);
  s.start(0, true);
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
  s.start(1, true);
  // Peer 2's training thread hangs for good at step 300 (a test-only fault), deaf to stop requests.
  ::setenv("GT_TEST_STALL_AT_STEP", "300", 1);
  s.start(2, true);
  ::unsetenv("GT_TEST_STALL_AT_STEP");
  const std::string victim = [&] {
    std::string id;
    gt_test::eventually(30s, [&] { return !(id = s.peer_id(2)).empty(); });
    return id;
  }();
  REQUIRE(!victim.empty());
  {
    INFO("hung peer's log:\n" << gt_test::read_file(s.log(2)));
    // Noticed and said at error level within the stall bound (3 s after the hang begins).
    REQUIRE(gt_test::eventually(90s, [&] {
      return gt_test::read_file(s.log(2)).find("the training thread is stuck") != std::string::npos;
    }));
    const std::string log = gt_test::read_file(s.log(2));
    CHECK(log.find("error watchdog") != std::string::npos);
    CHECK(log.find("last seen in its averaging hook at step") != std::string::npos);
  }
  // It leaves membership: both others see it leave, so they stop dialling it.
  for (int i = 0; i < 2; ++i) {
    INFO("peer " << i << " log:\n" << gt_test::read_file(s.log(i)));
    CHECK(gt_test::eventually(15s, [&] { return s.member_event(i, victim, "left") >= 0; }));
  }
  // SIGTERM ends it within --stop-grace although its training thread never answers.
  const auto t0 = std::chrono::steady_clock::now();
  s.procs[2]->signal(SIGTERM);
  REQUIRE(s.procs[2]->wait_for(10s));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took < 6.0);
  CHECK(s.procs[2]->exit_code() == 130);
  CHECK(gt_test::read_file(s.log(2)).find("exiting now without a final checkpoint") !=
        std::string::npos);
  // The healthy peers stop cleanly on SIGTERM, well inside the grace; peer 0's SIGTERM comes
  // twice at once, as SLURM's time limit delivers it (through the step and through srun): the
  // repeat must not cut the clean stop short. Peer 1 gets SIGINT twice: a user's second Ctrl-C
  // exits at once.
  // (100 ms apart: a signal that arrives while the same one is pending merges with it.)
  s.procs[0]->signal(SIGTERM);
  std::this_thread::sleep_for(100ms);
  s.procs[0]->signal(SIGTERM);
  {
    INFO("peer 0 log:\n" << gt_test::read_file(s.log(0)));
    REQUIRE(s.procs[0]->wait_for(10s));
    CHECK(s.procs[0]->exit_code() == 130);
    const std::string log = gt_test::read_file(s.log(0));
    CHECK(log.find("SIGTERM again: still stopping") != std::string::npos);
    CHECK(log.find("exiting now") == std::string::npos);
    CHECK(log.find("without a final checkpoint") == std::string::npos);
  }
  s.procs[1]->signal(SIGINT);
  std::this_thread::sleep_for(100ms);
  s.procs[1]->signal(SIGINT);
  {
    INFO("peer 1 log:\n" << gt_test::read_file(s.log(1)));
    REQUIRE(s.procs[1]->wait_for(10s));
    CHECK(s.procs[1]->exit_code() == 130);
    CHECK(gt_test::read_file(s.log(1)).find("second signal: exiting now") != std::string::npos);
  }
}

// Issue: two peers started in one folder without --identity share its gossip-peer.key; the
// second logged "connected to ourselves", both trained alone with 0 exchanges and exited 0.
TEST_CASE(
    "two peers started in one folder without --identity: the joiner exits 2 with the fix, the "
    "seed says it once and goes on",
    "[system]") {
  gt_test::TempDir dir("gt-peer-shared-key");
  const int pa = gt_test::free_port(), pb = gt_test::free_port();
  const std::string a_addr = "127.0.0.1:" + std::to_string(pa);
  const std::string b_addr = "127.0.0.1:" + std::to_string(pb);
  auto argv = [&](const std::string& name, const std::string& listen) {
    std::vector<std::string> v{gt_test::peer_bin()};
    v.insert(v.end(), kTrainFlags.begin(), kTrainFlags.end());
    v.insert(v.end(), {"--epochs", "1000", "--linger", "0", "--listen", listen, "--metrics",
                       name + ".jsonl"});
    return v;
  };
  Process a(argv("a", a_addr), dir / "a.log", dir.str());
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(pa); }));
  auto b_args = argv("b", b_addr);
  b_args.insert(b_args.end(), {"--seeds", a_addr});
  Process b(b_args, dir / "b.log", dir.str());
  const bool exited = b.wait_for(60s);
  const std::string b_log = gt_test::read_file(dir / "b.log");
  INFO("joiner log:\n" << b_log);
  REQUIRE(exited);
  CHECK(b.exit_code() == 2);
  const std::string key = dir / "gossip-peer.key";
  const std::string fix =
      " uses this peer's identity key (" + key +
      "); give each peer its own --identity (or run each peer in its own folder)";
  CHECK_THAT(b_log, Catch::Contains("another peer at " + a_addr + fix));
  CHECK_THAT(b_log, Catch::Contains("could not join the swarm: another peer at " + a_addr));
  CHECK_THAT(b_log, !Catch::Contains("connected to ourselves"));
  CHECK(events(dir / "b.jsonl", "join_refused").size() == 1);
  CHECK(events(dir / "b.jsonl", "identity_clash").size() == 1);
  // The seed, already running, says it once, at error level, and trains on.
  const std::string a_log = gt_test::read_file(dir / "a.log");
  INFO("seed log:\n" << a_log);
  std::size_t told = 0;
  for (std::size_t at = 0; (at = a_log.find(b_addr + fix, at)) != std::string::npos; ++at) ++told;
  CHECK(told == 1);
  CHECK_THAT(a_log, Catch::Contains(" error net: another peer at " + b_addr));
  const auto clash = events(dir / "a.jsonl", "identity_clash");
  REQUIRE(clash.size() == 1);
  CHECK(clash[0]["addr"] == b_addr);
  CHECK(clash[0]["identity"] == key);
  CHECK(a.running());
  a.signal(SIGTERM);
  REQUIRE(a.wait_for(60s));
}

// Issue #44: a finished peer stayed up 10-31 s after "done", its main thread waiting for a name
// lookup of a departed pod (Asio's resolver thread, joined by the io_context's destructor). Here
// DNS never answers: the peer runs in its own mount namespace with a resolv.conf naming a UDP
// socket of this test that reads nothing (timeout 30 s), and its seed is a name. Before the fix it
// exited 14.6 s after "done"; now the lookup is left behind.
TEST_CASE("a peer whose seed's name lookup hangs exits right after done", "[system][netns]") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root (a mount namespace and a socket on port 53)");
    return;
  }
  if (::access("/usr/bin/unshare", X_OK) != 0) {
    WARN("skipped: needs /usr/bin/unshare (util-linux)");
    return;
  }
  // A loopback address of this process's own (127.53.X.Y from the pid), so that runs side by side
  // do not share the server.
  const std::string server = "127.53." + std::to_string(::getpid() / 250 % 250) + "." +
                             std::to_string(::getpid() % 250 + 1);
  const int sink = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(53);
  ::inet_pton(AF_INET, server.c_str(), &a.sin_addr);
  if (::bind(sink, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(sink);
    WARN("skipped: cannot bind " << server << ":53 for a DNS server that never answers");
    return;
  }
  gt_test::TempDir dir("gt-dns-hang");
  std::ofstream(dir / "resolv.conf") << "nameserver " << server
                                     << "\noptions timeout:30 attempts:1\n";
  std::ofstream(dir / "net.key") << std::string(64, 'c') << "\n";
  std::string cmd = "mount --bind " + (dir / "resolv.conf") + " /etc/resolv.conf && exec";
  std::vector<std::string> args{gt_test::peer_bin()};
  args.insert(args.end(), kTrainFlags.begin(), kTrainFlags.end());
  args.insert(args.end(), {"--epochs", "20", "--catch-up", "off", "--linger", "0", "--listen",
                           "127.0.0.1:" + std::to_string(gt_test::free_port()), "--seeds",
                           "departed.gossip.test:7000", "--network-key", dir / "net.key",
                           "--identity", dir / "id"});
  for (const auto& w : args) cmd += " '" + w + "'";
  Process p({"/usr/bin/unshare", "-m", "/bin/sh", "-c", cmd}, dir / "log.txt");
  INFO(gt_test::read_file(dir / "log.txt"));
  REQUIRE(gt_test::eventually(60s, [&] {
    return gt_test::read_file(dir / "log.txt").find(" done after ") != std::string::npos;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(p.wait_for(20s));
  const double after_done =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(sink);
  CHECK(p.exit_code() == 0);
  // The lookups of the seed's name were in flight (they cannot end before 30 s).
  CHECK(gt_test::read_file(dir / "log.txt").find("cannot resolve departed.gossip.test") ==
        std::string::npos);
  CHECK(after_done < 3.0);
}

// A run resized up (docs/cluster.md, "One run"): the cohort's peers with a checkpoint go on from
// it, and the peer added has none. It used to start at step 0 from the run's initial weights
// (a cohort, --min-peers above 1, never caught up); now it takes the state of a peer further along
// than a fresh start, while a cohort where everybody starts fresh still does not catch up.
TEST_CASE("a peer added by a resize catches up with the cohort's resumed peers, a fresh cohort "
          "does not catch up",
          "[system][gossip]") {
  Swarm s("gt-resize-catch-up", 3,
          {"--data", "synthetic", "--model", "mlp:784-16-10", "--epochs", "1000", "--run-id",
           "grow", "--backend", "cpu", "--min-peers-timeout", "30", "--log-level", "info",
           "--progress-every", "0"});
  auto args = [&](int i, int shards) {
    auto a = s.argv(i, true);
    for (std::size_t k = 0; k + 1 < a.size(); ++k)
      if (a[k] == "--num-shards") a[k + 1] = std::to_string(shards);
    a.insert(a.end(), {"--min-peers", std::to_string(shards)});
    return a;
  };
  auto events = [&](int i, const std::string& name) {
    std::vector<nlohmann::json> v;
    for (const auto& j : gt_test::read_metrics(s.metrics(i)))
      if (j.value("event", "") == name) v.push_back(j);
    return v;
  };
  auto last_epoch = [&](int i) {
    const auto ev = events(i, "eval");
    return ev.empty() ? 0 : ev.back().value("epoch", 0);
  };
  auto start = [&](int i, int shards) {
    std::filesystem::create_directories(s.peer_dir(i));
    s.procs.at(std::size_t(i)) = std::make_unique<Process>(args(i, shards), s.log(i));
  };
  auto stop_all = [&] {
    for (auto& p : s.procs)
      if (p && p->running()) p->signal(SIGTERM);
    for (auto& p : s.procs)
      if (p) REQUIRE(p->wait_for(30s));
  };
  s.procs.resize(3);
  // Two shards, a fresh cohort: 94 steps an epoch; two epochs are past the 64 steps from which a
  // state counts as further along.
  start(0, 2);
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
  start(1, 2);
  const bool trained = gt_test::eventually(90s, [&] { return last_epoch(0) >= 2 && last_epoch(1) >= 2; });
  INFO(gt_test::read_file(s.log(0)) << gt_test::read_file(s.log(1)));
  REQUIRE(trained);
  CHECK(events(0, "catch_up").empty());
  CHECK(events(1, "catch_up").empty());
  stop_all();
  const std::int64_t resumed_step = std::min(gossiptrain::core::load_checkpoint(s.peer_dir(0) + "/ckpt").step,
                                             gossiptrain::core::load_checkpoint(s.peer_dir(1) + "/ckpt").step);
  REQUIRE(resumed_step >= 2 * 94);

  // The same run with three shards: peers 0 and 1 go on from their checkpoints, peer 2 is new.
  start(0, 3);
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(s.ports[0]); }));
  start(1, 3);
  start(2, 3);
  const bool caught = gt_test::eventually(90s, [&] { return !events(2, "catch_up").empty(); });
  INFO(gt_test::read_file(s.log(2)));
  REQUIRE(caught);
  const auto c = events(2, "catch_up").front();
  CHECK(c["ok"] == true);
  CHECK(c["counters"] == true);
  // At least where the checkpoints were, mapped to three shards' 63 steps an epoch.
  CHECK(c["step"].get<std::int64_t>() >= resumed_step * 63 / 94 - 63);
  CHECK_THAT(gt_test::read_file(s.log(2)), Catch::Contains("caught up with"));
  // Its first evaluation is of an epoch after those the run had done, not epoch 1.
  REQUIRE(gt_test::eventually(60s, [&] { return last_epoch(2) > 0; }));
  std::printf("resize 2 -> 3: checkpoints at step >= %lld of 2 shards; peer 2 caught up at step %lld "
              "(epoch %lld) from %.8s, first evaluation epoch %d\n",
              static_cast<long long>(resumed_step), static_cast<long long>(c["step"].get<std::int64_t>()),
              static_cast<long long>(c["epoch"].get<std::int64_t>()),
              c["from"].get<std::string>().c_str(), events(2, "eval").front().value("epoch", 0));
  CHECK(events(2, "eval").front().value("epoch", 0) > 2);
  CHECK(events(0, "catch_up").empty());  // a resumed peer does not catch up
  stop_all();
}
