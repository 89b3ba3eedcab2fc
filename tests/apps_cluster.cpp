// gossip-peer --cluster: SLURM's host lists and tasks per node, StatefulSet ordinals, a peer's
// place from each engine's environment, flags over the environment, and exit-code-2 refusals
// that name the variable.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "apps/common/cluster.hpp"
#include "apps/common/options.hpp"
#include "apps/common/peer_churn.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::apps;
using Catch::Matchers::Contains;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

std::map<std::string, std::string> slurm_env(int procid, int localid) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NTASKS", "7"},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_JOB_NODELIST", "node[01-03],gpu5"},
          {"SLURM_TASKS_PER_NODE", "2(x3),1"},
          {"SLURM_SUBMIT_DIR", "/shared/me"},
          {"SLURM_JOB_ID", "42"}};
}

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SLURM host lists expand ranges, lists, padding and several bracket groups", "[apps]") {
  CHECK(expand_hostlist("node[01-03,07],gpu5") ==
        std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(expand_hostlist("n1") == std::vector<std::string>{"n1"});
  CHECK(expand_hostlist("n[8-10]") == std::vector<std::string>{"n8", "n9", "n10"});
  CHECK(expand_hostlist("r[1-2]-n[01-02]") ==
        std::vector<std::string>{"r1-n01", "r1-n02", "r2-n01", "r2-n02"});
  CHECK(expand_hostlist("a,b[3],c") == std::vector<std::string>{"a", "b3", "c"});
  for (const char* bad : {"", "n[1-", "n]1[", "n[3-1]", "n[a-b]", "n[[1]]", "n[1-2],,m", "n[]",
                          "n[1-99999999]", "x[1-1000][1-1000]"})
    CHECK_THROWS_AS(expand_hostlist(bad), std::invalid_argument);
}

TEST_CASE("SLURM tasks per node expand repeats and refuse anything else", "[apps]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("1,3(x2)") == std::vector<int>{1, 3, 3});
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "2,,1", "-1", "2(y3)", "2(x999999999)"})
    CHECK_THROWS_AS(expand_tasks_per_node(bad), std::invalid_argument);
}

TEST_CASE("StatefulSet ordinals come from the pod name's last dash", "[apps]") {
  std::string set;
  CHECK(statefulset_ordinal("gossip-3", &set) == 3);
  CHECK(set == "gossip");
  CHECK(statefulset_ordinal("my-gossip-set-12", &set) == 12);
  CHECK(set == "my-gossip-set");
  for (const char* bad : {"gossip", "gossip-", "-3", "gossip-x", "gossip-03", "gossip-99999999999"})
    CHECK_THROWS_AS(statefulset_ordinal(bad), std::invalid_argument);
}

TEST_CASE("a SLURM task learns shard, port, node and the first tasks as seeds", "[apps]") {
  ClusterFlags f;
  f.kind = "slurm";
  f.base_port = 7000;
  // Task 5 is node03's second task under block distribution of 2,2,2,1.
  const ClusterPlace p = slurm_place(env_of(slurm_env(5, 1)), f);
  CHECK(p.shard == 5);
  CHECK(p.num_shards == 7);
  CHECK(p.port == 7001);
  CHECK(p.host == "node03");
  CHECK(p.seeds == std::vector<std::string>{"node01:7000", "node01:7001"});
  CHECK(p.run_dir == "/shared/me/gossip-42");
  CHECK(p.peer_dir == "/shared/me/gossip-42/peer5");
  // A seed names the other seeds, not itself; the last node's only task is local task 0.
  CHECK(slurm_place(env_of(slurm_env(1, 1)), f).seeds == std::vector<std::string>{"node01:7000"});
  CHECK(slurm_place(env_of(slurm_env(6, 0)), f).host == "gpu5");
  f.seed_count = 3;
  CHECK(slurm_place(env_of(slurm_env(6, 0)), f).seeds ==
        std::vector<std::string>{"node01:7000", "node01:7001", "node02:7000"});
  // GT_RUN_DIR, then --run-dir, win over the job's submit folder.
  auto e = slurm_env(0, 0);
  e["GT_RUN_DIR"] = "/scratch/run";
  CHECK(slurm_place(env_of(e), f).run_dir == "/scratch/run");
  f.run_dir = "/flag/run";
  CHECK(slurm_place(env_of(e), f).peer_dir == "/flag/run/peer0");
}

TEST_CASE("a missing or inconsistent SLURM environment is refused, naming the variable", "[apps]") {
  ClusterFlags f;
  f.kind = "slurm";
  for (const char* var : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST",
                          "SLURM_TASKS_PER_NODE"}) {
    auto e = slurm_env(0, 0);
    e.erase(var);
    CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains(var));
  }
  auto e = slurm_env(0, 0);
  e["SLURM_PROCID"] = "7";
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_PROCID=7"));
  e = slurm_env(0, 0);
  e["SLURM_NTASKS"] = "abc";
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_NTASKS=abc"));
  e = slurm_env(0, 0);
  e["SLURM_TASKS_PER_NODE"] = "2(x4)";  // 8 tasks, 4 nodes named
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_TASKS_PER_NODE"));
  e = slurm_env(0, 0);
  e["SLURM_JOB_NODELIST"] = "node[01-03]";  // 3 nodes, 4 counts
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_JOB_NODELIST"));
  e = slurm_env(0, 0);
  e["SLURM_JOB_NODELIST"] = "node[01-";
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_JOB_NODELIST"));
  // Cyclic distribution puts task 1 on node02 as its local task 0: our seeds' ports would be wrong.
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(slurm_env(1, 0)), f); }),
             Contains("SLURM_LOCALID"));
  e = slurm_env(0, 0);
  e["SLURMD_NODENAME"] = "node02";
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURMD_NODENAME"));
  e = slurm_env(0, 0);
  e.erase("SLURM_JOB_ID");
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(e), f); }), Contains("SLURM_JOB_ID"));
  f.base_port = 65535;
  CHECK_THAT(usage_error_of([&] { slurm_place(env_of(slurm_env(1, 1)), f); }), Contains("65535"));
}

TEST_CASE("without --base-port two SLURM jobs on one node listen on different ports", "[apps]") {
  ClusterFlags f;
  f.kind = "slurm";
  auto job = [&](const std::string& id, int procid, int localid) {
    auto e = slurm_env(procid, localid);
    e["SLURM_JOB_ID"] = id;
    return slurm_place(env_of(e), f);
  };
  // Job 42: base 10000 + 64 * 42; task 5 is local task 1; the seeds use the job's ports too.
  CHECK(job("42", 5, 1).port == 12689);
  CHECK(job("42", 5, 1).seeds == std::vector<std::string>{"node01:12688", "node01:12689"});
  // The next job on the same nodes: 64 ports further, none shared with job 42's.
  CHECK(job("43", 5, 1).port == 12753);
  CHECK(job("43", 0, 0).port - job("42", 0, 0).port == 64);
  // Every derived port is below Linux's ephemeral range (32768) with room for 64 local tasks.
  CHECK(slurm_job_base_port(349) + 63 < 32768);
  CHECK(slurm_job_base_port(350) == slurm_job_base_port(0));
  // A job id that is not a number is refused, naming the variable.
  CHECK_THAT(usage_error_of([&] { job("4x", 0, 0); }), Contains("SLURM_JOB_ID"));
  // --base-port wins.
  f.base_port = 7000;
  CHECK(job("43", 5, 1).port == 7001);
}

TEST_CASE("a StatefulSet pod learns its ordinal and the first pods of the Service as seeds",
          "[apps]") {
  ClusterFlags f;
  f.kind = "k8s";
  f.base_port = 7100;
  std::map<std::string, std::string> e = {{"HOSTNAME", "gt-3"},
                                          {"GT_K8S_SERVICE", "gt-peers"},
                                          {"GT_K8S_REPLICAS", "5"},
                                          {"GT_RUN_DIR", "/data"}};
  ClusterPlace p = k8s_place(env_of(e), f);
  CHECK(p.shard == 3);
  CHECK(p.num_shards == 5);
  CHECK(p.host == "gt-3.gt-peers");
  CHECK(p.port == 7100);
  CHECK(p.seeds == std::vector<std::string>{"gt-0.gt-peers:7100", "gt-1.gt-peers:7100"});
  CHECK(p.peer_dir == "/data/peer3");
  // The flags win over GT_K8S_*.
  f.k8s_service = "other";
  f.k8s_replicas = 4;
  p = k8s_place(env_of(e), f);
  CHECK(p.num_shards == 4);
  CHECK(p.seeds.front() == "gt-0.other:7100");
  f = ClusterFlags{};
  f.kind = "k8s";
  e.erase("GT_K8S_SERVICE");
  CHECK_THAT(usage_error_of([&] { k8s_place(env_of(e), f); }), Contains("GT_K8S_SERVICE"));
  e["GT_K8S_SERVICE"] = "s";
  e["GT_K8S_REPLICAS"] = "3";  // ordinal 3 of 3 replicas
  CHECK_THAT(usage_error_of([&] { k8s_place(env_of(e), f); }), Contains("HOSTNAME=gt-3"));
  e["HOSTNAME"] = "laptop";
  CHECK_THAT(usage_error_of([&] { k8s_place(env_of(e), f); }), Contains("HOSTNAME"));
  e.erase("HOSTNAME");
  CHECK_THAT(usage_error_of([&] { k8s_place(env_of(e), f); }), Contains("HOSTNAME"));
}

TEST_CASE("under --cluster the flags given win, the rest comes from the engine", "[apps]") {
  gt_test::TempDir dir("gt-cluster");
  PeerConfig c;
  c.cluster.kind = "slurm";
  c.cluster.run_dir = dir.path.string();
  auto e = slurm_env(5, 1);
  c.shard = 2;  // as if --shard 2 were given
  apply_cluster(c, {"shard"}, env_of(e));
  CHECK(c.shard == 2);
  CHECK(c.num_shards == 7);
  // (ports from the job id, 42: 10000 + 64 * 42 + SLURM_LOCALID)
  CHECK(c.listen == "0.0.0.0:12689");
  CHECK(c.advertise == "node03:12689");
  CHECK(c.min_peers == 7);
  CHECK(c.metrics == dir.path.string() + "/peer5/metrics.jsonl");
  CHECK(c.train.checkpoint_dir == dir.path.string() + "/peer5/ckpt");
  CHECK(std::filesystem::is_directory(dir.path / "peer5"));
  CHECK(given_flags({"--shard", "2", "--seeds=a:1", "x"}) ==
        std::set<std::string>{"shard", "seeds"});
}

// In a child with its own mount namespace: keys of three modes on a tmpfs remounted read-only (as a
// Kubernetes secret volume is). Bit 0: 0640 accepted; bit 1: 0644 refused; bit 2: 0660 refused.
// 77: no mount namespace here (not root).
int key_modes_on_a_read_only_mount(const std::filesystem::path& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0)
      ::_exit(77);
    for (const auto& [name, mode] : {std::pair{"k640", 0640}, {"k644", 0644}, {"k660", 0660}}) {
      std::ofstream(dir / name) << std::string(64, 'a') << "\n";
      ::chmod((dir / name).c_str(), mode);
    }
    if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) != 0) ::_exit(78);
    int bits = 0;
    if (usage_error_of([&] { check_cluster_key((dir / "k640").string()); }).empty()) bits |= 1;
    if (!usage_error_of([&] { check_cluster_key((dir / "k644").string()); }).empty()) bits |= 2;
    if (!usage_error_of([&] { check_cluster_key((dir / "k660").string()); }).empty()) bits |= 4;
    ::_exit(bits);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("a group-readable key on a read-only mount (a secret with fsGroup) is accepted",
          "[apps]") {
  gt_test::TempDir dir("gt-cluster-secret");
  const int r = key_modes_on_a_read_only_mount(dir.path);
  if (r == 77) {
    WARN("SKIP: no mount namespace here (needs root)");
    return;
  }
  CHECK(r == 7);  // 0640 accepted; 0644 (others) and 0660 (group-writable) refused
  // The same 0640 key on this writable folder is refused.
  const std::string key = (dir.path / "k640").string();
  std::ofstream(key) << std::string(64, 'a') << "\n";
  ::chmod(key.c_str(), 0640);
  CHECK_THAT(usage_error_of([&] { check_cluster_key(key); }), Contains("read-only mount"));
}

TEST_CASE("under --cluster a network key file others may read is refused", "[apps]") {
  gt_test::TempDir dir("gt-cluster");
  const std::string key = (dir.path / "network.key").string();
  std::ofstream(key) << std::string(64, 'a') << "\n";
  PeerConfig c;
  c.cluster.kind = "slurm";
  c.cluster.run_dir = dir.path.string();
  c.network_key = key;
  ::chmod(key.c_str(), 0640);
  CHECK_THAT(usage_error_of([&] { apply_cluster(c, {}, env_of(slurm_env(0, 0))); }),
             Contains("chmod 600"));
  ::chmod(key.c_str(), 0600);
  CHECK(usage_error_of([&] { apply_cluster(c, {}, env_of(slurm_env(0, 0))); }).empty());
  c.network_key = (dir.path / "missing.key").string();
  CHECK_THAT(usage_error_of([&] { apply_cluster(c, {}, env_of(slurm_env(0, 0))); }),
             Contains("missing.key"));
}

TEST_CASE("peer churn: a peer keeps its own shard's crash, pause and stop events", "[apps]") {
  gt_test::TempDir dir("gt-cluster");
  const std::string f = (dir.path / "s.json").string();
  std::ofstream(f) << R"({"events": [
    {"at_progress": 0.3, "event": "crash", "peers": [1]},
    {"at_progress": 0.35, "event": "restart", "peers": [1]},
    {"at": 5, "event": "pause", "peers": [0, 1], "for": 2},
    {"at": 9, "event": "stop", "peers": [2]}]})";
  auto mine = peer_churn_events(f, 1, 4);
  REQUIRE(mine.size() == 2);
  CHECK(mine[0].kind == gossiptrain::core::ChurnKind::Crash);
  CHECK(mine[1].kind == gossiptrain::core::ChurnKind::Pause);
  CHECK(peer_churn_events(f, 3, 4).empty());
  // What a peer cannot play alone is refused, not ignored.
  std::ofstream(f, std::ios::trunc) << R"({"events": [{"at": 1, "event": "pause", "peers": [0]}]})";
  CHECK_THROWS_AS(peer_churn_events(f, 0, 4), gossiptrain::core::ScenarioError);
  std::ofstream(f, std::ios::trunc)
      << R"({"events": [{"at": 1, "event": "partition", "groups": [[0], [1]]}]})";
  CHECK_THROWS_AS(peer_churn_events(f, 0, 4), gossiptrain::core::ScenarioError);
  CHECK_THROWS_AS(peer_churn_events("random:crash,uptime=5,downtime=1", 0, 4),
                  gossiptrain::core::ScenarioError);
  CHECK_THROWS_AS(peer_churn_events((dir.path / "none.json").string(), 0, 4),
                  gossiptrain::core::ScenarioError);
}

TEST_CASE("advertise-interface: the interface's address is announced, under --cluster and without",
          "[apps]") {
  // Loopback is up on every machine (and in every network namespace we make).
  gt_test::TempDir dir("gt-cluster-if");
  PeerConfig c;
  c.cluster.kind = "slurm";
  c.cluster.run_dir = dir.path.string();
  c.cluster.advertise_interface = "lo";
  apply_cluster(c, {}, env_of(slurm_env(5, 1)));
  CHECK(c.advertise == "127.0.0.1:12689");  // not node03, the node's name
  bool help = false;
  const PeerConfig p = parse_peer_args(
      {"--listen", "0.0.0.0:7300", "--advertise-interface", "lo", "--data", "synthetic"}, &help);
  CHECK(p.advertise == "127.0.0.1:7300");
  // An interface without an address (or none by that name) names those that have one.
  const std::string err = usage_error_of([] {
    bool h = false;
    parse_peer_args({"--listen", "0.0.0.0:7300", "--advertise-interface", "nosuch0"}, &h);
  });
  CHECK_THAT(err, Contains("--advertise-interface nosuch0: no such interface"));
  CHECK_THAT(err, Contains("lo"));
  CHECK_THAT(usage_error_of([] {
               bool h = false;
               parse_peer_args({"--listen", "0.0.0.0:7300", "--advertise", "10.0.0.1:7300",
                                "--advertise-interface", "lo"},
                               &h);
             }),
             Contains("give one"));
  CHECK_THAT(usage_error_of([] {
               bool h = false;
               parse_peer_args({"--listen", "0.0.0.0:0", "--advertise-interface", "lo"}, &h);
             }),
             Contains("port other than 0"));
}

TEST_CASE("under --cluster GT_RUN_ID gives the run id, --run-id wins, a bad one is refused",
          "[apps]") {
  gt_test::TempDir dir("gt-cluster-run-id");
  auto e = slurm_env(0, 0);
  e["GT_RUN_ID"] = "exp-3.resumed_2";
  PeerConfig c;
  c.cluster.kind = "slurm";
  c.cluster.run_dir = dir.path.string();
  apply_cluster(c, {}, env_of(e));
  CHECK(c.train.run_id == "exp-3.resumed_2");

  PeerConfig given;
  given.cluster.kind = "slurm";
  given.cluster.run_dir = dir.path.string();
  given.train.run_id = "mine";
  apply_cluster(given, {"run-id"}, env_of(e));
  CHECK(given.train.run_id == "mine");

  e["GT_RUN_ID"] = "has space";
  PeerConfig bad;
  bad.cluster.kind = "slurm";
  bad.cluster.run_dir = dir.path.string();
  CHECK_THAT(usage_error_of([&] { apply_cluster(bad, {}, env_of(e)); }),
             Contains("GT_RUN_ID") && Contains("has space"));

  bool help = false;
  CHECK(parse_peer_args({"--run-id", "a.b-c_9"}, &help).train.run_id == "a.b-c_9");
  CHECK(parse_peer_args({}, &help).train.run_id.empty());
  CHECK_THAT(usage_error_of([&] { parse_peer_args({"--run-id", "x/y"}, &help); }),
             Contains("--run-id") && Contains("x/y"));
  CHECK_THAT(usage_error_of([&] { parse_peer_args({"--run-id", std::string(65, 'r')}, &help); }),
             Contains("--run-id"));
}
