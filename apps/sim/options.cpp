// gossip-sim's flags.
#include "apps/sim/options.hpp"

#include <algorithm>
#include <cmath>

#include "core/dataset.hpp"
#include "core/trainer.hpp"
#include "gossip/exchange/fault.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace gossiptrain::apps::sim {

void parse_latency(const std::string& spec, SimConfig& cfg) {
  auto ms = [&](const std::string& v) {
    return net::Millis(static_cast<long long>(to_int("latency", v, 0, 600000)));
  };
  if (spec.rfind("constant:", 0) == 0) {
    cfg.latency = ms(spec.substr(9));
    cfg.jitter = net::Millis(0);
    return;
  }
  if (spec.rfind("uniform:", 0) == 0) {
    const std::string rest = spec.substr(8);
    const auto colon = rest.find(':');
    if (colon == std::string::npos)
      throw UsageError("--latency: uniform needs uniform:LO:HI (ms), got '" + spec + "'");
    const auto lo = ms(rest.substr(0, colon)), hi = ms(rest.substr(colon + 1));
    if (hi < lo) throw UsageError("--latency: uniform:LO:HI needs LO <= HI, got '" + spec + "'");
    cfg.latency = lo;
    cfg.jitter = hi - lo;
    return;
  }
  if (spec.rfind("lognormal:", 0) == 0) {
    const std::string rest = spec.substr(10);
    const auto colon = rest.find(':');
    if (colon == std::string::npos)
      throw UsageError("--latency: lognormal needs lognormal:MEDIAN:SIGMA, got '" + spec + "'");
    cfg.latency = ms(rest.substr(0, colon));
    cfg.jitter = net::Millis(0);
    cfg.latency_sigma = to_double("latency", rest.substr(colon + 1), 0, 3);
    return;
  }
  throw UsageError(
      "--latency: expected constant:MS, uniform:LO:HI or lognormal:MEDIAN:SIGMA, got '" + spec +
      "'");
}

namespace {

// --latency's default as the flag would give it.
std::string latency_spec(const SimConfig& w) {
  const std::string base = std::to_string(w.latency.count());
  if (w.latency_sigma > 0) return "lognormal:" + base + ":" + show_value(w.latency_sigma);
  if (w.jitter.count() > 0) return "uniform:" + base + ":" + std::to_string((w.latency + w.jitter).count());
  return "constant:" + base;
}

// A fault event's mode as the averager reads it, checked before the run (the scenario parser
// takes scale:0, which gossip-peer --fault refuses).
void check_simulable(const core::ChurnScenario& s) {
  for (std::size_t k = 0; k < s.events.size(); ++k) {
    if (s.events[k].kind != core::ChurnKind::Fault) continue;
    try {
      gossip::parse_fault(s.events[k].mode);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--churn: event " + std::to_string(k) + " (fault): " + e.what());
    }
  }
}

// What parsing gathers besides the options: the required flags seen, the churn argument.
struct SimArgs {
  SimOptions o;
  std::string churn;
  std::vector<std::string> peer_args;  // gossip-peer flags for the train workload
  bool have_peers = false, have_seconds = false;
};
using O = Options<SimArgs>;

template <class T>
auto world(T SimConfig::*field) {
  return [field](SimArgs& a) -> T& { return a.o.world.*field; };
}

const OptionTable<SimArgs>& sim_options() {
  static const OptionTable<SimArgs> table({
      Option<SimArgs>{"peers", "N", "initial peers (1..32768, the largest member table)",
       [](SimArgs& a, const std::string& v) {
         a.o.world.peers = int(to_int("peers", v, 1, 32768));
         a.have_peers = true;
       }}.unset_means("none: required").of_kind(ValueKind::Number),
      Option<SimArgs>{"workload", "W",
       "consensus (random vectors, averaging only) or train (every peer trains the model on its "
       "shard, with gossip-peer's training flags)",
       [](SimArgs& a, const std::string& v) {
         if (v != "consensus" && v != "train")
           throw UsageError("--workload: expected consensus|train, got '" + v + "'");
         a.o.world.workload = v;
       }}.shows([](SimArgs& a) { return a.o.world.workload; }).of_kind(ValueKind::Text),
      Option<SimArgs>{"sim-seconds", "S", "simulated time (> 0); for train a cap",
       [](SimArgs& a, const std::string& v) {
         a.o.world.sim_seconds = to_double("sim-seconds", v, 0.001, 1e7);
         a.have_seconds = true;
       }}.unset_means("none: required for consensus, train runs until every peer has trained")
          .of_kind(ValueKind::Number),
      O::number("seed", "X",
                "seed of everything (vectors, network, protocol choices, and the peers' --seed: "
                "partition, initial weights, sample order)",
                world(&SimConfig::seed), 0, double(1LL << 53)),
      Option<SimArgs>{"out", "DIR", "run folder (absent or empty)",
       [](SimArgs& a, const std::string& v) {
         if (v.empty()) throw UsageError("--out needs a folder");
         a.o.out = v;
       }}.unset_means("runs/sim-<N>p-<UTC time>").of_kind(ValueKind::Text),
      O::number("params", "P", "floats per peer (1..67108864)",
                world(&SimConfig::params), 1, double(1LL << 26)),
      O::number("exchange-interval", "S",
                "each peer starts an exchange every S simulated seconds",
                world(&SimConfig::exchange_interval_s), 0.001, 86400),
      O::number("sample-every", "S", "consensus sample period in simulated seconds",
                world(&SimConfig::sample_every_s), 0.001, 1e7),
      O::number("rate-rounds", "K",
                "round boundaries (n/2 exchanges) sampled for the rate check",
                world(&SimConfig::rate_rounds), 0, 1000),
      O::number("join-spread", "S", "non-seed peers start uniformly in [0, S)",
                world(&SimConfig::join_spread_s), 0, 3600),
      O::number("idle-timeout", "S",
                "membership closes a connection it dialed after S simulated seconds without "
                "membership traffic (as gossip-peer's); shorter keeps fewer connections "
                "open in a swarm of thousands",
                world(&SimConfig::idle_timeout_s), 0.1, 86400),
      O::number("seeds", "K", "peers 0..K-1 are everyone's seeds",
                world(&SimConfig::seeds), 1, 100),
      O::text(
          "churn", "FILE|SPEC",
          "a gossip-launch churn scenario (crash, stop, restart, join, pause, resume, partition, "
          "heal, link, fault, the random crash/stop/pause model)",
          &SimArgs::churn),
      O::number("loss", "F", "drop probability of each membership message, in [0, 0.5]",
                world(&SimConfig::loss), 0, 0.5),
      Option<SimArgs>{"latency", "SPEC",
       "one-way latency: constant:MS, uniform:LO:HI (per message), or lognormal:MEDIAN:SIGMA "
       "(per link: MEDIAN * exp(SIGMA * Z), SIGMA in [0, 3])",
       [](SimArgs& a, const std::string& v) { parse_latency(v, a.o.world); }}
          .shows([](SimArgs& a) { return latency_spec(a.o.world); })
          .of_kind(ValueKind::Text),
      O::number("bandwidth", "MBIT",
                "each peer's uplink in Mbit/s: its messages leave one after another at this rate "
                "(0: unlimited)",
                world(&SimConfig::bandwidth_mbit), 0, 1e6),
      Option<SimArgs>{"topology", "FILE",
       "regions and the one-way latency between them (JSON: {\"regions\": [{\"name\", "
       "\"weight\"}...], \"latency_ms\": [[...]...]}), added to --latency",
       [](SimArgs& a, const std::string& v) {
         try {
           a.o.world.topology = load_topology(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(std::string("--topology: ") + e.what());
         }
       }}.unset_means("none: --latency alone").of_kind(ValueKind::Text),
      O::named<gossip::MixMode>(
          "mix", {{"plain", gossip::MixMode::Plain}, {"clipped", gossip::MixMode::Clipped}},
          "the averager's mixing",
          world(&SimConfig::mix))
          .shows([](SimArgs&) {
            return std::string("plain for --workload consensus; clipped, gossip-peer's default, "
                               "for --workload train");
          }),
      O::number("step-ms", "MS",
                "train: the simulated time of one training step (0: measured once at start on "
                "this machine)",
                world(&SimConfig::step_ms), 0, 1e6),
      O::flag("trace-exchanges", "one events.jsonl line per exchange side",
              world(&SimConfig::trace_exchanges)),
      O::flag(
          "no-plots", "do not run scripts/plot/plot_sim.py on the run folder at the end",
          [](SimArgs& a) -> bool& { return a.o.plots; }, false),
      O::text("log-level", "L", "spdlog level of the protocol code",
              [](SimArgs& a) -> std::string& { return a.o.log_level; }),
  });
  return table;
}

// A flag not in gossip-sim's own table: a gossip-peer flag tagged for gossip-sim (kGossipSim in
// apps/common/options.cpp: the data and its split, the model and its training, how a peer
// averages and waits) goes to the simulated peers; --seed is gossip-sim's own.
void unknown_flag(SimArgs& a, const std::string& name, const std::string& value) {
  const auto* o = peer_options().find(name);
  if (o && o->for_program(kGossipSim)) {
    a.peer_args.push_back("--" + name + "=" + value);
    return;
  }
  if (o)
    throw UsageError("--" + name + " is a gossip-peer flag that gossip-sim does not take (see --help)");
  std::vector<std::string> known = sim_options().names();
  const auto peer = peer_options().names(kGossipSim);
  known.insert(known.end(), peer.begin(), peer.end());
  throw apps::unknown_flag(name, known);
}

}  // namespace

SimOptions parse_sim_options(const std::vector<std::string>& args) {
  SimArgs a;
  if (!sim_options().parse(args, a, unknown_flag)) {
    a.o.help = true;
    return a.o;
  }
  if (!a.have_peers) throw UsageError("--peers is required");
  SimOptions& o = a.o;
  if (!a.have_seconds && !o.world.train())
    throw UsageError("--sim-seconds is required (for the consensus workload)");
  if (!o.world.train()) {
    // --partner-choice is the one peer flag the consensus workload takes: its peers pick partners
    // with gossip-peer's code.
    for (const auto& arg : a.peer_args)
      if (arg.rfind("--partner-choice=", 0) != 0)
        throw UsageError("training flags (" + arg + ") need --workload train");
    if (!a.peer_args.empty()) {
      bool help = false;
      o.world.peer.node.averager.choice =
          parse_peer_args(a.peer_args, &help).node.averager.choice;
    }
  }
  if (o.world.train()) {
    bool help = false;
    try {
      o.world.peer = parse_peer_args(a.peer_args, &help);
      o.world.peer.train.seed = o.world.seed;
      auto given = [&](const std::string& flag) {
        return std::any_of(a.peer_args.begin(), a.peer_args.end(),
                           [&](const std::string& arg) { return arg.rfind(flag + "=", 0) == 0; });
      };
      // gossip-peer's --backend default is auto; the sim's is cpu, so that a run does not change
      // with the machine it runs on.
      if (!given("--backend")) o.world.peer.backend = kernels::BackendKind::Cpu;
      // The backend's own rule, before any run folder.
      if (o.world.peer.backend == kernels::BackendKind::Cpu) {
        try {
          kernels::CpuBackend().set_precision(o.world.peer.precision);
        } catch (const kernels::BackendError& e) {
          throw UsageError(e.what());
        }
      }
      // --mix is gossip-sim's flag; for training peers it overrides gossip-peer's default only
      // when given.
      for (const auto& arg : args)
        if (arg == "--mix" || arg.rfind("--mix=", 0) == 0) o.world.peer.node.averager.robust.mix = o.world.mix;
      // Every sim peer gossips: gossip-peer's --linger default for a peer with seeds (10 s).
      if (!given("--linger")) o.world.peer.linger_s = kDefaultLingerS;
      core::validate(o.world.peer.train);
      // The data's labels and shape now, so that a missing or bad data set is refused before the
      // run folder is made.
      core::check_input_features(o.world.peer.train.model,
                                 core::load_labels(o.world.peer.data).features);
    } catch (const UsageError& e) {
      throw UsageError(std::string("train: ") + e.what());
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("train: ") + e.what());
    } catch (const core::DataError& e) {
      throw UsageError(std::string("--data: ") + e.what());
    }
  }
  if (!a.churn.empty()) {
    try {
      o.world.churn = core::load_churn_scenario(a.churn, o.world.peers);
    } catch (const core::ScenarioError& e) {
      throw UsageError(std::string("--churn: ") + e.what());
    }
    check_simulable(*o.world.churn);
  }
  return o;
}

std::string sim_usage() {
  return "gossip-sim: N peers in one process, each running gossip-peer's gossip node (membership,\n"
         "averaging, catch-up, --max-lag and --max-ahead) over the seeded in-memory network on a\n"
         "virtual clock.\n\n"
         "  gossip-sim --peers N --workload consensus --sim-seconds S --seed X --out DIR "
         "[options]\n"
         "  gossip-sim --peers N --workload train [--sim-seconds S] --seed X --out DIR [options]\n"
         "             [training flags]\n\n" +
         sim_options().help(25) +
         "\ngossip-peer's flags a simulated peer takes (--workload train; --partner-choice with\n"
         "consensus too), from gossip-peer's own table. Peer i trains shard i of every peer slot\n"
         "(joiners included). --backend cpu is the default here (gossip-peer's is auto): cuda\n"
         "runs every peer on the one backend of the process, one after another (one GPU, one\n"
         "stream); the simulated step time is --step-ms or measured on that backend. --max-lag\n"
         "and --max-ahead waits run on the virtual clock.\n\n" +
         peer_options().help(40, peer_help_groups(), kGossipSim);
}

}  // namespace gossiptrain::apps::sim
