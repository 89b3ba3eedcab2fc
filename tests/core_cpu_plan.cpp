// The core plan of a gossiping peer (core/cpu_plan): which cores training and the network get.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu_plan.hpp"

using namespace gossiptrain;

namespace {
std::vector<int> iota(int n, int from = 0) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}
}  // namespace

TEST_CASE("cpu plan: nothing pinned on a small machine unless asked", "[core]") {
  const core::CpuPlan p = core::plan_cpus(iota(2), -1, 0);
  REQUIRE(p.compute.empty());
  REQUIRE(p.net.empty());
  REQUIRE(p.blas_threads == 0);
  REQUIRE(p.describe() == "threads unpinned");
  REQUIRE(core::plan_cpus(iota(4), -1, 3).blas_threads == 3);  // a user's count is kept
  const core::CpuPlan asked = core::plan_cpus(iota(4), 1, 0);
  REQUIRE(asked.net == std::vector<int>{3});
  REQUIRE(asked.compute == iota(3));
}

TEST_CASE("cpu plan: from 8 cores on, the network gets the last cores", "[core]") {
  const core::CpuPlan p16 = core::plan_cpus(iota(16), -1, 0);
  REQUIRE(p16.net == std::vector<int>{14, 15});
  REQUIRE(p16.compute == iota(14));
  REQUIRE(p16.blas_threads == 14);
  REQUIRE(p16.describe() == "training on cores 0-13 (14 BLAS threads), network on cores 14-15");
  REQUIRE(core::plan_cpus(iota(64), -1, 0).net.size() == 8);
  REQUIRE(core::plan_cpus(iota(16), 0, 0).compute.empty());  // 0: pin nothing
  // An affinity mask that skips cores (taskset, cgroups) is respected.
  const core::CpuPlan odd = core::plan_cpus({1, 3, 5, 7, 9, 11, 13, 15}, -1, 0);
  REQUIRE(odd.net == std::vector<int>{13, 15});
  REQUIRE(odd.compute == std::vector<int>{1, 3, 5, 7, 9, 11});
}

TEST_CASE("cpu plan: the network gets whole physical cores, never one hyperthread", "[core]") {
  // 8 physical cores with two hyperthreads each, numbered as Linux does: cpu i and i + 8.
  std::vector<int> core_of;
  for (int c = 0; c < 16; ++c) core_of.push_back(c % 8);
  const core::CpuPlan p = core::plan_cpus(iota(16), 2, 0, core_of);
  REQUIRE(p.net == std::vector<int>{7, 15});
  REQUIRE(p.compute.size() == 14);
  for (int c : p.compute) REQUIRE(c % 8 != 7);
  // 3 cpus asked: two whole cores (4 cpus).
  REQUIRE(core::plan_cpus(iota(16), 3, 0, core_of).net == std::vector<int>{6, 7, 14, 15});
}

TEST_CASE("cpu plan: refuses to leave training no core", "[core]") {
  REQUIRE_THROWS_AS(core::plan_cpus(iota(4), 4, 0), std::invalid_argument);
  std::vector<int> one_core = {0, 0};
  REQUIRE_THROWS_AS(core::plan_cpus({0, 1}, 1, 0, one_core), std::invalid_argument);
  REQUIRE_THROWS_AS(core::plan_cpus(iota(4), 1, -1), std::invalid_argument);
}

TEST_CASE("cpu plan: the allowed cpus and pinning this thread", "[core]") {
  const std::vector<int> allowed = core::allowed_cpus();
  REQUIRE_FALSE(allowed.empty());
  REQUIRE(core::physical_cores(allowed).size() == allowed.size());
  std::string err;
  REQUIRE(base::pin_this_thread({allowed.front()}, &err));
  REQUIRE(core::allowed_cpus() == std::vector<int>{allowed.front()});
  REQUIRE(base::pin_this_thread(allowed, &err));
  REQUIRE(core::allowed_cpus() == allowed);
}

namespace {
// A cgroup file system of our own: files written under a temporary folder.
struct FakeCgroups {
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("gt-cgroup-" + std::to_string(::getpid()));
  FakeCgroups() { std::filesystem::remove_all(root); }
  ~FakeCgroups() { std::filesystem::remove_all(root); }
  std::string put(const std::string& rel, const std::string& text) {
    const auto p = root / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};
}  // namespace

TEST_CASE("cpu quota: cgroup v2 cpu.max and v1 cfs files parsed to whole CPUs", "[core]") {
  REQUIRE(core::parse_cpu_max("max 100000\n") == 0);
  REQUIRE(core::parse_cpu_max("100000 100000\n") == 1);
  REQUIRE(core::parse_cpu_max("150000 100000") == 2);  // rounded up
  REQUIRE(core::parse_cpu_max("50000 100000") == 1);   // at least 1
  REQUIRE(core::parse_cpu_max("400000 100000\n") == 4);
  for (const char* bad : {"", "max", "100000", "-1 100000", "0 100000", "100000 0", "a b",
                          "100000 100000 7", "1e5 100000", "99999999999999999999 100000"})
    REQUIRE(core::parse_cpu_max(bad) == -1);
  REQUIRE(core::parse_cfs_quota("-1\n", "100000\n") == 0);
  REQUIRE(core::parse_cfs_quota("200000\n", "100000\n") == 2);
  REQUIRE(core::parse_cfs_quota("100000", "") == -1);
  REQUIRE(core::parse_cfs_quota("x", "100000") == -1);
}

TEST_CASE("cpu quota: the smallest of the process's cgroup and its parents, v2 or v1", "[core]") {
  FakeCgroups fs;
  const std::string proc = fs.put("proc-self-cgroup", "0::/kubepods/pod1/ctr\n");
  SECTION("v2: none anywhere") {
    fs.put("sys/cpu.max", "max 100000\n");
    fs.put("sys/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), proc).cpus == 0);
  }
  SECTION("v2: the container's, the pod's smaller one wins") {
    fs.put("sys/kubepods/pod1/ctr/cpu.max", "300000 100000\n");
    const std::string pod = fs.put("sys/kubepods/pod1/cpu.max", "100000 100000\n");
    fs.put("sys/kubepods/cpu.max", "max 100000\n");
    const core::CpuQuota q = core::cgroup_cpu_quota((fs.root / "sys").string(), proc);
    REQUIRE(q.cpus == 1);
    REQUIRE(q.from == pod);
  }
  SECTION("v2: inside a container, its own cgroup is the root; a bad file is passed over") {
    const std::string own = fs.put("sys/cpu.max", "200000 100000\n");
    fs.put("sys/kubepods/pod1/ctr/cpu.max", "garbage\n");
    const std::string ns = fs.put("proc-ns", "0::/\n");
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), ns).cpus == 2);
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), ns).from == own);
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), proc).cpus == 2);
  }
  SECTION("v1: the cpu controller's cfs quota (runc mounts the container's at the root)") {
    const std::string v1 = fs.put("proc-v1", "4:memory:/x\n2:cpu,cpuacct:/machine/ctr\n0::/\n");
    fs.put("sys/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    fs.put("sys/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), v1).cpus == 0);
    fs.put("sys/cpu,cpuacct/machine/ctr/cpu.cfs_quota_us", "100000\n");
    fs.put("sys/cpu,cpuacct/machine/ctr/cpu.cfs_period_us", "100000\n");
    REQUIRE(core::cgroup_cpu_quota((fs.root / "sys").string(), v1).cpus == 1);
  }
  SECTION("no files at all: no quota") {
    REQUIRE(core::cgroup_cpu_quota((fs.root / "none").string(), proc).cpus == 0);
    REQUIRE(core::cgroup_cpu_quota((fs.root / "none").string(), (fs.root / "no").string()).cpus == 0);
  }
}

TEST_CASE("cpu plan within a quota: the BLAS pool as large as the quota, not the node", "[core]") {
  const core::CpuQuota one{1, "/sys/fs/cgroup/cpu.max"};
  // A 1-CPU pod on a 16-core node: nothing pinned, one BLAS thread, and the log says why.
  const core::CpuPlan p = core::plan_cpus_within(iota(16), one, -1, 0, false);
  REQUIRE(p.compute.empty());
  REQUIRE(p.blas_threads == 1);
  REQUIRE(p.describe() ==
          "threads unpinned, 1 BLAS thread (CPU quota 1 CPU in /sys/fs/cgroup/cpu.max, of 16 cores "
          "allowed)");
  // A 10-CPU quota on 64 cores: pinned as on 10 cores (2 for the network), 8 BLAS threads.
  const core::CpuPlan ten = core::plan_cpus_within(iota(64), {10, "f"}, -1, 0, false);
  REQUIRE(ten.net.size() == 2);
  REQUIRE(ten.blas_threads == 8);
  // The user's counts are kept: --compute-threads, --net-cores, OPENBLAS_NUM_THREADS.
  REQUIRE(core::plan_cpus_within(iota(16), one, -1, 4, false).blas_threads == 4);
  REQUIRE(core::plan_cpus_within(iota(16), one, 0, 0, true).blas_threads == 0);
  REQUIRE(core::plan_cpus_within(iota(16), one, 2, 0, false).net.size() == 2);
  // No quota, or one above the cores: the affinity decides, as plan_cpus does.
  const core::CpuPlan none = core::plan_cpus_within(iota(2), {}, -1, 0, false);
  REQUIRE(none.blas_threads == 0);
  REQUIRE(none.describe() == "threads unpinned (2 cores allowed, no CPU quota)");
  REQUIRE(core::plan_cpus_within(iota(16), {32, "f"}, -1, 0, false).blas_threads == 14);
}
