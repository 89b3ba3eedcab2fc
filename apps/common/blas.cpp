// Settling the OpenBLAS core in our programs: the probe child's answer, the re-execution that
// makes a new OPENBLAS_CORETYPE take effect (OpenBLAS reads it once, when it loads), and the
// report.
#include "apps/common/blas.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/common/option_table.hpp"
#include "kernels/cpu/blas_probe.hpp"

namespace gossiptrain::apps {
namespace {

constexpr const char* kSelf = "/proc/self/exe";

kernels::BlasCoreRequest request(const std::string& flag) {
  kernels::BlasCoreRequest r;
  r.flag = flag;
  r.exe = kSelf;
  r.cache_dir = kernels::default_blas_cache_dir();
  return r;
}

// This process's own arguments, argv[0] included, as the kernel holds them.
std::vector<std::string> own_args() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t at = 0; at < all.size();) {
    const auto end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

void report_choice(const kernels::BlasCoreChoice& c) {
  if (!c.warn) return;
  if (c.source == "refused")
    spdlog::warn(
        "OpenBLAS stays on its generic {} kernels: {} failed its self-test ({}); "
        "training runs several times slower than this CPU allows",
        c.core, c.tried, c.detail);
  else spdlog::warn("BLAS core: {}", c.detail);
}

}  // namespace

const char* const kBlasCoreHelp =
    "OpenBLAS kernels: auto: OpenBLAS's choice, unless it fell back to generic kernels "
    "(Prescott, Core2, Nehalem...) on a CPU with AVX2/AVX-512; then the matching core (SkylakeX, "
    "Haswell, Zen) once a child process has checked its products (verdict cached in "
    "$XDG_CACHE_HOME/gossiptrain); keep: OpenBLAS's choice; a core name (e.g. Haswell): that core, "
    "unchecked. OPENBLAS_CORETYPE set by the user is kept under auto";

std::string to_blas_core(const std::string& flag, const std::string& v) {
  bool ok = !v.empty() && v.size() <= 32;
  for (char ch : v) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
  if (!ok) throw bad_value(flag, v, "auto, keep or an OpenBLAS core name such as Haswell");
  return v;
}

std::optional<int> answer_blas_probe() {
  const auto line = kernels::blas_probe_child_report();
  if (!line) return std::nullopt;
  std::fputs(line->c_str(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

kernels::BlasCoreChoice settle_blas_core(const std::string& flag) {
  kernels::BlasCoreChoice c = kernels::choose_blas_core(request(flag));
  // The process run again says it (the choice travels in GT_BLAS_CORE_CHOSEN): once per log.
  if (!c.reexec) {
    report_choice(c);
    return c;
  }
  std::vector<std::string> args = own_args();
  if (args.empty()) {
    spdlog::warn(
        "cannot read this process's arguments to run again on OpenBLAS core {}: staying "
        "on {}",
        c.core, kernels::blas_info().core);
    c.core = kernels::blas_info().core;
    c.reexec = false;
    return c;
  }
  spdlog::info("running again with OPENBLAS_CORETYPE={} ({}{}{})", c.core, c.source,
               c.detail.empty() ? "" : ": ", c.detail);
  spdlog::default_logger()->flush();
  ::setenv("OPENBLAS_CORETYPE", c.core.c_str(), 1);
  ::setenv(kernels::kBlasChosenEnv, kernels::blas_chosen_marker(c).c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(kSelf, argv.data());
  const int err = errno;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kernels::kBlasChosenEnv);
  c.core = kernels::blas_info().core;
  c.reexec = false;
  spdlog::warn("cannot run again with the chosen OpenBLAS core ({}): staying on {}",
               std::strerror(err), c.core);
  return c;
}

kernels::BlasCoreChoice choose_blas_core_for_children(const std::string& flag) {
  kernels::BlasCoreChoice c = kernels::choose_blas_core(request(flag));
  report_choice(c);
  // The user's own OPENBLAS_CORETYPE, or keep, reaches the peers as it is.
  if (c.source == "user" || flag == "keep" || c.core == "unknown") return c;
  ::setenv("OPENBLAS_CORETYPE", c.core.c_str(), 1);
  ::setenv(kernels::kBlasChosenEnv, kernels::blas_chosen_marker(c).c_str(), 1);
  return c;
}

void log_blas(const kernels::BlasCoreChoice& choice) {
  const kernels::BlasInfo b = kernels::blas_info();
  spdlog::info("BLAS: {} {}, core {}, {} threads; {}", b.library, b.version, b.core, b.threads,
               describe(choice));
}

nlohmann::json blas_fields(const kernels::BlasCoreChoice& choice) {
  const kernels::BlasInfo b = kernels::blas_info();
  nlohmann::json j = {{"blas_library", b.library},
                      {"blas_version", b.version},
                      {"blas_core", b.core},
                      {"blas_threads", b.threads},
                      {"blas_core_source", choice.source}};
  if (!choice.tried.empty()) j["blas_core_tried"] = choice.tried;
  return j;
}

}  // namespace gossiptrain::apps
