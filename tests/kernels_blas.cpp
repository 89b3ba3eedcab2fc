// kernels/cpu/blas_info, blas_probe: what the OpenBLAS queries say, the table of fallback and
// native cores, and the GEMM self-test, which passes the loaded kernels and refuses a wrong result.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/cpu/blas_info.hpp"
#include "kernels/cpu/blas_probe.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::kernels;

TEST_CASE("the OpenBLAS queries name the library, its version, its core and its threads",
          "[kernels]") {
  const BlasInfo b = blas_info();
  REQUIRE(b.library == "OpenBLAS");
  CHECK(!b.version.empty());
  CHECK(b.config.find(b.version) != std::string::npos);
  CHECK(!b.core.empty());
  CHECK(b.config.find(b.core) != std::string::npos);  // the config line names the core loaded
  CHECK(b.threads >= 1);
  CHECK(blas_library_id().find("openblas") != std::string::npos);
}

TEST_CASE("the generic cores are fallbacks, and a CPU's flags name the core that fits it",
          "[kernels]") {
  for (const char* c : {"Prescott", "Core2", "NEHALEM", "atom", "Opteron_SSE3", "Barcelona"})
    CHECK(is_fallback_core(c));
  for (const char* c : {"Haswell", "SkylakeX", "Cooperlake", "Zen", "Sandybridge", ""})
    CHECK_FALSE(is_fallback_core(c));
  CHECK(same_core("skylakex", "SkylakeX"));
  CHECK_FALSE(same_core("Haswell", "SkylakeX"));

  gt_test::TempDir tmp("gt-cpuinfo");
  auto flags_of = [&](const std::string& vendor, const std::string& flags) {
    const std::string path = tmp / "cpuinfo";
    std::ofstream(path) << "processor\t: 0\nvendor_id\t: " << vendor
                        << "\nmodel name\t: Virtual CPU\nflags\t\t: " << flags
                        << "\n\nprocessor\t: 1\nvendor_id\t: Other\nflags\t\t: fpu\n";
    return read_cpu_flags(path);
  };
  const std::string sse = "fpu sse sse2 pni ssse3 sse4_1 sse4_2";
  const CpuFlags skx =
      flags_of("GenuineIntel", sse + " avx avx2 fma avx512f avx512dq avx512bw avx512vl");
  CHECK(skx.model == "Virtual CPU");
  CHECK(skx.avx512f);
  CHECK(native_core_for(skx) == "SkylakeX");
  CHECK(native_core_for(flags_of("AuthenticAMD", sse + " avx avx2 fma avx512f avx512dq avx512bw "
                                                       "avx512vl")) == "SkylakeX");
  CHECK(native_core_for(flags_of("AuthenticAMD", sse + " avx avx2 fma")) == "Zen");
  CHECK(native_core_for(flags_of("GenuineIntel", sse + " avx avx2 fma")) == "Haswell");
  // AVX-512F alone (Knights Landing has no BW/VL) is not enough for SkylakeX's kernels.
  CHECK(native_core_for(flags_of("GenuineIntel", sse + " avx avx2 fma avx512f")) == "Haswell");
  CHECK(native_core_for(flags_of("GenuineIntel", sse + " avx")).empty());
  CHECK(native_core_for(flags_of("GenuineIntel", sse + " avx avx2")).empty());  // no FMA
}

TEST_CASE("the GEMM self-test passes the loaded kernels and refuses one wrong element",
          "[kernels]") {
  const GemmCheck good = check_gemm_shapes(false);
  INFO("worst " << good.worst << " at " << good.shape);
  CHECK(good.shapes >= 10);
  CHECK(good.ok);
  CHECK(good.worst <= 1.0);
  CHECK(good.worst > 0.0);  // fp32 products do round: a zero would mean the check compared nothing

  const GemmCheck bad = check_gemm_shapes(true);
  INFO("corrupted: worst " << bad.worst << " at " << bad.shape);
  CHECK_FALSE(bad.ok);
  CHECK(bad.worst > 1.0);
}

// A scoped environment variable (the probe child inherits this process's environment).
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~EnvVar() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST_CASE(
    "the probe child runs the core it is given, and a wrong result, a crash or an unknown "
    "core is a refusal",
    "[kernels]") {
  using namespace std::chrono_literals;
  EnvVar no_corrupt(kBlasProbeCorruptEnv, nullptr);
  const std::string loaded = blas_info().core;
  // This test binary answers the probe (tests/catch_main.cpp), like our programs.
  const ProbeResult same = probe_core("/proc/self/exe", loaded, 60s);
  INFO(same.failure);
  CHECK(same.ok);
  CHECK(same_core(same.core, loaded));
  CHECK(same.worst <= 1.0);
  // Another core than ours: the child really loads it (OPENBLAS_CORETYPE), SSE3 on any x86-64.
  const ProbeResult prescott = probe_core("/proc/self/exe", "Prescott", 60s);
  INFO(prescott.failure);
  CHECK(prescott.ok);
  CHECK(prescott.core == "Prescott");
  {
    EnvVar corrupt(kBlasProbeCorruptEnv, "1");
    const ProbeResult bad = probe_core("/proc/self/exe", "Prescott", 60s);
    CHECK_FALSE(bad.ok);
    CHECK(bad.failure == "wrong result");
    CHECK(bad.worst > 1.0);
  }
  {
    EnvVar crash(kBlasProbeCorruptEnv, "crash");
    const ProbeResult bad = probe_core("/proc/self/exe", "Prescott", 60s);
    CHECK_FALSE(bad.ok);
    CHECK(bad.failure.find("crashed (signal 4") == 0);
  }
  const ProbeResult unknown = probe_core("/proc/self/exe", "NoSuchCore", 60s);
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.failure.find("instead") != std::string::npos);
}
