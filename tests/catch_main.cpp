// The one Catch2 main shared by every test binary. GT_TEST_LOG=trace|debug|... sets spdlog's
// level, to watch what a failing test did. A test binary also answers as an OpenBLAS probe child
// (kernels/cpu/blas_probe.hpp), so that tests can probe with /proc/self/exe.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "kernels/cpu/blas_probe.hpp"

int main(int argc, char* argv[]) {
  if (const auto line = gossiptrain::kernels::blas_probe_child_report()) {
    std::fputs(line->c_str(), stdout);
    return 0;
  }
  if (const char* level = std::getenv("GT_TEST_LOG"))
    spdlog::set_level(spdlog::level::from_str(level));
  return Catch::Session().run(argc, argv);
}
