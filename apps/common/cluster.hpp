// gossip-peer --cluster slurm|k8s: a peer learns its place in the swarm (shard, shards, port,
// advertised address, seeds, run folder) from the environment of the engine that started it.
// Pure parsers plus one function that fills a PeerConfig; explicit flags always win.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gossiptrain::apps {

struct PeerConfig;
template <class Config>
struct Option;

// The environment, as a lookup (std::getenv in the program, a map in the tests).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// SLURM's hostlist syntax: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5. Zero
// padding of the range's first bound is kept. Throws std::invalid_argument on bad syntax, a
// reversed range or more than kMaxClusterNodes names.
inline constexpr std::size_t kMaxClusterNodes = 100000;
std::vector<std::string> expand_hostlist(const std::string& list);

// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1. Throws std::invalid_argument.
std::vector<int> expand_tasks_per_node(const std::string& spec);

// A StatefulSet pod name "NAME-3" -> 3 (and NAME in *set_name). Throws std::invalid_argument
// when the name does not end in -ORDINAL.
int statefulset_ordinal(const std::string& pod_name, std::string* set_name = nullptr);

// Where a peer stands, as the engine placed it.
struct ClusterPlace {
  int shard = 0;
  int num_shards = 1;
  int port = 0;
  std::string host;                // the address others dial (node name or pod DNS name)
  std::vector<std::string> seeds;  // HOST:PORT of the first few tasks or pods, this one excluded
  std::string run_dir;             // the shared run folder
  std::string peer_dir;            // run_dir/peerN: metrics, checkpoints, identity
};

// The flags of --cluster that the environment may stand in for.
struct ClusterFlags {
  std::string kind;         // slurm | k8s
  int base_port = 0;        // --base-port: SLURM adds SLURM_LOCALID (0: slurm_job_base_port of
                            // the job id under SLURM, kK8sBasePort in a StatefulSet)
  std::string run_dir;      // --run-dir, else GT_RUN_DIR, else the engine's default
  std::string k8s_service;  // --k8s-service, else GT_K8S_SERVICE
  int k8s_replicas = 0;     // --k8s-replicas, else GT_K8S_REPLICAS (0: not given)
  int seed_count = 0;       // --cluster-seeds, else as gossip-launch (seed_count of the size)
  std::string advertise_interface;  // --advertise-interface IFNAME: its address, not the host name
};

// --advertise-interface: c.advertise becomes IFNAME's address and port (the listen port, or the
// cluster's). Throws UsageError for an interface without a dialable address, naming those with one.
struct PeerConfig;
void apply_advertise_interface(PeerConfig& c, int port);

// A StatefulSet's pods each have their own address: one port for all of them.
inline constexpr int kK8sBasePort = 7000;
// Under SLURM without --base-port: a base port derived from the job id, so that two jobs on one
// node listen on different ports (10000 + 64 * (job id mod 350): below Linux's ephemeral range,
// room for 64 tasks per node; jobs whose ids differ by a multiple of 350 share it).
int slurm_job_base_port(long long job_id);

// The same number of seeds gossip-launch gives a swarm of n peers.
int cluster_seed_count(int peers);

// Under SLURM: shard = SLURM_PROCID, shards = SLURM_NTASKS, port = base + SLURM_LOCALID, host =
// this task's node (block distribution over SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE), seeds =
// the first tasks, run folder = --run-dir, GT_RUN_DIR or $SLURM_SUBMIT_DIR/gossip-$SLURM_JOB_ID.
// In a StatefulSet: shard = the ordinal of HOSTNAME, shards = the replicas, seeds =
// NAME-0..k-1.SERVICE. Throws UsageError naming the variable that is missing or inconsistent.
ClusterPlace slurm_place(const EnvLookup& env, const ClusterFlags& f);
ClusterPlace k8s_place(const EnvLookup& env, const ClusterFlags& f);

// Fills c from the engine's environment where the flags in `given` (names without "--") did not
// set a value: shard, num-shards, listen, advertise, seeds, metrics, checkpoint-dir, identity.
// Refuses (UsageError) a --network-key file that group or others may read. Creates the peer's
// folder. No-op when c's cluster is empty.
void apply_cluster(PeerConfig& c, const std::set<std::string>& given, const EnvLookup& env);

// Under --cluster the network key is a secret on a shared file system: refused (UsageError) when
// others may read it, or its group where the file is not on a read-only mount (a Kubernetes
// secret volume with fsGroup is 0640 and read-only: accepted, logged).
void check_cluster_key(const std::string& path);

// --cluster and its flags, appended to gossip-peer's table; --churn too (apps/peer_churn).
void add_cluster_options(std::vector<Option<PeerConfig>>& options);

// The flag names (without "--") given on a command line, for apply_cluster.
std::set<std::string> given_flags(const std::vector<std::string>& args);

}  // namespace gossiptrain::apps
