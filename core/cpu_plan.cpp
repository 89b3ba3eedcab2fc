#include "core/cpu_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  const std::string why = limit.empty() ? "" : " (" + limit + ")";
  const std::string threads =
      std::to_string(blas_threads) + (blas_threads == 1 ? " BLAS thread" : " BLAS threads");
  if (compute.empty() && net.empty())
    return "threads unpinned" + (blas_threads > 0 ? ", " + threads : "") + why;
  return "training on cores " + ranges(compute) + " (" + threads + "), network on cores " +
         ranges(net) + why;
}

namespace {

// A non-negative decimal that fits an int64, the whole text; else -1.
long long whole_number(const std::string& t) {
  if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(t);
}

int quota_cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return -1;
  return int(std::max(1LL, std::min<long long>((quota + period - 1) / period, 1 << 20)));
}

std::string read_small(const std::filesystem::path& p, bool* ok) {
  std::ifstream in(p);
  std::string s;
  *ok = bool(in) && bool(std::getline(in, s));
  return s;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

int parse_cpu_max(const std::string& text) {
  std::istringstream in(trimmed(text));
  std::string quota, period, rest;
  if (!(in >> quota >> period) || (in >> rest)) return -1;
  const long long p = whole_number(period);
  if (p <= 0) return -1;
  if (quota == "max") return 0;
  return quota_cpus(whole_number(quota), p);
}

int parse_cfs_quota(const std::string& quota, const std::string& period) {
  const std::string q = trimmed(quota);
  const long long p = whole_number(trimmed(period));
  if (p <= 0) return -1;
  if (q == "-1") return 0;
  return quota_cpus(whole_number(q), p);
}

CpuQuota cgroup_cpu_quota(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  namespace fs = std::filesystem;
  const fs::path root(cgroup_root);
  // Candidate folders: each hierarchy's root (a container's own cgroup), then the process's
  // cgroup in it and every parent. v2: ROOT (or ROOT/unified); v1: ROOT/<the cpu controller>.
  std::vector<std::pair<fs::path, bool>> dirs;  // folder, is v2
  auto with_parents = [&](const fs::path& base, std::string rel, bool v2) {
    dirs.emplace_back(base, v2);
    while (!rel.empty() && rel != "/") {
      dirs.emplace_back(base / rel.substr(1), v2);
      const auto slash = rel.rfind('/');
      rel = slash == std::string::npos ? "" : rel.substr(0, slash);
    }
  };
  std::ifstream in(proc_self_cgroup);
  std::string line;
  bool any = false;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; v2's is "0::PATH".
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    if (ctrls.empty()) {
      with_parents(root, path, true);
      with_parents(root / "unified", path, true);
      any = true;
    } else {
      std::stringstream cs(ctrls);
      for (std::string c; std::getline(cs, c, ',');)
        if (c == "cpu") {
          with_parents(root / ctrls, path, false);
          if (ctrls != "cpu") with_parents(root / "cpu", path, false);
          any = true;
        }
    }
  }
  if (!any) {
    dirs.emplace_back(root, true);
    dirs.emplace_back(root / "cpu", false);
  }
  CpuQuota best;
  for (const auto& [dir, v2] : dirs) {
    bool ok = false, ok2 = false;
    int cpus = -1;
    std::string file;
    if (v2) {
      file = (dir / "cpu.max").string();
      const std::string t = read_small(file, &ok);
      if (ok) cpus = parse_cpu_max(t);
    } else {
      file = (dir / "cpu.cfs_quota_us").string();
      const std::string q = read_small(file, &ok);
      const std::string p = read_small(dir / "cpu.cfs_period_us", &ok2);
      if (ok && ok2) cpus = parse_cfs_quota(q, p);
    }
    if (cpus > 0 && (best.cpus == 0 || cpus < best.cpus)) best = {cpus, file};
  }
  return best;
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

CpuPlan plan_cpus_within(const std::vector<int>& allowed, const CpuQuota& quota, int net_cores,
                         int blas_threads, bool blas_fixed, const std::vector<int>& core_of) {
  const int n = int(allowed.size());
  const bool capped = quota.cpus > 0 && quota.cpus < n;
  if (capped && net_cores < 0)
    net_cores = quota.cpus < kPinFromCores ? 0 : std::max(2, quota.cpus / 8);
  CpuPlan p = plan_cpus(allowed, net_cores, blas_threads, core_of);
  const std::string cores = std::to_string(n) + (n == 1 ? " core" : " cores") + " allowed";
  if (!capped) {
    p.limit = cores + (quota.cpus > 0 ? ", CPU quota " + std::to_string(quota.cpus) + " in " +
                                            quota.from
                                      : ", no CPU quota");
    return p;
  }
  const std::string q = "CPU quota " + std::to_string(quota.cpus) +
                        (quota.cpus == 1 ? " CPU" : " CPUs") + " in " + quota.from + ", of " + cores;
  if (blas_threads == 0 && !blas_fixed) {
    // The network's pinned cores count against the quota too.
    const int room = std::max(1, quota.cpus - int(p.net.size()));
    p.blas_threads = p.blas_threads == 0 ? room : std::min(p.blas_threads, room);
    p.limit = q;
  } else {
    p.limit = q + (blas_threads == 0 ? "; the BLAS count is OPENBLAS_NUM_THREADS'" : "");
  }
  return p;
}

}  // namespace gossiptrain::core
