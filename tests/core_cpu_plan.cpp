// The core plan of a gossiping peer (core/cpu_plan): which cores training and the network get.
#include <catch2/catch.hpp>

#include <stdexcept>
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
