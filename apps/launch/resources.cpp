#include "apps/launch/resources.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "apps/common/options.hpp"
#include "core/cpu_plan.hpp"
#include "core/dataset.hpp"
#include "core/model.hpp"
#include "core/partition.hpp"

namespace gossiptrain::apps {
namespace {

constexpr double kMB = 1e6;

// Measured on this machine (docs/tuning.md, "A hundred peers on one machine"): the resident
// memory of a gossiping peer that is not its data or its model's buffers, over the run (code and
// libraries, heap, the network thread's stack, spdlog, the membership view of 128 peers).
constexpr double kPeerBaseMb = 24.0;
// A peer that loads the CUDA backend module maps cuBLAS: its libraries' writable data is about
// 86 MB per process (private, anonymous; /proc/PID/smaps). A --backend cpu peer never loads it.
#ifdef GT_HAVE_CUDA
constexpr double kCudaLibsMb = 86.0;
#else
constexpr double kCudaLibsMb = 0.0;
#endif
// The launcher's own: code, one metrics tail and table row per peer.
constexpr double kLauncherBaseMb = 20.0;
constexpr double kLauncherPerPeerMb = 0.5;
// The estimate must leave this share of the available memory free (the estimate's error, the
// page cache the peers' files need, the rest of the machine).
constexpr double kHeadroom = 0.9;

// Copies of the parameter vector a peer holds at most: parameters, gradients, the optimizer's
// state (1 for SGD momentum, 2 for Adam), the snapshot's messages, the partner's received
// messages, the received-buffer pool (at most 2 vectors), the checkpoint's copy (parameters and
// optimizer state).
double model_copies(core::Optimizer optimizer) {
  const double opt = optimizer == core::Optimizer::Adam ? 2 : 1;
  return 1 + 1 + opt + 1 + 1 + 2 + (1 + opt);
}

PeerMemory peer_memory(const PeerConfig& c, std::size_t largest_shard, std::size_t test_rows,
                       int features) {
  PeerMemory m;
  m.base_mb = kPeerBaseMb + (c.backend == kernels::BackendKind::Cpu ? 0.0 : kCudaLibsMb);
  const double row = double(features) * 4 + 4;  // float32 image and int32 label
  m.shard_mb = double(largest_shard) * row / kMB;
  m.test_mb = double(test_rows) * row / kMB;
  // Per sample: the input, each layer's output and its gradient; and the im2col buffer (k * k *
  // in_c values per output position, within core::kIm2colBudget). Parameters: the layers' own (a
  // CNN's are far fewer than its layer sizes would make a dense net's).
  const std::vector<core::Layer> layers = core::parse_model_layers(c.train.model);
  const double params = double(core::param_count(layers));
  double acts = double(layers.front().in_size()), cols = 0;
  for (const core::Layer& l : layers) {
    acts += 2.0 * double(l.out_size());
    if (l.kind == core::LayerKind::Conv) cols = std::max(cols, double(l.in) * l.positions());
  }
  const double batch = std::max(c.train.batch, 500);  // the evaluation batch is 500
  const double col_floats = std::min(batch * cols, double(core::kIm2colBudget));
  m.model_mb = (params * model_copies(c.train.optimizer) + batch * acts + col_floats) * 4 / kMB;
  return m;
}

// The largest shard of each split into n (the partition is the peers' own, from the labels).
// The run's own split is checked first (check_partitions); a smaller one the search for a run
// that fits tries may be impossible, and the estimate falls back to an equal share.
std::size_t largest_shard(const core::DatasetLabels& l, int n, const core::PartitionSpec& partition,
                          std::uint64_t seed) {
  try {
    const auto parts = core::partition(l.train, l.classes, n, partition, seed);
    std::size_t m = 0;
    for (const auto& p : parts) m = std::max(m, p.size());
    return m;
  } catch (const std::invalid_argument&) {
    return (l.train.size() + std::size_t(n) - 1) / std::size_t(n);
  }
}

double read_number_file(const std::string& path, bool* ok) {
  std::ifstream in(path);
  std::string s;
  *ok = false;
  if (!(in >> s) || s == "max") return 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  *ok = end && *end == '\0' && v >= 0;
  return v;
}

// The file descriptors one process of the run may hold: a peer's listener, its connections to
// the other peers (membership and exchanges, both directions; the transport caps them at 256
// plus 64 handshakes), its files; the launcher's metrics tails and the ports it holds at once.
long fd_need(int peers) {
  const long conns = std::min<long>(2L * peers, 256 + 64);
  return 64 + std::max<long>(conns, 2L * peers);
}

void plan_fds(ResourcePlan& p) {
  p.fd_need = fd_need(p.peers);
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  p.fd_soft = rl.rlim_cur == RLIM_INFINITY ? -1 : long(rl.rlim_cur);
  p.fd_hard = rl.rlim_max == RLIM_INFINITY ? -1 : long(rl.rlim_max);
  if (p.fd_soft < 0 || p.fd_soft >= p.fd_need) return;
  if (p.fd_hard >= 0 && p.fd_hard < p.fd_need)
    throw UsageError("--peers " + std::to_string(p.peers) + " needs " + std::to_string(p.fd_need) +
                     " open files per process, and the hard limit "
                     "(ulimit -Hn) is " +
                     std::to_string(p.fd_hard) + ": raise it, or run fewer peers");
  rl.rlim_cur = rlim_t(p.fd_need);  // inherited by the peers
  if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) {
    p.fd_raised = true;
    p.fd_soft = p.fd_need;
  }
}

std::string mb(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 10000 ? "%.1f GB" : "%.0f MB", v >= 10000 ? v / 1000 : v);
  return b;
}

}  // namespace

unsigned usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    n = unsigned(CPU_COUNT(&set));
  if (const core::CpuQuota q = core::cgroup_cpu_quota(); q.cpus > 0 && unsigned(q.cpus) < n)
    n = unsigned(q.cpus);
  return n;
}

unsigned blas_threads_per_peer(int n) {
  return std::max<unsigned>(1, usable_cores() / unsigned(std::max(1, n)));
}

double available_memory_mb(std::string* from) {
  if (const char* env = std::getenv("GOSSIPTRAIN_MEM_LIMIT_MB")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (!end || *end != '\0' || !(v > 0) || !std::isfinite(v))
      throw UsageError(std::string("GOSSIPTRAIN_MEM_LIMIT_MB must be a positive number of MB, "
                                   "got '") +
                       env + "'");
    *from = "GOSSIPTRAIN_MEM_LIMIT_MB";
    return v;
  }
  double avail = 0;
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") avail = kb * 1024 / kMB;
  }
  *from = "MemAvailable";
  bool ok_max = false, ok_cur = false;
  const double max = read_number_file("/sys/fs/cgroup/memory.max", &ok_max);
  const double cur = read_number_file("/sys/fs/cgroup/memory.current", &ok_cur);
  if (ok_max && ok_cur && max > cur && (max - cur) / kMB < avail) {
    avail = (max - cur) / kMB;
    *from = "the cgroup's memory.max";
  }
  return avail;
}

void check_partitions(const std::vector<PeerPlan>& plans) {
  struct Split {
    std::string data, partition;
    int shards;
    std::uint64_t seed;
    bool operator==(const Split&) const = default;
  };
  std::vector<Split> checked;
  std::vector<std::pair<std::string, core::DatasetLabels>> labels;  // by --data
  for (const PeerPlan& p : plans) {
    const PeerConfig& c = p.config;
    const Split split{c.data, c.partition, c.num_shards, c.train.seed};
    if (std::find(checked.begin(), checked.end(), split) != checked.end()) continue;
    checked.push_back(split);
    auto l = std::find_if(labels.begin(), labels.end(), [&](const auto& x) { return x.first == c.data; });
    if (l == labels.end()) {
      try {
        labels.emplace_back(c.data, core::load_labels(c.data));
      } catch (const core::DataError& e) {
        throw UsageError(e.what());
      }
      l = labels.end() - 1;
    }
    try {
      core::partition(l->second.train, l->second.classes, c.num_shards, c.partition_spec,
                      c.train.seed);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--partition " + c.partition + " cannot split " + c.data + " (" +
                       std::to_string(l->second.classes) + " classes) over " +
                       std::to_string(c.num_shards) + " shards" +
                       (p.index == 0 ? "" : " (peer " + std::to_string(p.index) + "'s flags)") +
                       ": " + e.what());
    }
  }
}

ResourcePlan plan_resources(const LaunchOptions& o) {
  ResourcePlan p;
  p.peers = o.slots();
  p.cores = usable_cores();
  p.blas_from_env = std::getenv("OPENBLAS_NUM_THREADS") != nullptr;
  p.blas_threads = p.blas_from_env
                       ? unsigned(std::max(1, std::atoi(std::getenv("OPENBLAS_NUM_THREADS"))))
                       : blas_threads_per_peer(p.peers);
  // Peer 0's flags as gossip-peer will read them (model, batch, optimizer, data, partition).
  const auto plans = plan_peers(o, "run", std::vector<int>(std::size_t(p.peers), 1), "");
  check_partitions(plans);
  const PeerConfig& c = plans.at(0).config;
  core::DatasetLabels labels;
  try {
    labels = core::load_labels(c.data);
  } catch (const core::DataError& e) {
    throw UsageError(e.what());
  }
  auto estimate = [&](int n, PeerMemory* pm) {
    const PeerMemory m = peer_memory(c, largest_shard(labels, n, c.partition_spec, c.train.seed),
                                     labels.test_rows, labels.features);
    if (pm) *pm = m;
    return n * m.total_mb() + kLauncherBaseMb + n * kLauncherPerPeerMb;
  };
  p.need_mb = estimate(p.peers, &p.peer);
  p.launcher_mb = kLauncherBaseMb + p.peers * kLauncherPerPeerMb;
  p.available_mb = available_memory_mb(&p.available_from);
  const double usable = kHeadroom * p.available_mb;
  p.fits = p.need_mb <= usable;
  // The largest run that fits: more peers, smaller shards, so search down from --peers.
  p.peers_that_fit = p.fits ? p.peers : 0;
  for (int n = p.peers - 1; !p.fits && n >= 1; n = n > 64 ? n - std::max(1, n / 32) : n - 1)
    if (estimate(n, nullptr) <= usable) {
      p.peers_that_fit = n;
      break;
    }
  if (!p.fits) {
    const std::string hint = p.peers_that_fit > 0
                                 ? "--peers " + std::to_string(p.peers_that_fit) + " would fit"
                                 : "not even one peer fits";
    throw UsageError("this run needs about " + mb(p.need_mb) + " of memory (" +
                     std::to_string(p.peers) + " peers x " + mb(p.peer.total_mb()) +
                     " + the launcher) and " + mb(usable) + " may be used (90% of " +
                     mb(p.available_mb) + ", " + p.available_from + "): " + hint);
  }
  plan_fds(p);
  return p;
}

std::string describe(const ResourcePlan& p) {
  std::ostringstream s;
  s << "gossip-launch: " << p.peers << " peer" << (p.peers == 1 ? "" : "s") << " on " << p.cores
    << " core" << (p.cores == 1 ? "" : "s") << ": " << p.blas_threads << " OpenBLAS thread"
    << (p.blas_threads == 1 ? "" : "s") << " per peer"
    << (p.blas_from_env ? " (OPENBLAS_NUM_THREADS)" : "")
    << " + 1 network thread (asleep between messages); memory estimate " << mb(p.need_mb)
    << " (per peer " << mb(p.peer.total_mb()) << ": process " << mb(p.peer.base_mb) << ", shard "
    << mb(p.peer.shard_mb) << ", test set " << mb(p.peer.test_mb) << ", model buffers "
    << mb(p.peer.model_mb) << ") of " << mb(p.available_mb) << " available (" << p.available_from
    << "); open files " << p.fd_need << " needed per process, limit "
    << (p.fd_soft < 0 ? std::string("unlimited") : std::to_string(p.fd_soft))
    << (p.fd_raised ? " (raised)" : "");
  return s.str();
}

}  // namespace gossiptrain::apps
