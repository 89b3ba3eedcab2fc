// Which BLAS the CPU backend runs (library, version, OpenBLAS core, threads), and which OpenBLAS
// core this CPU's flags could run in place of one of OpenBLAS's generic fallback cores.
#pragma once

#include <string>

namespace gossiptrain::kernels {

struct BlasInfo {
  std::string library;  // "OpenBLAS", or "unknown" for a BLAS without OpenBLAS's queries
  std::string version;  // "0.3.21"
  std::string core;     // the kernels in use, as OPENBLAS_CORETYPE spells them ("SkylakeX")
  std::string config;   // openblas_get_config(): build options and core, one line
  int threads = 0;      // the BLAS thread pool; 0 when unknown
};

// Of this process, as loaded (OpenBLAS picks its core once, when the library loads).
BlasInfo blas_info();

// What the CPU says of itself (from /proc/cpuinfo's first processor).
struct CpuFlags {
  std::string vendor;  // vendor_id: "GenuineIntel", "AuthenticAMD"
  std::string model;   // model name
  std::string flags;   // the whole flags line, for the cache key
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false,
       avx512dq = false;
};
CpuFlags read_cpu_flags(const std::string& cpuinfo_path = "/proc/cpuinfo");

// OpenBLAS's generic cores: what its detection falls back to on a CPU it does not recognise, such
// as a virtual machine that hides the CPU model (SSE2/SSE3 kernels, 3-14x slower than AVX2/512).
bool is_fallback_core(const std::string& core);

// The OpenBLAS core that these flags can run: SkylakeX with AVX-512 (F, BW, VL, DQ: what its
// kernels use), else Zen on AMD and Haswell elsewhere with AVX2 and FMA; "" without AVX2+FMA.
std::string native_core_for(const CpuFlags& f);

// Case-insensitive name comparison (OpenBLAS accepts OPENBLAS_CORETYPE in any case).
bool same_core(const std::string& a, const std::string& b);

// The loaded BLAS library's file with its size and modification time: a verdict cached for one
// library is not reused for another (an upgrade, another alternative).
std::string blas_library_id();

}  // namespace gossiptrain::kernels
