// The decision of blas_core_choice.hpp, in the order of precedence: --blas-core, a choice passed
// down by us (re-exec, gossip-launch), OPENBLAS_CORETYPE from the user, OpenBLAS's own choice, and
// only then a probed native core. Verdicts are cached so that a machine probes once per library.
#include "kernels/cpu/blas_core_choice.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "kernels/cpu/blas_info.hpp"
#include "kernels/cpu/blas_probe.hpp"

namespace gossiptrain::kernels {
namespace fs = std::filesystem;
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v < 100 ? "%.3g" : "%.3e", v);
  return b;
}

// "<core>:<source>[:<tried>[:<detail>]]"; the detail, last, may hold anything.
struct Marker {
  std::string core, source, tried, detail;
};
bool parse_marker(const std::string& s, Marker* m) {
  std::string* parts[] = {&m->core, &m->source, &m->tried};
  std::size_t at = 0;
  for (std::string* p : parts) {
    const auto end = s.find(':', at);
    *p = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (end == std::string::npos) return !m->core.empty() && !m->source.empty();
    at = end + 1;
  }
  m->detail = s.substr(at);
  return !m->core.empty() && !m->source.empty();
}

// What a verdict depends on: this CPU (model and flags), this library file, the core tried.
std::string cache_key(const CpuFlags& cpu, const std::string& core) {
  return "cpu: " + cpu.model + "\nflags: " + cpu.flags + "\nlibrary: " + blas_library_id() +
         "\ncore: " + core + "\n";
}

std::string cache_file(const std::string& dir, const std::string& key) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char name[40];
  std::snprintf(name, sizeof name, "blas-core-%016llx.txt", static_cast<unsigned long long>(h));
  return (fs::path(dir) / name).string();
}

// A cached verdict: "pass <worst>" or "fail <worst> <failure...>", followed by the key.
bool read_verdict(const std::string& file, const std::string& key, ProbeResult* r) {
  std::ifstream in(file);
  std::string verdict;
  if (!std::getline(in, verdict)) return false;
  const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (rest != key) return false;  // a hash collision, or a file from another version
  // strtod, not >>: the worst error of a non-finite result is written "inf".
  const auto sp1 = verdict.find(' ');
  if (sp1 == std::string::npos) return false;
  const std::string word = verdict.substr(0, sp1);
  if (word != "pass" && word != "fail") return false;
  r->ok = word == "pass";
  const auto sp2 = verdict.find(' ', sp1 + 1);
  r->worst = std::strtod(verdict.substr(sp1 + 1, sp2 - sp1 - 1).c_str(), nullptr);
  r->failure = sp2 == std::string::npos ? "" : verdict.substr(sp2 + 1);
  return r->ok == r->failure.empty();
}

void write_verdict(const std::string& dir, const std::string& file, const std::string& key,
                   const ProbeResult& r) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Written whole, then renamed: 128 peers starting at once read a verdict or none, never half.
  const std::string tmp = file + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << (r.ok ? "pass " : "fail ") << r.worst << (r.ok ? "" : " " + r.failure) << "\n" << key;
    if (!out) {
      spdlog::debug("cannot write the BLAS verdict cache {}", tmp);
      return;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

std::string probe_detail(const ProbeResult& r, bool cached) {
  std::string s = r.ok ? "passed" : "failed: " + r.failure;
  if (r.ok || r.failure == "wrong result")
    s += ", worst error " + fixed(r.worst) + "x its bound" +
         (r.shape.empty() ? "" : " at " + r.shape);
  s += cached ? " (cached verdict)" : ", " + std::to_string(std::lround(r.ms)) + " ms";
  return s;
}

}  // namespace

std::string default_blas_cache_dir() {
  if (const std::string x = env_or_empty("XDG_CACHE_HOME"); !x.empty())
    return (fs::path(x) / "gossiptrain").string();
  if (const std::string h = env_or_empty("HOME"); !h.empty())
    return (fs::path(h) / ".cache" / "gossiptrain").string();
  return "";
}

std::string blas_chosen_marker(const BlasCoreChoice& c) {
  std::string s = c.core + ":" + c.source;
  if (!c.tried.empty() || !c.detail.empty()) s += ":" + c.tried;
  if (!c.detail.empty()) s += ":" + c.detail;
  return s;
}

std::string describe(const BlasCoreChoice& c) {
  std::string s = c.core + " (" + c.source;
  if (!c.tried.empty() && c.source != "probe" && c.source != "cache") s += ", tried " + c.tried;
  if (!c.detail.empty()) s += ": " + c.detail;
  return s + ")";
}

namespace {

// A choice we passed down holds while OPENBLAS_CORETYPE is still the one we set with it (and,
// with a --blas-core core, is that core; with keep, is what OpenBLAS detected). It is not
// re-decided: the peer would re-execute forever when OpenBLAS ignores a name it does not know.
std::optional<BlasCoreChoice> inherited_choice(const BlasCoreRequest& req,
                                               const std::string& loaded,
                                               const std::string& env_core, bool flag_core) {
  Marker m;
  if (!parse_marker(env_or_empty(kBlasChosenEnv), &m) || !same_core(m.core, env_core) ||
      (flag_core && !same_core(m.core, req.flag)) ||
      (req.flag == "keep" && m.source != "detected"))
    return std::nullopt;
  BlasCoreChoice c;
  c.core = loaded;
  c.source = m.source;
  c.tried = m.tried;
  c.detail = m.detail;
  if (!same_core(loaded, m.core)) {
    c.warn = true;
    c.detail = "OPENBLAS_CORETYPE=" + m.core + " was not taken: OpenBLAS runs " + loaded;
  }
  c.warn = c.warn || m.source == "refused";
  return c;
}

// The verdict on the native kernels: the cached one, else a probe in a child process (cached
// unless it timed out or could not start). *cached says which.
ProbeResult native_verdict(const BlasCoreRequest& req, const CpuFlags& cpu,
                           const std::string& detected, const std::string& native, bool* cached) {
  ProbeResult r;
  *cached = false;
  const std::string key = cache_key(cpu, native);
  // A corrupted probe (tests) neither reads nor leaves a verdict: it is not this machine's.
  const bool testing_corrupt = !env_or_empty(kBlasProbeCorruptEnv).empty();
  const std::string file = req.cache_dir.empty() ? "" : cache_file(req.cache_dir, key);
  if (!file.empty() && !testing_corrupt) *cached = read_verdict(file, key, &r);
  if (*cached) return r;
  spdlog::info(
      "OpenBLAS chose its generic {} kernels on a CPU with {}: checking {} in a child "
      "process",
      detected, cpu.avx512f ? "AVX-512" : "AVX2", native);
  r = probe_core(req.exe, native, req.probe_timeout);
  // A timeout says more about a busy machine than about the kernels: probe again next time.
  const bool lasting = r.ok || r.failure.rfind("timed out", 0) != 0;
  if (!file.empty() && !testing_corrupt && lasting && r.failure.rfind("cannot start", 0) != 0)
    write_verdict(req.cache_dir, file, key, r);
  return r;
}

}  // namespace

BlasCoreChoice choose_blas_core(const BlasCoreRequest& req) {
  const BlasInfo info = blas_info();
  const std::string loaded = info.core;
  const std::string env_core = env_or_empty("OPENBLAS_CORETYPE");
  BlasCoreChoice c;
  auto run = [&](std::string core, std::string source) {
    c.core = std::move(core);
    c.source = std::move(source);
    c.reexec = !loaded.empty() && !same_core(c.core, loaded);
    return c;
  };
  if (info.library != "OpenBLAS") {
    c.core = "unknown";
    c.source = "detected";
    return c;
  }
  const bool flag_core = req.flag != "auto" && req.flag != "keep";
  if (auto inherited = inherited_choice(req, loaded, env_core, flag_core)) return *inherited;
  if (flag_core) return run(req.flag, "flag");
  if (!env_core.empty()) {
    c = run(loaded, "user");
    if (!same_core(env_core, loaded)) {
      c.warn = true;
      c.detail = "OPENBLAS_CORETYPE=" + env_core + " is not a core this OpenBLAS runs";
    }
    return c;
  }
  const std::string pretend = env_or_empty(kBlasPretendEnv);
  const std::string detected = pretend.empty() ? loaded : pretend;
  if (req.flag == "keep" || !is_fallback_core(detected)) return run(detected, "detected");
  const CpuFlags cpu = read_cpu_flags();
  const std::string native = native_core_for(cpu);
  if (native.empty()) {
    run(detected, "no-better");
    c.detail = "this CPU shows neither AVX2 with FMA nor AVX-512";
    return c;
  }
  bool cached = false;
  const ProbeResult r = native_verdict(req, cpu, detected, native, &cached);
  if (r.ok) {
    run(native, cached ? "cache" : "probe");
  } else {
    run(detected, "refused");
    c.warn = true;
  }
  c.tried = native;
  c.detail = probe_detail(r, cached);
  return c;
}

}  // namespace gossiptrain::kernels
