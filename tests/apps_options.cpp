// The option tables of the CLIs (apps/common/option_table.hpp): parsing, the one HOST:PORT rule, the one
// --lr range, --help from the table, and gossip-launch's --consensus-every reaching the sampler.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "apps/launch/observe.hpp"
#include "apps/launch/options.hpp"
#include "apps/launch/resources.hpp"
#include "apps/sim/options.hpp"
#include "apps/launch/summary.hpp"
#include "apps/common/option_table.hpp"

using namespace gossiptrain::apps;
using Catch::Matchers::Contains;

namespace {

struct Toy {
  int n = 1;
  double x = 0.5;
  std::string mode = "a";
  bool on = false;
  std::vector<std::string> many;
  std::vector<std::string> unknown;
};

const OptionTable<Toy>& toy_options() {
  using O = Options<Toy>;
  static const OptionTable<Toy> table({
      O::number("n", "N", "an integer", &Toy::n, 1, 10),
      O::number("x", "X", "a number", &Toy::x, 0, 1),
      O::choice("mode", {"a", "b"}, "a choice", &Toy::mode),
      O::flag("on", "a switch", &Toy::on),
      {"many", "V...", "values", [](Toy& t, const std::string& v) { t.many.push_back(v); },
       Arity::Many},
  });
  return table;
}

// The UsageError message of f(), or "" when it throws none.
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string usage_error_of(const std::vector<std::string>& args) {
  Toy t;
  return usage_error([&] { toy_options().parse(args, t); });
}

std::string peer_error(const std::vector<std::string>& args) {
  bool help = false;
  return usage_error([&] { parse_peer_args(args, &help); });
}

}  // namespace

TEST_CASE("option table: values, switches, many values, --help and bad input", "[apps]") {
  Toy t;
  REQUIRE(toy_options().parse(
      {"--n", "3", "--x=0.25", "--mode", "b", "--on", "--many", "p", "q", "--n=4"}, t));
  CHECK(t.n == 4);  // the last one wins
  CHECK(t.x == 0.25);
  CHECK(t.mode == "b");
  CHECK(t.on);
  CHECK(t.many == std::vector<std::string>{"p", "q"});
  Toy h;
  CHECK_FALSE(toy_options().parse({"--n", "2", "--help", "--n", "x"}, h));
  CHECK(h.n == 2);  // stops at --help
  CHECK_THAT(usage_error_of({"--n", "11"}), Contains("--n") && Contains("1..10"));
  CHECK_THAT(usage_error_of({"--x", "nan"}), Contains("--x"));
  CHECK_THAT(usage_error_of({"--mode", "c"}), Contains("a|b"));
  CHECK_THAT(usage_error_of({"--on=1"}), Contains("takes no value"));
  CHECK_THAT(usage_error_of({"--n"}), Contains("needs a value"));
  CHECK_THAT(usage_error_of({"--many"}), Contains("needs one or more"));
  CHECK_THAT(usage_error_of({"--nope", "1"}), Contains("unknown flag '--nope'"));
  CHECK_THAT(usage_error_of({"stray"}), Contains("unexpected argument"));
  // Unknown flags go to the handler with their value when there is one.
  Toy u;
  toy_options().parse({"--other", "v", "--n", "2"}, u,
                      [](Toy& c, const std::string& name, const std::string& v) {
                        c.unknown.push_back(name + "=" + v);
                      });
  CHECK(u.unknown == std::vector<std::string>{"other=v"});
  CHECK(u.n == 2);
  // --help: one line per row, the placeholder after the flag, the help at the column.
  const std::string help = toy_options().help(20);
  CHECK_THAT(help, Contains("  --n N             an integer (default: 1)\n"));
  CHECK_THAT(help, Contains("  --x X             a number (default: 0.5)\n"));
  CHECK_THAT(help, Contains("  --mode a|b        a choice (default: a)\n"));
  CHECK_THAT(help, Contains("  --on              a switch\n"));
}

TEST_CASE("option table: --help lines wrap at 100 columns under the help column", "[apps]") {
  const std::string words(25, 'w');
  const std::string line = help_line("--flag ARG", words + " " + words + " " + words + " end", 40);
  std::size_t start = 0;
  int lines = 0;
  while (start < line.size()) {
    const std::size_t nl = line.find('\n', start);
    CHECK(nl - start <= 100);
    if (lines > 0) CHECK(line.substr(start, 40) == std::string(40, ' '));
    start = nl + 1;
    ++lines;
  }
  CHECK(lines == 2);
  // A flag wider than the column puts its help on the next line.
  CHECK(help_line("--a-very-long-flag-name VALUE", "h", 20) ==
        "  --a-very-long-flag-name VALUE\n" + std::string(20, ' ') + "h\n");
}

TEST_CASE("HOST:PORT: one rule, port 0 and wildcards only for a listen address", "[apps]") {
  CHECK_NOTHROW(check_host_port("127.0.0.1:0", "listen", AddrUse::Listen));
  CHECK_NOTHROW(check_host_port("0.0.0.0:7000", "listen", AddrUse::Listen));
  CHECK_NOTHROW(check_host_port("[::1]:0", "listen", AddrUse::Listen));
  CHECK_NOTHROW(check_host_port("10.0.0.1:7000", "seeds", AddrUse::Dial));
  CHECK_THROWS_AS(check_host_port("10.0.0.1:0", "seeds", AddrUse::Dial), UsageError);
  CHECK_THROWS_AS(check_host_port("0.0.0.0:7000", "advertise", AddrUse::Dial), UsageError);
  for (const char* bad : {"host", ":7000", "host:", "host:65536", "host:x", "::1:7000"}) {
    CHECK_THROWS_AS(check_host_port(bad, "listen", AddrUse::Listen), UsageError);
    CHECK_THROWS_AS(check_host_port(bad, "seeds", AddrUse::Dial), UsageError);
  }
  CHECK(parse_addr_list("a:1,,b:2", "seeds") == std::vector<std::string>{"a:1", "b:2"});
  CHECK_THROWS_AS(parse_addr_list(",", "seeds"), UsageError);
  // The peer's flags apply it: --listen may take port 0, --seeds and --advertise may not.
  CHECK(peer_error({"--listen", "127.0.0.1:0"}).empty());
  CHECK_THAT(peer_error({"--seeds", "127.0.0.1:0"}), Contains("--seeds"));
  CHECK_THAT(peer_error({"--listen", "0.0.0.0:7000", "--advertise", "127.0.0.1:0"}),
             Contains("--advertise"));
}

TEST_CASE("lr flag: one range, core::validate's (0, 10)", "[apps]") {
  bool help = false;
  CHECK(parse_peer_args({"--lr", "9.5"}, &help).train.lr == 9.5f);
  CHECK(parse_peer_args({"--lr", "1e-12"}, &help).train.lr > 0);  // the table adds no floor
  CHECK_THAT(peer_error({"--lr", "10"}), Contains("--lr"));
  CHECK_THAT(peer_error({"--lr", "0"}), Contains("--lr"));
  CHECK_THAT(peer_error({"--lr", "-1"}), Contains("--lr"));
  CHECK_THAT(peer_error({"--lr", "fast"}), Contains("--lr"));
}

// --max-ahead 2 aborted the peer with an uncaught std::invalid_argument (exit 134) instead of
// saying so with exit code 2; --max-lag-share is checked the same way.
TEST_CASE("max-ahead and max-lag-share: a value out of range is a usage error", "[apps]") {
  bool help = false;
  CHECK(parse_peer_args({"--max-lag-share", "0.5"}, &help).node.max_lag_share == 0.5);
  CHECK(parse_peer_args({"--max-lag-share", "off"}, &help).node.max_lag_share == 0.0);
  CHECK(parse_peer_args({}, &help).node.max_lag_share == 0.25);
  for (const char* bad : {"0", "-1", "101", "fast"})
    CHECK_THAT(peer_error({"--max-lag-share", bad}), Contains("--max-lag-share"));
  CHECK(parse_peer_args({"--max-ahead", "off"}, &help).node.max_ahead == 0.0);
  for (const char* bad : {"2", "0", "1", "-0.5"})
    CHECK_THAT(peer_error({"--max-ahead", bad}), Contains("--max-ahead"));
}

TEST_CASE("slow-link-wire: off, a wire, the int8 default, and anything else is a usage error naming it",
          "[apps]") {
  bool help = false;
  CHECK(parse_peer_args({}, &help).node.averager.slow_link_wire ==
        gossiptrain::gossip::WireFormat::Int8);
  CHECK_FALSE(parse_peer_args({"--slow-link-wire", "off"}, &help).node.averager.slow_link_wire.has_value());
  CHECK(parse_peer_args({"--slow-link-wire", "int8"}, &help).node.averager.slow_link_wire ==
        gossiptrain::gossip::WireFormat::Int8);
  CHECK(parse_peer_args({"--slow-link-wire", "fp16"}, &help).node.averager.slow_link_wire ==
        gossiptrain::gossip::WireFormat::Fp16);
  for (const char* bad : {"int9", "", "fp32", "int2", "fast"})
    CHECK_THAT(peer_error({"--slow-link-wire", bad}), Contains("--slow-link-wire"));
  CHECK_THAT(peer_error({"--slow-link-wire"}), Contains("--slow-link-wire"));  // no value
}

// The three wire flags read their values through one parse from one name table
// (apps/common/wire_flags.hpp): a bad value is refused in one style, listing what the flag takes.
TEST_CASE("wire flags: a bad value's message lists the values the flag takes, as --wire's does",
          "[apps]") {
  CHECK(peer_error({"--wire", "int3"}) ==
        "--wire: bad value 'int3' (one of fp32|fp16|bf16|int8|int4|int2|int4-rel)");
  CHECK(peer_error({"--finish-wire", "int3"}) ==
        "--finish-wire: bad value 'int3' (one of off|fp32|fp16|bf16|int8|int4|int2|int4-rel)");
  CHECK(peer_error({"--slow-link-wire", "fp32"}) ==
        "--slow-link-wire: bad value 'fp32' (one of off|fp16|bf16|int8|int4|int4-rel)");
  CHECK(peer_error({"--slow-link-wire", "int2"}) ==
        "--slow-link-wire: bad value 'int2' (one of off|fp16|bf16|int8|int4|int4-rel)");
  CHECK(peer_options().find("slow-link-wire")->arg == "off|fp16|bf16|int8|int4|int4-rel");
  // Shown as before: the wire's name, or "off".
  PeerConfig d;
  CHECK(peer_options().find("slow-link-wire")->default_text(d) == "int8");
  d.node.averager.slow_link_wire.reset();
  CHECK(peer_options().find("slow-link-wire")->default_text(d) == "off");
}

TEST_CASE("linger-settle: a distance, 0 for off, 0.01 by default, and a negative one is refused",
          "[apps]") {
  bool help = false;
  CHECK(parse_peer_args({}, &help).node.averager.settle_distance == 0.01);
  CHECK(parse_peer_args({"--linger-settle", "0"}, &help).node.averager.settle_distance == 0.0);
  CHECK(parse_peer_args({"--linger-settle", "0.2"}, &help).node.averager.settle_distance == 0.2);
  for (const char* bad : {"-1", "near"})
    CHECK_THAT(peer_error({"--linger-settle", bad}), Contains("--linger-settle"));
}

TEST_CASE("gossip-peer --help lists every row of its table, --config included", "[apps]") {
  const std::string usage = peer_usage();
  for (const auto& o : peer_options().options())
    CHECK_THAT(usage, Contains("  --" + o.name + " " + o.arg));
  CHECK_THAT(usage, Contains("--config FILE.json"));
  CHECK_THAT(usage, Contains("Exit codes:"));
}

TEST_CASE("gossip-launch --consensus-every sets the sampler's period", "[apps]") {
  const std::vector<std::string> base = {"--peers", "3", "--data", "synthetic"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return parse_launch_args(a);
  };
  const LaunchOptions two = with({"--consensus-every", "2"});
  const LaunchOptions dflt = with({});
  CHECK(two.consensus_every_s == 2.0);
  CHECK(dflt.consensus_every_s == 5.0);
  CHECK(with({"--consensus-every=0.5"}).consensus_every_s == 0.5);
  CHECK_THROWS_AS(with({"--consensus-every", "0.1"}), UsageError);
  CHECK_THROWS_AS(with({"--consensus-every", "3601"}), UsageError);

  // Some peers have a new checkpoint: a sample once the period has passed since the last one.
  const CheckpointScan some{3, true, true, false};
  ConsensusSchedule fast(two), slow(dflt);
  CHECK(fast.due(some, 0.0));  // nothing sampled yet
  fast.sampled(10.0);
  slow.sampled(10.0);
  CHECK_FALSE(fast.due(some, 11.9));
  CHECK(fast.due(some, 12.0));        // 2 s, the flag's value...
  CHECK_FALSE(slow.due(some, 12.0));  // ...not the default's 5 s
  CHECK(slow.due(some, 15.0));
  // Every checkpoint new: at once, whatever the period; none new, or one missing: never.
  CHECK(slow.due({3, true, true, true}, 10.1));
  CHECK_FALSE(fast.due({3, true, false, false}, 1e9));
  CHECK_FALSE(fast.due({3, false, true, false}, 1e9));
}

// Issue 26, item 14: --resume reads the run's command back from command.txt.
TEST_CASE("gossip-launch --resume: command.txt's words are read back as they were quoted",
          "[apps]") {
  CHECK(shell_split("build/apps/gossip-launch --peers 3 --out 'my run' 'it'\\''s' a\\ b\n") ==
        std::vector<std::string>{"build/apps/gossip-launch", "--peers", "3", "--out", "my run",
                                 "it's", "a b"});
  CHECK(shell_split("  ").empty());
  CHECK_THROWS_AS(shell_split("--out 'unterminated"), UsageError);
  // --resume takes nothing else, and a folder that is not a run is refused.
  CHECK_THROWS_WITH(parse_launch_args({"--resume", "/nonexistent", "--peers", "2"}),
                    Contains("takes no other flag"));
  CHECK_THROWS_WITH(parse_launch_args({"--resume", "/nonexistent"}),
                    Contains("not a gossip-launch run folder"));
}

TEST_CASE("observability flags: --prometheus needs its host, --from-checkpoint needs --export, "
          "gossip-launch owns them and plans consecutive ports",
          "[apps]") {
  CHECK_THAT(peer_error({"--prometheus", ":9100"}), Catch::Contains("--prometheus"));
  CHECK_THAT(peer_error({"--prometheus", "9100"}), Catch::Contains("--prometheus"));
  CHECK(peer_error({"--prometheus", "127.0.0.1:9100"}).empty());
  CHECK(peer_error({"--prometheus", "0.0.0.0:9100"}).empty());
  CHECK_THAT(peer_error({"--from-checkpoint", "ckpt"}), Catch::Contains("--export"));
  CHECK(peer_error({"--export", "m.safetensors", "--from-checkpoint", "ckpt"}).empty());
  CHECK_THROWS_AS(parse_launch_args({"--peers", "2", "--prometheus", "127.0.0.1:9100"}),
                  UsageError);
  CHECK_THROWS_AS(parse_launch_args({"--peers", "2", "--tensorboard", "--export", "x"}),
                  UsageError);
  const auto o = parse_launch_args({"--peers", "3", "--prometheus-base-port", "9100",
                                    "--tensorboard", "--data", "synthetic"});
  const auto plans = plan_peers(o, "/tmp/run", {7000, 7001, 7002}, "");
  REQUIRE(plans.size() == 3);
  CHECK(plans[2].config.prometheus == "127.0.0.1:9102");
  CHECK(plans[1].config.tensorboard == "/tmp/run/tensorboard/peer1");
  const std::string yml = prometheus_config(plans, 9100);
  CHECK_THAT(yml, Catch::Contains("- targets: ['127.0.0.1:9100']"));
  CHECK_THAT(yml, Catch::Contains("labels: {peer: 'peer2'}"));
}

namespace {

// The flags of a --help text whose option takes a value but shows no "(default: ...)": each
// option is the lines from one starting "  --" to the next, its flag the text before the first
// run of two spaces (a switch has no placeholder after its name).
std::vector<std::string> without_default(const std::string& usage) {
  std::vector<std::string> missing;
  std::istringstream in(usage);
  std::string flag, block;
  auto close = [&] {
    if (flag.find(' ') != std::string::npos && block.find("(default:") == std::string::npos)
      missing.push_back(flag);
    flag.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  --", 0) == 0) {
      close();
      flag = line.substr(2, line.find("  ", 2) == std::string::npos ? std::string::npos
                                                                     : line.find("  ", 2) - 2);
      block = line;
    } else if (!flag.empty() && line.rfind("    ", 0) == 0) {
      block += " " + line;
    } else {
      close();
    }
  }
  close();
  return missing;
}

std::size_t count_of(const std::string& s, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// A --config file with the given JSON text; parse_peer_args' error, "" when it takes it.
std::string config_error(const std::string& json_text, std::vector<std::string> more = {}) {
  const std::string path = "/tmp/gt-config-test-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << json_text;
  more.insert(more.begin(), {"--config", path});
  const std::string e = peer_error(more);
  std::remove(path.c_str());
  return e;
}

}  // namespace

// Issue 12: --help showed no default for --epochs, --lr, --batch and others.
TEST_CASE("help text: every option of gossip-peer, gossip-launch and gossip-sim that takes a value "
          "shows its default, read from a default-constructed config",
          "[apps]") {
  CHECK(without_default(peer_usage()).empty());
  CHECK(without_default(launch_usage()).empty());
  CHECK(without_default(sim::sim_usage()).empty());
  // One "(default: " per option that takes a value, none for a switch; and no help text carries
  // a hand-written copy of a default that could drift from the config's.
  PeerConfig d;
  std::size_t valued = 0;
  for (const auto& o : peer_options().options()) {
    INFO("--" << o.name);
    CHECK(o.help.find("(default") == std::string::npos);
    if (o.arity == Arity::None) {
      CHECK(o.default_text(d).empty());
    } else {
      CHECK_FALSE(o.default_text(d).empty());
      ++valued;
    }
  }
  const std::string usage = peer_usage();
  CHECK(count_of(usage, "(default:") == valued);
  // The values are the config's own.
  const PeerConfig c;
  CHECK_THAT(usage, Contains("(default: " + std::to_string(c.train.epochs) + ")"));
  CHECK(peer_options().find("epochs")->default_text(d) == std::to_string(c.train.epochs));
  CHECK(peer_options().find("batch")->default_text(d) == std::to_string(c.train.batch));
  CHECK(peer_options().find("lr")->default_text(d) == "0.05");
  CHECK(peer_options().find("mix")->default_text(d) == "clipped");  // the peer's, not the library's
  CHECK(peer_options().find("optimizer")->default_text(d) == "sgd");
  CHECK(peer_options().find("max-lag")->default_text(d) == "auto");
  CHECK(peer_options().find("net-cores")->default_text(d) == "auto");
  CHECK(peer_options().find("ban")->default_text(d) == "30");  // a duration, in seconds
  CHECK(peer_options().find("finish-wire")->default_text(d) == "off");
  CHECK(peer_options().find("metrics")->default_text(d) == "none");
}

TEST_CASE("gossip-peer --help: the flags a first run needs first, the rest under headings",
          "[apps]") {
  const std::string usage = peer_usage();
  std::size_t last = 0;
  for (const char* h : {"A first run:", "Data:", "Model and training:", "Gossip:",
                        "Robust mixing:", "Network:", "Cluster", "Observability:", "FedAvg"}) {
    INFO(h);
    const std::size_t at = usage.find(std::string("\n") + h);
    REQUIRE(at != std::string::npos);
    CHECK(at > last);
    last = at;
  }
  // The first-run group is the first, and holds --data, --epochs and --lr.
  const std::string first = usage.substr(usage.find("A first run:"), usage.find("\nData:") -
                                                                         usage.find("A first run:"));
  for (const char* f : {"--data ", "--model ", "--epochs ", "--lr ", "--seeds ", "--listen "})
    CHECK_THAT(first, Contains(f));
  CHECK(usage.find("--partition ") > usage.find("\nData:"));
  // A layout naming an option twice, none, or one not in the table is a bug, not a --help.
  CHECK_THROWS_AS(peer_options().help(40, {{"All", {"data"}}}), std::logic_error);
  CHECK_THROWS_AS(peer_options().help(40, {{"A", {"nope"}}}), std::logic_error);
}

// Issue 12: a mistyped flag is answered with the nearest one.
TEST_CASE("a mistyped flag or --config key is answered with the nearest known name, exit code 2",
          "[apps]") {
  CHECK(nearest_name("epoch", {"epochs", "lr", "batch"}) == "epochs");
  CHECK(nearest_name("bacth", {"epochs", "lr", "batch"}) == "batch");  // a transposition: 1 edit
  CHECK(nearest_name("zzz", {"epochs", "lr", "batch"}).empty());  // too far: no guess
  CHECK(nearest_name("l", {"lr"}).empty());                       // 1 edit of 2 letters
  CHECK(peer_error({"--epoch", "3"}) ==
        "unknown flag '--epoch'; did you mean '--epochs'? (see --help)");
  CHECK(peer_error({"--no-such-flag", "1"}) == "unknown flag '--no-such-flag' (see --help)");
  CHECK_THAT(peer_error({"--gosip-every=4"}), Contains("did you mean '--gossip-every'?"));
  // gossip-launch: its own flags and the peer flags it forwards.
  CHECK_THROWS_WITH(parse_launch_args({"--peer", "3"}), Contains("did you mean '--peers'?"));
  CHECK_THROWS_WITH(parse_launch_args({"--peers", "3", "--epoch", "3"}),
                    Contains("did you mean '--epochs'?"));
  CHECK_THROWS_WITH(parse_launch_args({"--peers", "3", "--no-plot"}),
                    Contains("did you mean '--no-plots'?"));
  CHECK_THROWS_WITH(parse_launch_args({"--peers", "3", "--no-plot", "--tensorboard"}),
                    Contains("did you mean '--no-plots'?"));
  // A forwarded peer flag with its value missing says so.
  CHECK_THROWS_WITH(parse_launch_args({"--peers", "3", "--epochs"}),
                    Contains("--epochs needs a value"));
  // gossip-sim: its own flags and the training flags it takes.
  CHECK_THROWS_WITH(sim::parse_sim_options({"--peers", "2", "--sim-second", "1"}),
                    Contains("did you mean '--sim-seconds'?"));
  CHECK_THROWS_WITH(
      sim::parse_sim_options({"--peers", "2", "--workload", "train", "--epoch", "1"}),
      Contains("did you mean '--epochs'?"));
  CHECK_THROWS_WITH(sim::parse_sim_options({"--peers", "2", "--sim-seconds", "1", "--net-cores",
                                            "2"}),
                    Contains("gossip-peer flag that gossip-sim does not take"));
  // --config keys.
  CHECK_THAT(config_error(R"({"epoch": 3})"),
             Contains("unknown key 'epoch'; did you mean 'epochs'?"));
}

// Issue 10: {"epochs": "3"} was taken as a number where {"epochs": true} was refused.
TEST_CASE("config files: a key takes the JSON type of its flag: a string where a number is expected "
          "is refused naming the key and the type",
          "[apps]") {
  CHECK_THAT(config_error(R"({"epochs": "3"})"), Contains("'epochs' takes a number"));
  CHECK_THAT(config_error(R"({"epochs": true})"), Contains("'epochs' takes a number"));
  CHECK_THAT(config_error(R"({"lr": "0.1"})"), Contains("'lr' takes a number"));
  CHECK_THAT(config_error(R"({"ban": "30"})"), Contains("'ban' takes a number"));
  CHECK_THAT(config_error(R"({"max-lag": "12"})"), Contains("'max-lag' takes a number"));
  CHECK_THAT(config_error(R"({"data": 5})"), Contains("'data' takes a string"));
  CHECK_THAT(config_error(R"({"fedavg-server": "yes"})"), Contains("true or false"));
  CHECK(config_error(R"({"epochs": 3, "lr": 0.1, "max-lag": "auto", "max-lag-share": "off",
                        "seeds": ["127.0.0.1:7001", "127.0.0.1:7002"], "partition": "iid"})")
            .empty());
  CHECK(config_error(R"({"fedavg-server": true, "listen": "127.0.0.1:0"})").empty());
  CHECK(config_error(R"({"fedavg-server": false})").empty());
  // The values land.
  const std::string path = "/tmp/gt-config-land-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"epochs": 3, "max-lag": "auto", "fedavg-server": true})";
  bool help = false;
  const PeerConfig c = parse_peer_args({"--config", path, "--listen", "127.0.0.1:0"}, &help);
  std::remove(path.c_str());
  CHECK(c.train.epochs == 3);
  CHECK(c.node.max_lag == gossiptrain::gossip::MaxLag());
  CHECK(c.fedavg.server);
}

// Issue 10: an impossible partition was found by the peers, after the run folder was made.
TEST_CASE("gossip-launch: an impossible partition is refused in every mode before anything "
          "starts",
          "[apps]") {
  for (const char* mode : {"gossip", "local", "central", "fedavg"}) {
    for (const char* part : {"classes:20", "shards:7000"}) {
      INFO(mode << " " << part);
      const LaunchOptions o = parse_launch_args(
          {"--mode", mode, "--peers", "3", "--data", "synthetic", "--partition", part});
      const auto plans = plan_peers(o, "/tmp/run", std::vector<int>(std::size_t(o.slots()), 1), "");
      CHECK_THROWS_WITH(check_partitions(plans), Contains("--partition " + std::string(part)));
      CHECK_THROWS_AS(plan_resources(o), UsageError);
    }
    const LaunchOptions ok =
        parse_launch_args({"--mode", mode, "--peers", "3", "--data", "synthetic", "--partition",
                           "dirichlet:0.5"});
    CHECK_NOTHROW(
        check_partitions(plan_peers(ok, "/tmp/run", std::vector<int>(std::size_t(ok.slots()), 1), "")));
  }
  // classes:2 over 8 shards of 10 labels: shard i holds label i and one drawn at random, so
  // labels 8 and 9 are held only if drawn (the issue's fedavg run: one was not).
  const LaunchOptions eight = parse_launch_args(
      {"--mode", "fedavg", "--peers", "8", "--data", "synthetic", "--partition", "classes:2"});
  CHECK_THROWS_WITH(
      check_partitions(plan_peers(eight, "/tmp/run", std::vector<int>(9, 1), "")),
      Contains("with no peer"));
}
