// The one Catch2 main shared by every test binary. GT_TEST_LOG=trace|debug|... sets spdlog's
// level, to watch what a failing test did. A test binary also answers as an OpenBLAS probe child
// (kernels/cpu/blas_probe.hpp), so that tests can probe with /proc/self/exe, and settles its
// OpenBLAS core as our programs do: on a machine where OpenBLAS falls back to generic kernels the
// suite runs on the checked native ones.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "kernels/cpu/blas_core_choice.hpp"
#include "kernels/cpu/blas_probe.hpp"

int main(int argc, char* argv[]) {
  namespace kn = gossiptrain::kernels;
  if (const auto line = kn::blas_probe_child_report()) {
    std::fputs(line->c_str(), stdout);
    return 0;
  }
  if (const char* level = std::getenv("GT_TEST_LOG"))
    spdlog::set_level(spdlog::level::from_str(level));
  kn::BlasCoreRequest req;
  req.exe = "/proc/self/exe";
  req.cache_dir = kn::default_blas_cache_dir();
  const kn::BlasCoreChoice blas = kn::choose_blas_core(req);
  if (blas.warn) spdlog::warn("BLAS core: {}", kn::describe(blas));
  spdlog::debug("BLAS core {}{}", kn::describe(blas), blas.reexec ? ": running again on it" : "");
  if (blas.reexec) {
    ::setenv("OPENBLAS_CORETYPE", blas.core.c_str(), 1);
    ::setenv(kn::kBlasChosenEnv, kn::blas_chosen_marker(blas).c_str(), 1);
    std::fflush(nullptr);
    ::execv("/proc/self/exe", argv);
    spdlog::warn("cannot run again on OpenBLAS core {}: the tests run on the core loaded",
                 blas.core);
  }
  return Catch::Session().run(argc, argv);
}
