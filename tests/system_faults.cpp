// gossip-peer --fault, the faulty peer for robustness experiments: refused with exit code 2 unless
// GOSSIPTRAIN_ALLOW_FAULTS=1 is set, and a bad mode is refused even then.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/system_process.hpp"

using namespace std::chrono_literals;

TEST_CASE("gossip-peer refuses every --fault mode without GOSSIPTRAIN_ALLOW_FAULTS=1", "[system]") {
  gt_test::TempDir tmp("gt-faults");
  std::string out;
  ::unsetenv("GOSSIPTRAIN_ALLOW_FAULTS");
  for (const char* mode : {"scale:1000", "random", "signflip", "stale", "nan"}) {
    INFO(mode);
    const int rc = gt_test::run_app("gossip-peer",
                                    {"--fault", mode, "--data", "synthetic", "--epochs", "1",
                                     "--identity", tmp / "id.key"},
                                    tmp / "peer.log", &out, 60s);
    INFO(out);
    CHECK(rc == 2);
    CHECK(out.find("GOSSIPTRAIN_ALLOW_FAULTS=1") != std::string::npos);
  }
  ::setenv("GOSSIPTRAIN_ALLOW_FAULTS", "0", 1);  // only 1 allows it
  int rc = gt_test::run_app("gossip-peer", {"--fault", "random", "--data", "synthetic"},
                            tmp / "peer.log", &out, 60s);
  CHECK(rc == 2);
  ::setenv("GOSSIPTRAIN_ALLOW_FAULTS", "1", 1);
  rc = gt_test::run_app("gossip-peer", {"--fault", "scale:abc", "--data", "synthetic"},
                        tmp / "peer.log", &out, 60s);
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find("scale:K") != std::string::npos);
  ::unsetenv("GOSSIPTRAIN_ALLOW_FAULTS");
}
