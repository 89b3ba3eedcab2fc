// OpenBLAS's own queries (config, core, threads), /proc/cpuinfo's flags, and the table of which
// core a CPU's flags allow.
#include "kernels/cpu/blas_info.hpp"

#include <cblas.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

namespace gossiptrain::kernels {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string value_of(const std::string& line) {
  const auto pos = line.find(':');
  if (pos == std::string::npos) return "";
  std::string s = line.substr(pos + 1);
  s.erase(0, s.find_first_not_of(" \t"));
  return s;
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo b;
#if defined(OPENBLAS_VERSION)
  b.library = "OpenBLAS";
  b.config = openblas_get_config();
  b.core = openblas_get_corename();
  b.threads = openblas_get_num_threads();
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the version is the second word.
  std::istringstream in(b.config);
  std::string name;
  in >> name >> b.version;
#else
  b.library = "unknown";
#endif
  return b;
}

CpuFlags read_cpu_flags(const std::string& cpuinfo_path) {
  CpuFlags f;
  std::ifstream in(cpuinfo_path);
  bool have_flags = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("vendor_id", 0) == 0 && f.vendor.empty()) f.vendor = value_of(line);
    if (line.rfind("model name", 0) == 0 && f.model.empty()) f.model = value_of(line);
    if (line.rfind("flags", 0) == 0 && !have_flags) {
      f.flags = value_of(line);
      have_flags = true;
    }
    if (have_flags && !f.vendor.empty() && !f.model.empty()) break;  // the first processor's
  }
  std::istringstream words(f.flags);
  for (std::string w; words >> w;) {
    f.avx2 |= w == "avx2";
    f.fma |= w == "fma";
    f.avx512f |= w == "avx512f";
    f.avx512bw |= w == "avx512bw";
    f.avx512vl |= w == "avx512vl";
    f.avx512dq |= w == "avx512dq";
  }
  return f;
}

bool is_fallback_core(const std::string& core) {
  static constexpr std::array<std::string_view, 15> kGeneric = {
      "katmai",  "coppermine",   "northwood",  "prescott", "banias",
      "core2",   "penryn",       "dunnington", "nehalem",  "atom",
      "opteron", "opteron_sse3", "barcelona",  "bobcat",   "generic"};
  const std::string c = lower(core);
  return std::find(kGeneric.begin(), kGeneric.end(), c) != kGeneric.end();
}

std::string native_core_for(const CpuFlags& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma) return "SkylakeX";
  if (f.avx2 && f.fma)
    return f.vendor == "AuthenticAMD" || f.vendor == "HygonGenuine" ? "Zen" : "Haswell";
  return "";
}

bool same_core(const std::string& a, const std::string& b) { return lower(a) == lower(b); }

std::string blas_library_id() {
#if defined(OPENBLAS_VERSION)
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&openblas_get_config), &info) == 0 || !info.dli_fname)
    return "unknown";
  char real[PATH_MAX];
  const std::string path = ::realpath(info.dli_fname, real) ? real : info.dli_fname;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtime);
#else
  return "unknown";
#endif
}

}  // namespace gossiptrain::kernels
