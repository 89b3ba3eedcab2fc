// gossip-launch's configuration: its own flags, the peer flags it forwards, and the argv of every
// peer it starts (ports, seeds, shard, per-peer files), checked up front with the peer's own parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "core/churn/scenario.hpp"

namespace gossiptrain::apps {

// Fedavg: slot 0 is a FedAvg server, slots 1..N its clients on shards 0..N-1 (launch_fedavg.cpp).
enum class LaunchMode { Gossip, Local, Central, Fedavg };
const char* mode_name(LaunchMode m);

struct LaunchOptions {
  LaunchMode mode = LaunchMode::Gossip;
  int peers = 3;
  int peers_requested = 3;  // what --peers said (central runs one peer whatever it says)
  std::string out;          // run folder; empty: runs/<mode>-<partition>-<N>p-<timestamp>
  int base_port = 0;        // 0: free ports picked by binding port 0
  double target_acc = 0.85;
  double stop_timeout_s = 15.0;  // SIGTERM -> SIGKILL grace on stop
  double consensus_every_s = 5.0;
  bool plots = true;
  std::string peer_bin;     // empty: gossip-peer next to this executable
  // Forwarded peer flags, as given ("--name", "value" pairs, --name=value split up).
  std::vector<std::string> forward;
  // --peer-flags I:--name=value: flags for peer I only, after the forwarded ones (an experiment
  // with one peer unlike the others: --lr, --fault).
  std::vector<std::pair<int, std::vector<std::string>>> peer_flags;
  // Peer flags the launcher reads as well as forwarding.
  std::string partition = "iid";
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string network_key;  // user's; empty: the launcher writes one into the run folder
  std::string blas_core = "auto";  // the peers' --blas-core, decided once here for all of them
  std::uint64_t seed = 1;
  // --churn FILE.json or shorthand, checked whole before anything starts.
  std::optional<core::ChurnScenario> churn;
  std::string churn_arg;
  // --netns: every peer in its own network namespace at its own address (root); needed by the
  // scenario's partition and link events. --cleanup: remove what a killed launcher left.
  bool netns = false;
  bool cleanup = false;
  // --gpus 0,1,...: peer i runs on CUDA device gpus[i % size] (--device); empty: each peer's own
  // --device (default 0).
  std::vector<int> gpus;
  // Observability (docs/peer.md, "Watching a run"): peer i serves /metrics on
  // 127.0.0.1:prometheus_base_port + i (0: off) and the run folder gets prometheus.yml; every peer
  // writes TensorBoard event files under run/tensorboard/peerI; the swarm's model (the average of
  // the peers that finished) is exported to run/swarm/model.safetensors and evaluated once.
  int prometheus_base_port = 0;
  bool tensorboard = false;
  bool export_model = false;
  // Peer slots: --peers plus the peers the churn scenario joins (they get shards of their own).
  int slots() const { return churn ? core::total_peers(*churn) : peers; }
  // --report DIR: the summary, table and plots of the peers' metrics files found under DIR
  // (apps/launch/report.hpp), written to --out (default DIR).
  std::string report;
  // --ended-by SIGNAL (with --report): what ended the run, as the engine's script saw it (the
  // sbatch script's trap: SIGTERM on scancel or the time limit); summary.json "ended_by".
  std::string ended_by;
  // --compare mode.
  std::vector<std::string> compare;
  bool markdown = false;
  bool help = false;
  // --resume DIR: the run of that folder again, from its command.txt, the peers restarting from
  // their checkpoints with the same keys and shards (out is then DIR).
  std::string resume;
};

// The words of a command line as gossip-launch writes command.txt (plain words and POSIX single
// quotes, '\'' for a quote). Throws UsageError on an unterminated quote.
std::vector<std::string> shell_split(const std::string& line);

// Parses argv (without argv[0]). Throws UsageError (exit code 2) on bad or owned flags.
LaunchOptions parse_launch_args(const std::vector<std::string>& args);
std::string launch_usage();
// With --gpus: a note on how the peers are spread, and a warning when several share one GPU;
// empty without --gpus.
std::string gpu_plan_note(const LaunchOptions& o);

// With --netns every peer listens on this port of its own address.
inline constexpr int kNetnsPort = 7000;

struct PeerPlan {
  int index = 0;
  std::string dir;       // run/peerI
  std::string listen;    // empty in local/central mode
  std::string advertise;  // with --netns: the peer's own address
  std::vector<std::string> seeds;
  std::vector<std::string> argv;  // without the program name
  PeerConfig config;     // argv as gossip-peer will read it
};

// How many of the first peers act as seeds (in gossip mode): the others name them all, and they
// start first. 2 below 16 peers, then 4 and one more per 64 peers, at most 8.
int seed_count(int peers);

// Builds every peer's argv for the run folder and the given listen ports (one per peer, unused
// outside gossip mode), and validates each with gossip-peer's parser. Throws UsageError.
std::vector<PeerPlan> plan_peers(const LaunchOptions& o, const std::string& run_dir,
                                 const std::vector<int>& ports, const std::string& network_key);
// The flags every launched peer i gets from the launch, whatever the mode, appended to a: the
// forwarded peer flags, its own --peer-flags, the run's network key unless the user gave one, and
// its GPU.
void append_launch_flags(std::vector<std::string>& a, const LaunchOptions& o, int i,
                         const std::string& network_key);
// plan_peers in fedavg mode: peer0 is the server (listening on ports[0]), peers 1..N the clients
// on the shards 0..N-1 that N gossip peers would have.
std::vector<PeerPlan> plan_fedavg(const LaunchOptions& o, const std::string& run_dir,
                                  const std::vector<int>& ports, const std::string& network_key);
// The flags a restarted or joining FedAvg peer i gets after its plan's (gossip-launch --churn).
std::vector<std::string> fedavg_restart_args(int i);

}  // namespace gossiptrain::apps
