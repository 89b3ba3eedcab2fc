// The peer's flags are parsed once, in the flag table, into the typed values the node's
// configuration takes (apps::node_config): no string of a flag is parsed again when the node is
// built.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "apps/common/node_config.hpp"
#include "apps/common/options.hpp"

using namespace gossiptrain;
using namespace gossiptrain::apps;

namespace {
PeerConfig parse(std::vector<std::string> args) {
  bool help = false;
  return parse_peer_args(args, &help);
}
}  // namespace

TEST_CASE("typed flags: --weighting and --partner-choice land in the averager's config as parsed",
          "[apps]") {
  const PeerConfig d = parse({});
  CHECK_FALSE(d.node.averager.weight_by_samples);
  CHECK(d.node.averager.choice.weighted());
  CHECK_FALSE(d.node.averager.choice.scheduled());
  const PeerConfig c = parse({"--weighting", "samples", "--partner-choice", "uniform"});
  CHECK(c.node.averager.weight_by_samples);
  CHECK_FALSE(c.node.averager.choice.weighted());
  const gossip::AveragerConfig ac = node_config(c, 42).averager;
  CHECK(ac.weight_by_samples);
  CHECK_FALSE(ac.choice.weighted());
  const PeerConfig h = parse({"--partner-choice", "hypercube"});
  CHECK(h.node.averager.choice.scheduled());
  CHECK(node_config(h, 42).averager.choice.mode == gossip::PartnerMode::Hypercube);
  // A training peer does not wait for exact passes (its vectors move between rounds).
  CHECK_FALSE(node_config(h, 42).averager.choice.exact_passes);
  CHECK(gossip::PartnerChoiceConfig{}.exact_passes);
  CHECK_THROWS_AS(parse({"--weighting", "by-size"}), UsageError);
  CHECK_THROWS_AS(parse({"--partner-choice", "random"}), UsageError);
}

TEST_CASE("typed flags: --fault is a FaultConfig from the flag table on, refused when malformed",
          "[apps]") {
  ::setenv("GOSSIPTRAIN_ALLOW_FAULTS", "1", 1);
  const PeerConfig honest = parse({});
  CHECK(honest.node.averager.fault.mode == gossip::FaultMode::None);
  const PeerConfig c = parse({"--fault", "scale:5"});
  CHECK(c.node.averager.fault.mode == gossip::FaultMode::Scale);
  CHECK(c.node.averager.fault.scale == 5.0);
  CHECK(node_config(c, 42).averager.fault.mode == gossip::FaultMode::Scale);
  CHECK(parse({"--fault", "signflip"}).node.averager.fault.mode == gossip::FaultMode::SignFlip);
  CHECK_THROWS_AS(parse({"--fault", "scale:0"}), UsageError);
  CHECK_THROWS_AS(parse({"--fault", "sideways"}), UsageError);
  ::unsetenv("GOSSIPTRAIN_ALLOW_FAULTS");
  CHECK_THROWS_AS(parse({"--fault", "nan"}), UsageError);
}

TEST_CASE("typed flags: --wire, --precision and --partition are typed from the flag table on, "
          "a bad value refused there naming the flag",
          "[apps]") {
  const PeerConfig d = parse({});
  CHECK(d.node.averager.wire == gossip::WireFormat::Fp32);
  CHECK(d.precision == kernels::Precision::Fp32);
  CHECK(d.partition_spec.kind == core::PartitionSpec::Kind::Iid);
  const PeerConfig c =
      parse({"--wire", "int8", "--precision", "bf16", "--partition", "dirichlet:0.3"});
  CHECK(c.node.averager.wire == gossip::WireFormat::Int8);
  CHECK(node_config(c, 42).averager.wire == gossip::WireFormat::Int8);
  CHECK(c.precision == kernels::Precision::Bf16);
  CHECK(c.partition == "dirichlet:0.3");  // its text, for the metrics and the log
  CHECK(c.partition_spec.kind == core::PartitionSpec::Kind::Dirichlet);
  CHECK(c.partition_spec.alpha == Approx(0.3));
  // Every name the kernels give a wire is a value of --wire, and reads back as that wire.
  for (auto w : {gossip::WireFormat::Fp32, gossip::WireFormat::Fp16, gossip::WireFormat::Bf16,
                 gossip::WireFormat::Int8})
    CHECK(parse({"--wire", std::string(gossip::wire_name(w))}).node.averager.wire == w);
  auto error_of = [](std::vector<std::string> args) -> std::string {
    try {
      parse(std::move(args));
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error_of({"--wire", "int3"}), Catch::Contains("--wire") && Catch::Contains("int3"));
  CHECK_THAT(error_of({"--precision", "fp64"}), Catch::Contains("--precision"));
  CHECK_THAT(error_of({"--partition", "dirichlet:0"}), Catch::Contains("--partition"));
}

TEST_CASE("typed flags: the gossip node's config carries the lag, pace, outer and averager flags "
          "as parsed",
          "[apps]") {
  const gossip::NodeConfig d = node_config(parse({}), 7);
  CHECK(d.fingerprint == 7);
  CHECK(d.averager.fingerprint == 7);
  CHECK(d.membership.seeds.empty());
  CHECK(d.max_lag == gossip::MaxLag());  // auto: the node picks by backend
  CHECK(d.max_lag_share == Approx(0.25));
  CHECK(d.max_ahead == Approx(0.02));
  CHECK(d.outer.every == 0);
  CHECK_FALSE(d.averager.error_feedback);
  const gossip::NodeConfig c = node_config(
      parse({"--seeds", "127.0.0.1:7001,127.0.0.1:7002", "--gossip-every", "3", "--max-lag", "12",
             "--max-lag-share", "off", "--max-ahead", "off", "--outer-every", "20", "--outer-lr",
             "0.7", "--outer-momentum", "0.9", "--wire", "int8", "--error-feedback", "on",
             "--checkpoint-dir", "/tmp/ckpt-node-test"}),
      9);
  CHECK(c.membership.seeds == std::vector<std::string>{"127.0.0.1:7001", "127.0.0.1:7002"});
  CHECK(c.averager.gossip_every == 3);
  CHECK(c.max_lag == gossip::MaxLag::steps(12));
  CHECK(c.max_lag_share == 0.0);
  CHECK(c.max_ahead == 0.0);
  CHECK(c.outer.every == 20);
  CHECK(c.outer.lr == Approx(0.7f));
  CHECK(c.outer.momentum == Approx(0.9f));
  CHECK(c.averager.wire == gossip::WireFormat::Int8);
  CHECK(c.averager.error_feedback);
  CHECK(c.checkpoint_dir == "/tmp/ckpt-node-test");
  CHECK(node_config(parse({"--max-lag", "off"}), 9).max_lag == gossip::MaxLag::off());
}
