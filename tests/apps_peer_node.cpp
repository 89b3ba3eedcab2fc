// apps::PeerNode, gossip-peer's transport and node built from its flags: what it sizes from the
// model it is given.
#include <catch2/catch.hpp>

#include "apps/common/options.hpp"
#include "apps/common/peer_node.hpp"
#include "core/model.hpp"
#include "kernels/backend.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;

// Issue: the pool was sized from the spec read as an MLP's layer sizes, so a CNN peer counted
// about 85x its parameters (141 M for this CNN of 1.66 M) and kept a 1.1 GB pool.
TEST_CASE("peer node: the received-buffer pool is sized from the model's own parameter count",
          "[apps]") {
  gt_test::TempDir dir("gt-peer-node-pool");
  auto be = kernels::make_backend("cpu");
  core::Metrics metrics("", "test");
  for (const std::string spec :
       {"cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10", "mlp:784-512-512-512-10"}) {
    apps::PeerConfig cfg;
    cfg.train.model = spec;
    cfg.identity = dir / "id.key";
    cfg.listen = "127.0.0.1:0";
    const core::Model model(*be, spec, 1);
    apps::PeerNode node(cfg, model, *be, metrics);
    INFO(spec << ": " << model.num_params() << " parameters");
    CHECK(2 * 4 * model.num_params() + (2u << 20) > (8u << 20));  // above the pool's floor
    // The partner's vector as fp32, twice, and 2 MiB for the largest wire.
    CHECK(node.transport().buffers().stats().limit_bytes ==
          2 * 4 * model.num_params() + (2u << 20));
    // The one count per spec (core::model_param_count) is the one the pool sees: for the CNN its
    // layers' 1.66 M, not its layer sizes read as an MLP's.
    CHECK(node.transport().buffers().stats().limit_bytes ==
          2 * 4 * core::model_param_count(spec) + (2u << 20));
    node.stop();
  }
}
