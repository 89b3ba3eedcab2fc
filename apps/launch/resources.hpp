// gossip-launch's resource plan, made before anything starts: how many threads each peer gets
// on this machine's cores, how much memory the run needs against what is available, and whether
// the file descriptor limit is enough. A run that cannot fit is refused (UsageError, exit code 2)
// with the figure and the --peers that would fit.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

// The memory of one peer, in MB, from measured components (docs/tuning.md, "A hundred
// peers on one machine"): the process itself (code, libraries, heap, stacks), the shard and the
// test set as float32, and the model's buffers (parameters, optimizer state, gradients,
// activations, snapshot and received messages, checkpoint copies).
struct PeerMemory {
  double base_mb = 0;
  double shard_mb = 0;  // the largest shard of this run's partition
  double test_mb = 0;
  double model_mb = 0;
  double total_mb() const { return base_mb + shard_mb + test_mb + model_mb; }
};

struct ResourcePlan {
  int peers = 0;
  unsigned cores = 1;
  unsigned blas_threads = 1;  // OPENBLAS_NUM_THREADS per peer (the user's, when set)
  bool blas_from_env = false;
  PeerMemory peer;
  double launcher_mb = 0;
  double need_mb = 0;       // the whole run
  double available_mb = 0;  // what it may use
  std::string available_from;
  bool fits = true;
  int peers_that_fit = 0;  // the largest --peers whose estimate fits (0: none)
  long fd_need = 0;        // per process (launcher or peer)
  long fd_soft = 0, fd_hard = 0;
  bool fd_raised = false;  // the soft limit was raised to fd_need
};

// OPENBLAS_NUM_THREADS for each of n peers on this machine: an equal share of the cores, at
// least 1 (the cores this process may run on, sched_getaffinity, or fewer: the cgroup's CPU
// quota in whole CPUs, core::cgroup_cpu_quota, as in a container with a CPU limit).
unsigned blas_threads_per_peer(int n);
unsigned usable_cores();

// Memory a process may use: GOSSIPTRAIN_MEM_LIMIT_MB when set (an artificial limit, for tests),
// else the lower of MemAvailable (/proc/meminfo) and the cgroup's memory.max less its current
// use. `from` says which.
double available_memory_mb(std::string* from);

// The plan for this run (o as parsed; it plans the peers' flags to read the model, batch,
// optimizer, data and partition). Raises RLIMIT_NOFILE's soft limit when it is too low and the
// hard limit allows. Throws UsageError for a run that cannot fit (memory, file descriptors).
ResourcePlan plan_resources(const LaunchOptions& o);

// Every peer's split of the training set, as it will make it (its --data, --partition,
// --num-shards and --seed): UsageError naming the partition when one is impossible (classes:K
// with K above the data's classes, a label no shard holds, more shards than samples...), so that
// the launch is refused before any run folder or process exists.
void check_partitions(const std::vector<PeerPlan>& plans);

// One line for the user: threads chosen, the memory estimate against what is available, fds.
std::string describe(const ResourcePlan& p);

}  // namespace gossiptrain::apps
