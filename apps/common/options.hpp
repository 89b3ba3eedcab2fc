// The peer's configuration: every gossip-peer flag (docs/peer.md, "gossip-peer"), the
// same keys in a --config JSON file, validation with messages that name the flag, and --help.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/common/cluster.hpp"
#include "apps/common/option_table.hpp"
#include "core/partition.hpp"
#include "core/trainer.hpp"
#include "gossip/node/node.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::apps {

// --catch-up: a peer with no checkpoint that finds live members fetches one's state before its
// first step (Auto), or starts from its own initial weights (Off).
enum class CatchUpMode { Auto, Off };
void from_string(std::string_view text, CatchUpMode& out);  // throws std::invalid_argument

inline constexpr int kDefaultNetNice = 0;
// --linger when the peer gossips (it has seeds or listens); 0 when it trains alone.
inline constexpr double kDefaultLingerS = 10.0;

// gossip::RobustConfig as gossip-peer defaults it: clipped mixing, far partners clipped.
inline gossip::RobustConfig peer_robust_defaults() {
  gossip::RobustConfig r;
  r.mix = gossip::MixMode::Clipped;
  r.suspect_clip = true;
  return r;
}

// gossip::NodeConfig as gossip-peer defaults it, where its flags' defaults differ from the
// gossip layer's: an exchange every 4 steps, robust mixing, int8 with slow links, lingering
// until the partners are within 0.01, a schedule that does not wait for exact passes.
inline gossip::NodeConfig peer_node_defaults() {
  gossip::NodeConfig n;
  n.averager.gossip_every = 4;
  n.averager.robust = peer_robust_defaults();
  n.averager.slow_link_wire = gossip::WireFormat::Int8;
  n.averager.settle_distance = 0.01;
  n.averager.choice.exact_passes = false;  // training: a pass is never exact (partner_choice.hpp)
  return n;
}

// FedAvg's flags (apps/fedavg/fedavg.hpp): a server, or a client of one, instead of gossip.
struct FedAvgOptions {
  bool server = false;          // --fedavg-server
  std::string server_addr;      // --fedavg-server-addr: run as a client of this server
  int rounds = 10;              // --rounds
  double clients_per_round = 1.0;  // --clients-per-round: a count (>= 1) or a fraction (< 1)
  bool clients_fraction = true;    // clients_per_round is a fraction (default: all of them)
  int local_epochs = 1;            // --local-epochs
  std::int64_t local_steps = 0;    // --local-steps: instead of epochs
  double fedprox_mu = 0.0;         // --fedprox-mu
  double server_momentum = 0.0;    // --server-momentum (FedAvgM)
  double round_timeout_s = 600.0;  // --round-timeout
  int min_clients = 1;             // --min-clients
  double min_clients_timeout_s = 120.0;
  double client_wait_s = 60.0;  // --fedavg-wait: a client retries a lost server this long
  bool enabled() const { return server || !server_addr.empty(); }
};

struct PeerConfig {
  core::TrainConfig train;
  FedAvgOptions fedavg;
  std::string listen = "127.0.0.1:0";
  std::string advertise;  // address others dial; default: the listen address
  std::string identity = "gossip-peer.key";
  std::string network_key;
  std::string allowlist;
  std::string data = "/usr/share/datasets/fashion-mnist";  // a directory, or "synthetic"
  std::string partition = "iid";       // --partition as given (for the metrics and the log)
  core::PartitionSpec partition_spec;  // the same, parsed once by the flag table
  int num_shards = 1;
  int shard = 0;
  kernels::BackendKind backend = kernels::BackendKind::Auto;
  int device = 0;                  // CUDA device number
  int net_cores = -1;              // cores kept for the network (core::plan_cpus); -1: auto
  int compute_threads = 0;         // BLAS threads; 0: auto
  std::string blas_core = "auto";  // --blas-core: auto | keep | an OpenBLAS core (apps/common_blas)
  kernels::Precision precision = kernels::Precision::Fp32;  // --precision
  // The gossip node's configuration, each gossip flag parsed into its field once and handed to
  // gossip::Node as it is (node_config.hpp adds the model's fingerprint and the checkpoint
  // folder): --seeds (membership); --gossip-every, --wire to --slow-link-wire, --weighting, --mix
  // to --ban, --partner-choice, --fault, --max-rate, --linger-settle (averager); --max-lag,
  // --max-lag-share, --max-ahead and --outer-* (node). Robust mixing is clipped by default, no
  // number needed from the user, and a far partner clipped rather than refused (refusing bans
  // honest restarted peers).
  gossip::NodeConfig node = peer_node_defaults();
  std::string fault_spec;  // the --fault value as given, for the warning
  double linger_s = -1.0;    // serve exchanges after training; <0: kDefaultLingerS with gossip, else 0
  // --linger-heal: after the linger, while a partition is possible (gossip::DeadCount), linger on
  // up to this long for the silent members to come back; then --linger once more. 0: off.
  double linger_heal_s = 30.0;
  // The training thread's watchdog: no step, evaluation batch or wait for this long (or 50 times
  // the slowest gap seen) is a stall; 0: off. And a stop request must end the process in stop_grace_s.
  double stall_timeout_s = 120.0;
  double stop_grace_s = 10.0;
  CatchUpMode catch_up = CatchUpMode::Auto;  // --catch-up
  double catch_up_timeout_s = 60.0;    // then it gives up and starts from its own weights
  int min_peers = 1;                   // live members (itself included) to wait for before step 1
  double min_peers_timeout_s = 120.0;  // then it starts anyway, with a warning
  // Which of a peer's threads yields when they compete for the cores. By default neither. With
  // net_nice the network thread runs below training, so exchanges take the CPU that training
  // leaves; membership shares that thread, so on a loaded machine its probes may then be late
  // enough for others to suspect this peer (a 4-process test on 2 busy cores at 19 did). Several
  // peers on one machine (gossip-launch passes --net-nice 0 --train-nice 5): training runs below
  // the network thread, or exchanges starve behind the other peers' steps.
  int net_nice = kDefaultNetNice;
  int train_nice = 0;
  // Threads that seal and open the frames of large messages (net::CryptoPool); -1: the default,
  // net::default_crypto_threads(); 0 or 1: the network thread alone.
  int crypto_threads = -1;
  std::string metrics;
  // Observability and the model out (docs/peer.md, "Watching a run").
  std::string prometheus;       // HOST:PORT of /metrics and /healthz; empty: off
  std::string tensorboard;      // folder of TensorBoard event files; empty: off
  std::string export_path;      // FILE.safetensors: the model at the end of training
  std::string from_checkpoint;  // with export_path: export this checkpoint folder and exit
  std::string log_level = "info";
  ClusterFlags cluster;  // --cluster and its flags (apps/common/cluster.hpp)
  std::string churn;     // --churn FILE: this peer plays its own shard's events (apps/peer_churn)
  bool listen_given = false;
  // A peer gossips when it has seeds to join through, or listens so that others can join it.
  bool gossip_enabled() const { return !node.membership.seeds.empty() || listen_given; }
};

// Parses argv (without argv[0]). Throws UsageError. Sets *help when --help was given.
PeerConfig parse_peer_args(const std::vector<std::string>& args, bool* help);
std::string peer_usage();
// The table behind parse_peer_args, the --config keys and peer_usage, and peer_usage's headings.
const OptionTable<PeerConfig>& peer_options();
const std::vector<HelpGroup>& peer_help_groups();
// The FedAvg flags (options_fedavg.cpp), appended to gossip-peer's table, and their cross-checks
// against the rest (UsageError). The protocol they start is in apps/fedavg/.
void add_fedavg_options(std::vector<Option<PeerConfig>>& options);
void check_fedavg_options(const PeerConfig& c);

// An exchange send-rate cap in MB/s: 0 (none) or at least 20, the rate partners size their
// transfer deadlines on (gossip::AveragerConfig::min_rate_bytes_per_s); UsageError otherwise.
double to_max_rate_mb(const std::string& flag, const std::string& v);

}  // namespace gossiptrain::apps
