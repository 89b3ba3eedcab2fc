// gossip-peer --cluster: SLURM's and Kubernetes' environment to a peer's place in the swarm.

#include "apps/common/cluster.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "apps/common/options.hpp"
#include "apps/common/option_table.hpp"
#include "core/trainer.hpp"
#include "net/socket/address.hpp"

namespace gossiptrain::apps {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (ch < '0' || ch > '9') return false;
  return true;
}

// A decimal integer in [lo, hi], else nothing.
std::optional<long long> to_int(const std::string& s, long long lo, long long hi) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

// "01-03,07" -> 01 02 03 07 (the width of each range's first bound kept).
std::vector<std::string> expand_ranges(const std::string& body, const std::string& whole) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string item = body.substr(start, comma - start);
    const std::size_t dash = item.find('-');
    const std::string a = item.substr(0, dash);
    const std::string b = dash == std::string::npos ? a : item.substr(dash + 1);
    if (!all_digits(a) || !all_digits(b) || a.size() > 9 || b.size() > 9)
      throw std::invalid_argument("bad range '" + item + "' in '" + whole + "'");
    const long long lo = std::stoll(a), hi = std::stoll(b);
    if (hi < lo) throw std::invalid_argument("reversed range '" + item + "' in '" + whole + "'");
    if (hi - lo >= (long long)kMaxClusterNodes)
      throw std::invalid_argument("range '" + item + "' in '" + whole + "' is too long");
    for (long long v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < a.size()) s.insert(0, a.size() - s.size(), '0');
      out.push_back(s);
    }
    start = comma + 1;
  }
  return out;
}

// One item of a host list (no top-level comma): "rack[1-2]-n[01-02]" -> the product.
void expand_item(const std::string& item, const std::string& whole, std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  std::size_t i = 0;
  while (i < item.size()) {
    const std::size_t open = item.find('[', i);
    const std::string lit =
        item.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (lit.find(']') != std::string::npos)
      throw std::invalid_argument("unbalanced ']' in '" + whole + "'");
    for (auto& n : names) n += lit;
    if (open == std::string::npos) break;
    const std::size_t close = item.find(']', open);
    if (close == std::string::npos) throw std::invalid_argument("unclosed '[' in '" + whole + "'");
    const auto parts = expand_ranges(item.substr(open + 1, close - open - 1), whole);
    std::vector<std::string> next;
    if (names.size() * parts.size() > kMaxClusterNodes)
      throw std::invalid_argument("'" + whole + "' names too many hosts");
    for (const auto& n : names)
      for (const auto& p : parts) next.push_back(n + p);
    names = std::move(next);
    i = close + 1;
  }
  for (auto& n : names) {
    if (n.empty()) throw std::invalid_argument("empty host name in '" + whole + "'");
    out.push_back(std::move(n));
  }
}

std::string need(const EnvLookup& env, const std::string& var, const std::string& why) {
  auto v = env(var);
  if (!v || v->empty()) throw UsageError("--cluster: " + var + " is not set (" + why + ")");
  return *v;
}

int need_int(const EnvLookup& env, const std::string& var, long long lo, long long hi,
             const std::string& why) {
  const std::string v = need(env, var, why);
  auto n = to_int(v, lo, hi);
  if (!n)
    throw UsageError("--cluster: " + var + "=" + v + " is not an integer in " + std::to_string(lo) +
                     ".." + std::to_string(hi));
  return int(*n);
}

std::string host_port(const std::string& host, int port) {
  return host + ":" + std::to_string(port);
}

std::string peer_dir_of(const std::string& run_dir, int shard) {
  return (std::filesystem::path(run_dir) / ("peer" + std::to_string(shard))).string();
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) throw std::invalid_argument("empty host list");
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char ch = i < list.size() ? list[i] : ',';
    if (ch == '[' && ++depth > 1) throw std::invalid_argument("nested '[' in '" + list + "'");
    if (ch == ']' && --depth < 0) throw std::invalid_argument("unbalanced ']' in '" + list + "'");
    if (ch == ',' && depth == 0) {
      expand_item(list.substr(start, i - start), list, out);
      if (out.size() > kMaxClusterNodes)
        throw std::invalid_argument("'" + list + "' names too many hosts");
      start = i + 1;
    }
  }
  if (depth != 0) throw std::invalid_argument("unclosed '[' in '" + list + "'");
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  if (spec.empty()) throw std::invalid_argument("empty tasks-per-node list");
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(start, comma - start);
    std::string n = item, times = "1";
    if (const auto p = item.find("(x"); p != std::string::npos) {
      if (item.back() != ')')
        throw std::invalid_argument("bad item '" + item + "' in '" + spec + "'");
      n = item.substr(0, p);
      times = item.substr(p + 2, item.size() - p - 3);
    }
    const auto tasks = to_int(n, 1, 1000000);
    const auto reps = to_int(times, 1, (long long)kMaxClusterNodes);
    if (!tasks || !reps) throw std::invalid_argument("bad item '" + item + "' in '" + spec + "'");
    if (out.size() + std::size_t(*reps) > kMaxClusterNodes)
      throw std::invalid_argument("'" + spec + "' names too many nodes");
    out.insert(out.end(), std::size_t(*reps), int(*tasks));
    start = comma + 1;
  }
  return out;
}

int statefulset_ordinal(const std::string& pod_name, std::string* set_name) {
  const auto dash = pod_name.rfind('-');
  if (dash == std::string::npos || dash == 0)
    throw std::invalid_argument("'" + pod_name + "' is not a StatefulSet pod name (NAME-ORDINAL)");
  const std::string ord = pod_name.substr(dash + 1);
  const auto n = all_digits(ord) && ord.size() <= 9 ? to_int(ord, 0, 999999999) : std::nullopt;
  if (!n || (ord.size() > 1 && ord[0] == '0'))
    throw std::invalid_argument("'" + pod_name + "' is not a StatefulSet pod name (NAME-ORDINAL)");
  if (set_name) *set_name = pod_name.substr(0, dash);
  return int(*n);
}

int slurm_job_base_port(long long job_id) {
  constexpr long long kFirst = 10000, kPerJob = 64, kJobs = 350;  // 10000 + 350 * 64 = 32400
  return int(kFirst + kPerJob * (job_id % kJobs));
}

int cluster_seed_count(int peers) {
  // As gossip-launch's seed_count (apps/launch/options.cpp): enough that one restarting seed
  // does not stall joins, few enough that the first peers are not everyone's only contact.
  if (peers <= 2) return std::max(1, peers);
  if (peers < 16) return 2;
  return std::min(8, 4 + peers / 64);
}

ClusterPlace slurm_place(const EnvLookup& env, const ClusterFlags& f) {
  ClusterPlace p;
  const int ntasks = need_int(env, "SLURM_NTASKS", 1, 100000, "the number of shards");
  const int procid = need_int(env, "SLURM_PROCID", 0, 100000, "this task's shard");
  const int localid = need_int(env, "SLURM_LOCALID", 0, 100000, "this task's port offset");
  if (procid >= ntasks)
    throw UsageError("--cluster: SLURM_PROCID=" + std::to_string(procid) +
                     " is out of range for SLURM_NTASKS=" + std::to_string(ntasks));
  std::string nodelist_var = "SLURM_JOB_NODELIST";
  if (!env(nodelist_var) && env("SLURM_NODELIST")) nodelist_var = "SLURM_NODELIST";
  const std::string nodelist = need(env, nodelist_var, "the job's nodes, for the seeds");
  const std::string tpn = need(env, "SLURM_TASKS_PER_NODE", "the tasks on each node");
  std::vector<std::string> nodes;
  std::vector<int> per_node;
  try {
    nodes = expand_hostlist(nodelist);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--cluster: " + nodelist_var + ": " + e.what());
  }
  try {
    per_node = expand_tasks_per_node(tpn);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--cluster: SLURM_TASKS_PER_NODE: " + std::string(e.what()));
  }
  if (per_node.size() != nodes.size())
    throw UsageError("--cluster: SLURM_TASKS_PER_NODE=" + tpn + " gives " +
                     std::to_string(per_node.size()) + " nodes but " + nodelist_var + "=" +
                     nodelist + " names " + std::to_string(nodes.size()));
  long long total = 0;
  for (int n : per_node) total += n;
  if (total != ntasks)
    throw UsageError("--cluster: SLURM_TASKS_PER_NODE=" + tpn + " adds up to " +
                     std::to_string(total) + " tasks but SLURM_NTASKS=" + std::to_string(ntasks));
  // Task k's node and local id under block distribution (srun's default): the first node's tasks
  // first. A task's own SLURM_LOCALID must agree, or the seeds' ports would be wrong.
  std::vector<std::pair<std::size_t, int>> where;  // task -> (node, local id)
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (int l = 0; l < per_node[n]; ++l) where.emplace_back(n, l);
  const auto [my_node, my_local] = where[std::size_t(procid)];
  if (my_local != localid)
    throw UsageError("--cluster: SLURM_LOCALID=" + std::to_string(localid) + " but task " +
                     std::to_string(procid) + " is local task " + std::to_string(my_local) +
                     " of its node under block distribution of SLURM_TASKS_PER_NODE=" + tpn +
                     " (run srun with --distribution=block)");
  if (auto me = env("SLURMD_NODENAME"); me && !me->empty() && *me != nodes[my_node])
    throw UsageError("--cluster: SLURMD_NODENAME=" + *me + " but task " + std::to_string(procid) +
                     " is on " + nodes[my_node] + " under block distribution of " + nodelist_var +
                     " and SLURM_TASKS_PER_NODE (run srun with --distribution=block)");
  const int base = f.base_port > 0
                       ? f.base_port
                       : slurm_job_base_port(need_int(env, "SLURM_JOB_ID", 0, 2147483647,
                                                      "the job's id, which picks the ports; or pass --base-port"));
  if (base + localid > 65535)
    throw UsageError("--cluster: --base-port " + std::to_string(base) +
                     " + SLURM_LOCALID=" + std::to_string(localid) + " is past port 65535");
  p.shard = procid;
  p.num_shards = ntasks;
  p.port = base + localid;
  p.host = nodes[my_node];
  const int k = std::min(ntasks, f.seed_count > 0 ? f.seed_count : cluster_seed_count(ntasks));
  for (int t = 0; t < k; ++t)
    if (t != procid)
      p.seeds.push_back(host_port(nodes[where[std::size_t(t)].first],
                                  base + where[std::size_t(t)].second));
  p.run_dir = f.run_dir;
  if (p.run_dir.empty())
    if (auto d = env("GT_RUN_DIR"); d && !d->empty()) p.run_dir = *d;
  if (p.run_dir.empty())
    p.run_dir = need(env, "SLURM_SUBMIT_DIR", "the shared folder of the run; or pass --run-dir") +
                "/gossip-" + need(env, "SLURM_JOB_ID", "names the run folder; or pass --run-dir");
  p.peer_dir = peer_dir_of(p.run_dir, p.shard);
  return p;
}

ClusterPlace k8s_place(const EnvLookup& env, const ClusterFlags& f) {
  ClusterPlace p;
  const std::string pod = need(env, "HOSTNAME", "the pod name, NAME-ORDINAL");
  std::string set;
  try {
    p.shard = statefulset_ordinal(pod, &set);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--cluster k8s: HOSTNAME: " + std::string(e.what()));
  }
  std::string service = f.k8s_service;
  if (service.empty())
    service = need(env, "GT_K8S_SERVICE", "the headless Service's name; or pass --k8s-service");
  int replicas = f.k8s_replicas;
  if (replicas <= 0)
    replicas = need_int(env, "GT_K8S_REPLICAS", 1, 100000,
                        "the StatefulSet's replicas; or pass --k8s-replicas");
  if (p.shard >= replicas)
    throw UsageError("--cluster k8s: HOSTNAME=" + pod + " has ordinal " + std::to_string(p.shard) +
                     ", out of range for " + std::to_string(replicas) +
                     " replicas (--k8s-replicas / GT_K8S_REPLICAS)");
  p.num_shards = replicas;
  p.port = f.base_port > 0 ? f.base_port : kK8sBasePort;
  p.host = pod + "." + service;
  const int k = std::min(replicas, f.seed_count > 0 ? f.seed_count : cluster_seed_count(replicas));
  for (int j = 0; j < k; ++j)
    if (j != p.shard)
      p.seeds.push_back(host_port(set + "-" + std::to_string(j) + "." + service, p.port));
  p.run_dir = f.run_dir;
  if (p.run_dir.empty())
    if (auto d = env("GT_RUN_DIR"); d && !d->empty()) p.run_dir = *d;
  if (p.run_dir.empty()) p.run_dir = ".";
  p.peer_dir = peer_dir_of(p.run_dir, p.shard);
  return p;
}

void add_cluster_options(std::vector<Option<PeerConfig>>& options) {
  using O = Options<PeerConfig>;
  auto cf = [](auto field) { return field_of(&PeerConfig::cluster, field); };
  std::vector<Option<PeerConfig>> more = {
      O::choice("cluster", {"slurm", "k8s"},
                "take shard, shards, port, --advertise, seeds and this peer's folder (metrics, "
                "checkpoints, identity) from the engine: SLURM's srun variables, or a "
                "StatefulSet's pod name (HOSTNAME) and Service; flags given here win "
                "(docs/cluster.md)",
                cf(&ClusterFlags::kind)),
      O::number("base-port", "PORT",
                "--cluster: the port peers listen on (SLURM: plus SLURM_LOCALID)",
                cf(&ClusterFlags::base_port), 1, 65535)
          .shows([](PeerConfig& c) {
            return c.cluster.base_port ? show_value(c.cluster.base_port)
                                       : "SLURM: 10000 + 64 * (SLURM_JOB_ID mod 350), so jobs "
                                         "sharing a node differ; k8s: 7000";
          }),
      O::text("run-dir", "DIR",
              "--cluster: the run folder, peer folders DIR/peerN", cf(&ClusterFlags::run_dir))
          .unset_means("GT_RUN_DIR, else under SLURM $SLURM_SUBMIT_DIR/gossip-$SLURM_JOB_ID, "
                       "under k8s the working folder"),
      O::text("k8s-service", "NAME",
              "--cluster k8s: the StatefulSet's headless Service", cf(&ClusterFlags::k8s_service))
          .unset_means("GT_K8S_SERVICE"),
      O::number("k8s-replicas", "K",
                "--cluster k8s: the StatefulSet's replicas, the number of shards",
                cf(&ClusterFlags::k8s_replicas), 1, 100000)
          .shows([](PeerConfig& c) {
            return c.cluster.k8s_replicas ? show_value(c.cluster.k8s_replicas) : "GT_K8S_REPLICAS";
          }),
      O::number("cluster-seeds", "N",
                "--cluster: how many of the first tasks or pods serve as seeds",
                cf(&ClusterFlags::seed_count), 1, 1000)
          .shows([](PeerConfig& c) {
            return c.cluster.seed_count ? show_value(c.cluster.seed_count)
                                        : "as gossip-launch, 2 for 3..15 peers";
          }),
      O::text("advertise-interface", "IFNAME",
              "announce this network interface's address (its first IPv4 one) instead of the "
              "host name under --cluster, or of --listen's host: for nodes whose name resolves "
              "to another network than the peers should use (as NCCL_SOCKET_IFNAME)",
              cf(&ClusterFlags::advertise_interface))
          .unset_means("--advertise, else the node's or pod's name under --cluster, else the "
                       "listen address"),
      O::text("churn", "FILE",
              "play this peer's (its --shard's) events of a churn scenario (scripts/scenarios "
              "format): crash (the process dies at once), pause (it stops for \"for\" seconds), "
              "stop (it leaves); each goes to the metrics (docs/cluster.md)",
              &PeerConfig::churn),
  };
  options.insert(options.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
}

std::set<std::string> given_flags(const std::vector<std::string>& args) {
  std::set<std::string> out;
  for (const auto& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    out.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
  }
  return out;
}

void apply_cluster(PeerConfig& c, const std::set<std::string>& given, const EnvLookup& env) {
  if (c.cluster.kind.empty()) return;
  const ClusterPlace p =
      c.cluster.kind == "slurm" ? slurm_place(env, c.cluster) : k8s_place(env, c.cluster);
  auto unset = [&](const char* flag) { return !given.count(flag); };
  if (unset("shard")) c.shard = p.shard;
  if (unset("num-shards")) c.num_shards = p.num_shards;
  if (unset("listen")) c.listen = "0.0.0.0:" + std::to_string(p.port);
  c.listen_given = true;
  if (unset("advertise")) {
    if (c.cluster.advertise_interface.empty()) c.advertise = host_port(p.host, p.port);
    else apply_advertise_interface(c, p.port);
  }
  if (unset("seeds")) c.node.membership.seeds = p.seeds;
  // The whole swarm starts at once under an engine: wait for it, as gossip-launch's first peers do.
  if (unset("min-peers")) c.min_peers = p.num_shards;
  if (unset("metrics")) c.metrics = p.peer_dir + "/metrics.jsonl";
  if (unset("checkpoint-dir")) c.train.checkpoint_dir = p.peer_dir + "/ckpt";
  if (unset("identity")) c.identity = p.peer_dir + "/identity.key";
  if (unset("run-id"))
    if (auto id = env("GT_RUN_ID"); id && !id->empty()) {
      try {
        core::check_run_id(*id, "--cluster: GT_RUN_ID");
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
      c.train.run_id = *id;
    }
  if (c.shard >= c.num_shards)
    throw UsageError("--cluster: shard " + std::to_string(c.shard) +
                     " is out of range for --num-shards " + std::to_string(c.num_shards));
  std::error_code ec;
  std::filesystem::create_directories(p.peer_dir, ec);
  if (ec) throw UsageError("--cluster: cannot create " + p.peer_dir + ": " + ec.message());
  if (!c.network_key.empty()) check_cluster_key(c.network_key);
}

void apply_advertise_interface(PeerConfig& c, int port) {
  const std::string& ifname = c.cluster.advertise_interface;
  std::vector<std::string> names;
  const std::string addr = net::interface_address(ifname, &names);
  if (addr.empty()) {
    std::string have;
    for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
    throw UsageError("--advertise-interface " + ifname +
                     ": no such interface with an address that is up (interfaces with one: " +
                     (have.empty() ? std::string("none") : have) + ")");
  }
  c.advertise = host_port(addr, port);
}

void check_cluster_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UsageError("--network-key " + path + ": cannot read it");
  if (st.st_mode & 007)
    throw UsageError("--network-key " + path +
                     " may be read by others: chmod 600 it (under --cluster the key is a secret "
                     "on a shared file system)");
  if (!(st.st_mode & 070)) return;
  // Group-readable: a Kubernetes secret mounted for a non-root pod with fsGroup is 0640 (or 0440)
  // on a read-only volume that nobody can chmod. Accepted there, not on a writable file system.
  struct statvfs fs {};
  const bool read_only_mount = ::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY);
  if (read_only_mount && !(st.st_mode & 020)) {
    spdlog::info("--network-key {}: readable by its group on a read-only mount (a mounted secret "
                 "with fsGroup): accepted",
                 path);
    return;
  }
  throw UsageError("--network-key " + path +
                   " may be read by its group: chmod 600 it (under --cluster the key is a secret "
                   "on a shared file system; only a read-only mount such as a Kubernetes secret "
                   "volume may give its group read access)");
}

}  // namespace gossiptrain::apps
