// Which cores a peer's threads run on. A gossiping peer has two kinds of work on one machine:
// training (the BLAS pool's threads, which run a matrix product in lockstep, so one stalled thread
// stalls them all) and the network (the transport's io thread and its crypto workers, which take
// a core each while an exchange is in flight). On a machine with enough cores the plan keeps a few
// of them for the network and pins each kind to its own, so that an exchange never stalls a
// product; on a small machine nothing is pinned and thread priorities (--train-nice, --net-nice)
// decide. docs/ARCHITECTURE.md, "Threads and cores", gives the measurements behind the defaults.
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
  std::string describe() const;
};

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
