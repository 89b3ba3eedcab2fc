// Which cores a peer's threads run on. A gossiping peer has two kinds of work on one machine:
// training (the BLAS pool's threads, which run a matrix product in lockstep, so one stalled thread
// stalls them all) and the network (the transport's io thread and its crypto workers, which take
// a core each while an exchange is in flight). On a machine with enough cores the plan keeps a few
// of them for the network and pins each kind to its own, so that an exchange never stalls a
// product; on a small machine nothing is pinned and thread priorities (--train-nice, --net-nice)
// decide. docs/tuning.md, "Threads and cores", gives the measurements behind the defaults.
#pragma once

#include "base/thread.hpp"

#include <string>
#include <vector>

namespace gossiptrain::core {

// Below this many usable cores nothing is pinned by default.
inline constexpr int kPinFromCores = 8;

struct CpuPlan {
  std::vector<int> compute;  // cores of the training thread and the BLAS pool; empty: unpinned
  std::vector<int> net;      // cores of the io thread and crypto workers; empty: unpinned
  int blas_threads = 0;      // BLAS pool size; 0: leave the library's own choice
  std::string limit;         // which limit sized it (affinity, a cgroup's CPU quota); may be empty
  std::string describe() const;
};

// A cgroup's CPU quota in whole CPUs: quota over period, rounded up (150000 over 100000: 2), at
// least 1. A container limited with `--cpus 1` or a pod's `limits.cpu` has one; its affinity
// still shows every core of the node, so OpenBLAS would start a thread per core.
struct CpuQuota {
  int cpus = 0;      // 0: no quota
  std::string from;  // the file it came from
};

// cgroup v2's cpu.max: "QUOTA PERIOD" in microseconds, or "max PERIOD" (no quota: 0). Text that is
// neither (an empty file, a negative or zero number, words): -1.
int parse_cpu_max(const std::string& text);
// cgroup v1's cpu.cfs_quota_us (-1: no quota: 0) and cpu.cfs_period_us; -1 for bad text.
int parse_cfs_quota(const std::string& quota, const std::string& period);

// The smallest CPU quota over this process's cgroup and its parents, cgroup v2 (cpu.max) or v1
// (the cpu controller's cpu.cfs_quota_us): the cgroup paths from proc_self_cgroup, the files under
// cgroup_root; the roots themselves too (inside a container they are its own cgroup). Unreadable
// or malformed files are passed over; none: cpus 0.
CpuQuota cgroup_cpu_quota(const std::string& cgroup_root = "/sys/fs/cgroup",
                          const std::string& proc_self_cgroup = "/proc/self/cgroup");

// plan_cpus within a CPU quota: where quota.cpus is below the allowed cores, the automatic choices
// are made as on a machine of quota.cpus cores (net_cores -1: none pinned below kPinFromCores,
// else max(2, quota / 8); blas_threads 0: quota.cpus threads less the
// network's pinned cores, at least 1), unless blas_fixed (the
// count comes from OPENBLAS_NUM_THREADS or OMP_NUM_THREADS: left to the library). Explicit
// net_cores and blas_threads are kept. Sets limit to the limit that sized the plan.
CpuPlan plan_cpus_within(const std::vector<int>& allowed, const CpuQuota& quota, int net_cores,
                         int blas_threads, bool blas_fixed, const std::vector<int>& core_of = {});

// The cores this process may run on (its affinity mask, which taskset, cgroups and the launcher
// may have narrowed), ascending. Falls back to 0..hardware_concurrency-1 where unknown.
std::vector<int> allowed_cpus();

// The physical core of each cpu in cpus (hyperthreads of one core share the number), from
// /sys/devices/system/cpu/cpuN/topology; the cpu itself where unknown.
std::vector<int> physical_cores(const std::vector<int>& cpus);

// net_cores: cores (logical cpus) kept for the network; -1: automatic (none below kPinFromCores
// usable cores, else max(2, cores / 8)). 0: nothing pinned. The network gets whole physical cores
// (both hyperthreads), so that no BLAS thread shares a core with it. blas_threads: 0: one per
// compute cpu when pinned, else unchanged (the library's choice, or OPENBLAS_NUM_THREADS).
// core_of: physical_cores(allowed) (empty: every cpu its own core). Throws
// std::invalid_argument when net_cores leaves no core for training.
CpuPlan plan_cpus(const std::vector<int>& allowed, int net_cores, int blas_threads,
                  const std::vector<int>& core_of = {});

}  // namespace gossiptrain::core
