// The one Catch2 main shared by every test binary. GT_TEST_LOG=trace|debug|... sets spdlog's
// level, to watch what a failing test did.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include <spdlog/spdlog.h>

int main(int argc, char* argv[]) {
  if (const char* level = std::getenv("GT_TEST_LOG")) spdlog::set_level(spdlog::level::from_str(level));
  return Catch::Session().run(argc, argv);
}
