#include "core/cpu_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

namespace gossiptrain::core {

namespace {

std::string ranges(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(v[i]);
    if (j > i) s += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace

std::string CpuPlan::describe() const {
  if (compute.empty() && net.empty())
    return "threads unpinned" +
           (blas_threads > 0 ? ", " + std::to_string(blas_threads) + " BLAS threads" : "");
  return "training on cores " + ranges(compute) + " (" + std::to_string(blas_threads) +
         " BLAS threads), network on cores " + ranges(net);
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
#endif
  if (out.empty()) {
    const int n = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int c = 0; c < n; ++c) out.push_back(c);
  }
  return out;
}

std::vector<int> physical_cores(const std::vector<int>& cpus) {
  std::vector<int> out;
  for (int c : cpus) {
    int core = c;
    std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(c) +
                     "/topology/thread_siblings_list");
    // "3,11" or "3-4" or "3": the smallest sibling names the core.
    if (int first = -1; in >> first && first >= 0) core = first;
    out.push_back(core);
  }
  return out;
}

CpuPlan plan_cpus(const std::vector<int>& allowed, int net_cores, int blas_threads,
                  const std::vector<int>& core_of) {
  const int n = int(allowed.size());
  if (net_cores < 0) net_cores = n < kPinFromCores ? 0 : std::max(2, n / 8);
  if (net_cores >= n)
    throw std::invalid_argument("--net-cores " + std::to_string(net_cores) + " leaves none of the " +
                                std::to_string(n) + " usable cores for training");
  if (blas_threads < 0) throw std::invalid_argument("--compute-threads must be >= 0");
  CpuPlan p;
  p.blas_threads = blas_threads;
  if (net_cores == 0) return p;
  // The network takes the last physical cores, whole: the first ones are where the kernel tends to
  // put interrupts and where other processes start.
  auto core = [&](int i) { return core_of.size() == allowed.size() ? core_of[i] : allowed[i]; };
  std::vector<int> order;  // physical cores from the last, in order of first appearance
  for (int i = n; i-- > 0;)
    if (std::find(order.begin(), order.end(), core(i)) == order.end()) order.push_back(core(i));
  for (int phys : order) {
    if (int(p.net.size()) >= net_cores) break;
    for (int i = 0; i < n; ++i)
      if (core(i) == phys) p.net.push_back(allowed[i]);
  }
  for (int c : allowed)
    if (std::find(p.net.begin(), p.net.end(), c) == p.net.end()) p.compute.push_back(c);
  std::sort(p.net.begin(), p.net.end());
  if (p.compute.empty())
    throw std::invalid_argument("--net-cores " + std::to_string(net_cores) +
                                " takes every physical core; none is left for training");
  if (p.blas_threads == 0) p.blas_threads = int(p.compute.size());
  return p;
}

}  // namespace gossiptrain::core
