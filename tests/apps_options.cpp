// The option tables of the CLIs (apps/common/option_table.hpp): parsing, the one HOST:PORT rule, the one
// --lr range, --help from the table, and gossip-launch's --consensus-every reaching the sampler.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "apps/launch/observe.hpp"
#include "apps/launch/options.hpp"
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
  CHECK_THAT(help, Contains("  --n N             an integer\n"));
  CHECK_THAT(help, Contains("  --mode a|b        a choice\n"));
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
  CHECK(parse_peer_args({"--max-lag-share", "0.5"}, &help).max_lag_share == 0.5);
  CHECK(parse_peer_args({"--max-lag-share", "off"}, &help).max_lag_share == 0.0);
  CHECK(parse_peer_args({}, &help).max_lag_share == 0.25);
  for (const char* bad : {"0", "-1", "101", "fast"})
    CHECK_THAT(peer_error({"--max-lag-share", bad}), Contains("--max-lag-share"));
  CHECK(parse_peer_args({"--max-ahead", "off"}, &help).max_ahead == 0.0);
  for (const char* bad : {"2", "0", "1", "-0.5"})
    CHECK_THAT(peer_error({"--max-ahead", bad}), Contains("--max-ahead"));
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
