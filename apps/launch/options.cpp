// gossip-launch flag parsing and the per-peer argv plan (see launch_options.hpp).
#include "apps/launch/options.hpp"

#include "apps/launch/netns.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace gossiptrain::apps {

namespace {

// Peer flags the launcher sets for each peer itself; a user value would break the run's layout.
const std::set<std::string>& owned_peer_flags() {
  static const std::set<std::string> s = {"listen", "advertise", "seeds",     "identity",
                                          "metrics", "checkpoint-dir", "shard", "num-shards",
                                          "prometheus", "tensorboard", "export", "from-checkpoint"};
  return s;
}

// --churn: the whole scenario is checked before any process starts; what this launcher cannot run
// yet is refused here too, never skipped silently during the run.
core::ChurnScenario load_churn(const LaunchOptions& o) {
  if (o.mode != LaunchMode::Gossip && o.mode != LaunchMode::Fedavg)
    throw UsageError("--churn needs --mode gossip or fedavg (crashed, restarted and joining peers "
                     "are about peers that talk to each other)");
  core::ChurnScenario s;
  try {
    s = core::load_churn_scenario(o.churn_arg, o.peers);
  } catch (const core::ScenarioError& e) {
    throw UsageError(std::string("--churn: ") + e.what());
  }
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    const std::string name(core::churn_kind_name(e.kind));
    if (o.mode == LaunchMode::Fedavg && e.kind == core::ChurnKind::Fault)
      throw UsageError("--churn: event " + std::to_string(i) +
                       " (fault): faulty models are a gossip experiment (--mode gossip)");
    if (!o.netns && (e.kind == core::ChurnKind::Partition || e.kind == core::ChurnKind::Heal ||
                     e.kind == core::ChurnKind::Link))
      throw UsageError("--churn: event " + std::to_string(i) + " (" + name +
                       "): network events need every peer in its own network namespace "
                       "(--netns, as root)");
  }
  if (core::total_peers(s) > 256)
    throw UsageError("--churn: the scenario needs " + std::to_string(core::total_peers(s)) +
                     " peer slots (at most 256)");
  return s;
}

// "0,1,3" -> {0, 1, 3}: distinct device numbers.
std::vector<int> parse_gpus(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) throw UsageError("--gpus: empty device number in '" + v + "' (e.g. 0,1,2)");
    const int g = int(to_int("gpus", item, 0, 1023));
    if (std::find(out.begin(), out.end(), g) != out.end())
      throw UsageError("--gpus: device " + item + " named twice in '" + v + "'");
    out.push_back(g);
  }
  if (out.empty()) throw UsageError("--gpus needs device numbers, e.g. 0,1,2");
  return out;
}

}  // namespace

std::string gpu_plan_note(const LaunchOptions& o) {
  if (o.gpus.empty()) return "";
  const int n = o.slots(), g = int(o.gpus.size());
  std::string s = std::to_string(n) + " peer" + (n == 1 ? "" : "s") + " on " + std::to_string(g) +
                  " GPU" + (g == 1 ? "" : "s") + " (peer i on device gpus[i % " +
                  std::to_string(g) + "])";
  if (n > g) {
    const int most = (n + g - 1) / g;
    s += "; WARNING: up to " + std::to_string(most) +
         " peers share one GPU. Separate processes time-share a GPU: measured on an H100, 8 peers "
         "of mlp:784-256-256-10 on one GPU took about 3 ms per step each, against 0.19 ms "
         "for one peer alone (docs/cuda.md, GPUs)";
  }
  return s;
}

const char* mode_name(LaunchMode m) {
  switch (m) {
    case LaunchMode::Gossip: return "gossip";
    case LaunchMode::Local: return "local";
    case LaunchMode::Central: return "central";
    case LaunchMode::Fedavg: return "fedavg";
  }
  return "?";
}

// "I:--name=value" or "I:--name" -> (I, {"--name", "value"}); owned flags are refused.
std::pair<int, std::vector<std::string>> parse_peer_flag(const std::string& v) {
  const auto colon = v.find(':');
  if (colon == std::string::npos || colon == 0)
    throw UsageError("--peer-flags: bad value '" + v + "' (I:--name=value)");
  const int i = int(to_int("peer-flags", v.substr(0, colon), 0, 255));
  const Flag f = split_flag(v.substr(colon + 1));
  if (owned_peer_flags().count(f.name))
    throw UsageError("--peer-flags: --" + f.name + " is set by gossip-launch for each peer");
  std::vector<std::string> a{"--" + f.name};
  if (f.has_value) a.push_back(f.value);
  return {i, a};
}

namespace {

using O = Options<LaunchOptions>;

// A port whose 0 means something else ("off").
auto show_zero_as(int LaunchOptions::*field, std::string zero) {
  return [field, zero](LaunchOptions& o) { return o.*field == 0 ? zero : show_value(o.*field); };
}

LaunchMode parse_mode(const std::string& v) {
  if (v == "gossip") return LaunchMode::Gossip;
  if (v == "local") return LaunchMode::Local;
  if (v == "central") return LaunchMode::Central;
  if (v == "fedavg") return LaunchMode::Fedavg;
  throw UsageError("--mode: bad value '" + v + "' (one of gossip|local|central|fedavg)");
}

const OptionTable<LaunchOptions>& launch_options() {
  static const OptionTable<LaunchOptions> table({
      O::number("peers", "N", "number of peers", &LaunchOptions::peers, 1, 256),
      Option<LaunchOptions>{"mode", "MODE",
       "gossip: peers on 127.0.0.1 average with each other; local: the same peers and "
       "shards, no network, no averaging; central: one peer on all the data (--num-shards 1); "
       "--peers is ignored (a note says so), so the same flags serve all three modes; fedavg: a "
       "FedAvg server (peer0) and N clients (peer1..N) on the shards N gossip peers would have, "
       "over the same encrypted channel (server flags --rounds, --clients-per-round, "
       "--local-epochs, --fedprox-mu, --server-momentum, --round-timeout are forwarded)",
       [](LaunchOptions& o, const std::string& v) { o.mode = parse_mode(v); }}
          .shows([](LaunchOptions& o) { return std::string(mode_name(o.mode)); })
          .of_kind(ValueKind::Text),
      Option<LaunchOptions>{"out", "DIR", "run folder; must not exist or be empty",
       [](LaunchOptions& o, const std::string& v) {
         if (v.empty()) throw UsageError("--out needs a folder");
         o.out = v;
       }}.unset_means("runs/<mode>-<partition>-<N>p-<UTC timestamp>").of_kind(ValueKind::Text),
      O::number("base-port", "P",
                "peers listen on P, P+1, ...", &LaunchOptions::base_port, 1024, 65535)
          .shows(show_zero_as(&LaunchOptions::base_port, "free ports under the ephemeral range")),
      O::number("target-acc", "X", "accuracy for the time-to-target figures",
                &LaunchOptions::target_acc, 0, 1),
      O::number("stop-timeout", "S",
                "on Ctrl-C / SIGTERM, seconds to wait before SIGKILL",
                &LaunchOptions::stop_timeout_s, 0, 3600),
      O::number("consensus-every", "S",
                "sample the consensus distance at most every S seconds, and whenever every peer "
                "has a new checkpoint",
                &LaunchOptions::consensus_every_s, 0.5, 3600),
      O::number("prometheus-base-port", "P",
                "peer i serves Prometheus /metrics on 127.0.0.1:P+i; the run folder gets a ready "
                "prometheus.yml",
                &LaunchOptions::prometheus_base_port, 1024, 65535)
          .shows(show_zero_as(&LaunchOptions::prometheus_base_port, "off")),
      O::flag("tensorboard", "every peer writes TensorBoard event files under RUN/tensorboard/peerI",
              &LaunchOptions::tensorboard, true),
      O::flag("export-model",
              "at the end, average the finished peers' models into RUN/swarm/model.safetensors, "
              "evaluate it once and report it in summary.json (swarm_model)",
              &LaunchOptions::export_model, true),
      O::flag("no-plots", "skip scripts/plot/plot_run.py", &LaunchOptions::plots, false),
      O::text("peer-bin", "PATH",
              "the gossip-peer to run, or an executable script that takes gossip-peer's flags "
              "(a Python peer: docs/python.md)",
              &LaunchOptions::peer_bin)
          .unset_means("next to gossip-launch"),
      Option<LaunchOptions>{"peer-flags", "I:--name=value",
       "a peer flag for peer I only, after the forwarded ones (repeatable; e.g. --peer-flags "
       "7:--lr=8 for one diverging peer)",
       [](LaunchOptions& o, const std::string& v) { o.peer_flags.push_back(parse_peer_flag(v)); }}
          .unset_means("none"),
      O::text("churn", "FILE|SHORTHAND",
              "run a churn scenario against the peers: crashes (SIGKILL), graceful stops, restarts "
              "from the checkpoint, joins of new peers, pauses (SIGSTOP/SIGCONT), at times or at "
              "points of training; every event goes to events.jsonl and summary.json's \"churn\" "
              "section. FILE is JSON (scripts/scenarios/*.json); shorthands: see below. With "
              "--mode fedavg peer 0 is the server and 1..N the clients (docs/fedavg.md)",
              &LaunchOptions::churn_arg),
      O::flag("netns",
              "every peer in its own network namespace with its own address (10.88.x.y) on a "
              "bridge, talking real TCP as on separate machines; needed for the scenario's "
              "partition and link events (nftables drop rules, tbf qdiscs; no delay: this kernel "
              "has no netem). Root only; everything is removed at the end and on Ctrl-C",
              &LaunchOptions::netns),
      O::flag("cleanup", "remove the namespaces a killed launcher left behind, then exit",
              &LaunchOptions::cleanup),
      Option<LaunchOptions>{"gpus", "0,1,...",
       "spread the peers over these CUDA devices (peer i on the (i mod n)-th); warns when several "
       "peers must share one GPU, which time-shares it",
       [](LaunchOptions& o, const std::string& v) { o.gpus = parse_gpus(v); }}
          .unset_means("each peer's own --device"),
      Option<LaunchOptions>{"compare", "DIR...",
                            "print the summaries of finished runs side by side",
                            [](LaunchOptions& o, const std::string& v) { o.compare.push_back(v); },
                            Arity::Many}
          .unset_means("none: start a run"),
      O::flag("markdown", "with --compare: a Markdown table", &LaunchOptions::markdown),
      O::text("report", "DIR",
              "start nothing: read every peer's metrics file under DIR (found recursively: SLURM, "
              "containers, copies from several machines) and write summary.json, table.txt and "
              "the plots, as a local launch does, into --out (DIR itself unless given)",
              &LaunchOptions::report),
      O::text("ended-by", "SIGNAL",
              "with --report: what ended the run (the sbatch script passes the signal it trapped, "
              "SIGTERM on scancel or the time limit); summary.json \"ended_by\"",
              &LaunchOptions::ended_by),
      O::text("resume", "DIR",
              "resume an interrupted run: its command (DIR/command.txt) again in DIR, each peer "
              "restarting from its checkpoint with the same identity, network key and shard "
              "(no other flag; not for --churn runs)",
              &LaunchOptions::resume),
  });
  return table;
}

// A flag not in the launcher's table is a peer flag: forwarded to every peer, unless the launcher
// sets it for each peer itself.
void forward_peer_flag(LaunchOptions& o, const std::string& name, const std::string& value) {
  if (!peer_options().find(name)) {
    std::vector<std::string> known = launch_options().names();
    for (const auto& n : peer_options().names()) known.push_back(n);
    throw unknown_flag(name, known);
  }
  if (value.empty() && peer_options().find(name)->arity != Arity::None)
    throw UsageError("--" + name + " needs a value (" + peer_options().find(name)->arg + ")");
  if (owned_peer_flags().count(name))
    throw UsageError("--" + name +
                     " is set by gossip-launch for each peer (ports, seeds, shards and files "
                     "follow from --peers, --mode, --base-port and --out)");
  o.forward.push_back("--" + name);
  o.forward.push_back(value);
}

// The forwarded flags go through gossip-peer's own parser once here, so a bad value or an unknown
// flag stops the launch before any process starts, with the peer's message. The launcher reads
// some of them too.
void read_forwarded(LaunchOptions& o) {
  bool help = false;
  const PeerConfig base = parse_peer_args(o.forward, &help);
  o.partition = base.partition;
  o.data = base.data;
  o.seed = base.train.seed;
  o.network_key = base.network_key;
  o.blas_core = base.blas_core;
  if (!o.gpus.empty()) {
    if (base.backend == kernels::BackendKind::Cpu)
      throw UsageError("--gpus places peers on CUDA devices; it does not go with --backend cpu");
    for (const auto& f : o.forward)
      if (f == "--device")
        throw UsageError("--gpus and --device both choose the peers' GPUs: give one of them");
  }
}

}  // namespace

std::vector<std::string> shell_split(const std::string& line) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string::npos) throw UsageError("unterminated quote in: " + line);
      w += line.substr(i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      w += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(w));
      w.clear();
      in_word = false;
    } else {
      w += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(w));
  return words;
}

namespace {

// --resume DIR: the options of the run in DIR, from the first line of its command.txt.
LaunchOptions resume_options(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path cmd = fs::path(dir) / "command.txt";
  std::ifstream in(cmd);
  std::string line;
  if (!fs::is_regular_file(fs::path(dir) / "config.json", ec) || !std::getline(in, line))
    throw UsageError("--resume " + dir +
                     ": not a gossip-launch run folder (no command.txt and "
                     "config.json)");
  std::vector<std::string> words = shell_split(line);
  if (words.empty()) throw UsageError("--resume: " + cmd.string() + " is empty");
  words.erase(words.begin());  // the launcher's own path
  for (const auto& w : words)
    if (w == "--resume" || w.starts_with("--resume="))
      throw UsageError("--resume: " + cmd.string() + " is itself a --resume command");
  LaunchOptions o = parse_launch_args(words);
  if (o.churn)
    throw UsageError("--resume: the run in " + dir +
                     " has a --churn scenario, which would replay from its start; start a new run");
  o.out = dir;
  o.resume = dir;
  return o;
}

}  // namespace

LaunchOptions parse_launch_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  if (!launch_options().parse(args, o, forward_peer_flag)) {
    o.help = true;
    return o;
  }
  if (!o.resume.empty()) {
    if (args.size() != 2 && !(args.size() == 1 && args[0].starts_with("--resume=")))
      throw UsageError("--resume DIR takes no other flag: the run's own come from DIR/command.txt");
    return resume_options(o.resume);
  }
  if (!o.ended_by.empty() && o.report.empty())
    throw UsageError("--ended-by needs --report (it names what ended the run being reported)");
  if (!o.compare.empty() || o.cleanup || !o.report.empty()) return o;
  o.peers_requested = o.peers;
  if (o.netns && o.mode != LaunchMode::Gossip)
    throw UsageError("--netns needs --mode gossip (only averaging peers talk over the network)");
  if (o.mode == LaunchMode::Central) o.peers = 1;
  if (o.mode == LaunchMode::Fedavg) {
    o.peers += 1;  // slot 0: the server (also in --churn scenarios: clients are 1..N)
  }
  if (o.base_port > 0 && o.base_port + o.peers - 1 > 65535)
    throw UsageError("--base-port " + std::to_string(o.base_port) + " leaves no room for " +
                     std::to_string(o.peers) + " ports");
  if (o.prometheus_base_port > 0 && o.prometheus_base_port + o.slots() - 1 > 65535)
    throw UsageError("--prometheus-base-port leaves no room for " + std::to_string(o.slots()) +
                     " ports");
  if (o.prometheus_base_port > 0 && o.netns)
    throw UsageError("--prometheus-base-port with --netns: the peers' endpoints would be inside "
                     "their namespaces; pass --prometheus per peer with --peer-flags instead");
  read_forwarded(o);
  if (!o.churn_arg.empty()) o.churn = load_churn(o);
  for (const auto& [i, f] : o.peer_flags)
    if (i >= o.slots())
      throw UsageError("--peer-flags: no peer " + std::to_string(i) + " in this run");
  return o;
}

int seed_count(int peers) {
  if (peers <= 2) return std::max(1, peers);
  if (peers < 16) return 2;
  return std::min(8, 4 + peers / 64);
}

void append_launch_flags(std::vector<std::string>& a, const LaunchOptions& o, int i,
                         const std::string& network_key) {
  a.insert(a.end(), o.forward.begin(), o.forward.end());
  for (const auto& [k, f] : o.peer_flags)
    if (k == i) a.insert(a.end(), f.begin(), f.end());
  if (o.network_key.empty() && !network_key.empty())
    a.insert(a.end(), {"--network-key", network_key});
  if (!o.gpus.empty())
    a.insert(a.end(), {"--device", std::to_string(o.gpus[std::size_t(i) % o.gpus.size()])});
}

std::vector<PeerPlan> plan_peers(const LaunchOptions& o, const std::string& run_dir,
                                 const std::vector<int>& ports, const std::string& network_key) {
  if (o.mode == LaunchMode::Fedavg) return plan_fedavg(o, run_dir, ports, network_key);
  std::vector<PeerPlan> plans;
  const bool gossip = o.mode == LaunchMode::Gossip;
  // With --netns each peer has its own address (NetnsSwarm::address) and listens on every local
  // interface of its namespace, announcing that address, as on separate machines.
  auto addr = [&](int i) {
    if (o.netns) return NetnsSwarm::address(i) + ":" + std::to_string(kNetnsPort);
    return "127.0.0.1:" + std::to_string(ports.at(std::size_t(i)));
  };
  const int slots = o.slots();
  for (int i = 0; i < slots; ++i) {
    PeerPlan p;
    p.index = i;
    p.dir = run_dir + "/peer" + std::to_string(i);
    std::vector<std::string>& a = p.argv;
    // The peers share this machine's cores: training yields to the network threads, or exchanges
    // starve behind the other peers' steps. Before the forwarded flags, which may override it.
    // Pinning is per process and would put every peer's network threads on the same few cores:
    // the peers of one launch share the machine through priorities instead.
    if (gossip) a = {"--net-nice", "0", "--train-nice", "5", "--net-cores", "0"};
    // The first peers wait for each other before their first step (a fast backend finishes
    // before the last one starts otherwise); joined peers find the swarm running.
    if (gossip && i < o.peers && o.peers > 1)
      a.insert(a.end(), {"--min-peers", std::to_string(o.peers)});
    // Under churn a crashed peer loses what it trained since its last checkpoint, and one that
    // had none starts over: checkpoint often.
    if (o.churn) a.insert(a.end(), {"--checkpoint-every", "5"});
    append_launch_flags(a, o, i, network_key);
    a.insert(a.end(), {"--num-shards", std::to_string(slots), "--shard", std::to_string(i),
                       "--identity", p.dir + "/identity.key", "--metrics", p.dir + "/metrics.jsonl",
                       "--checkpoint-dir", p.dir + "/ckpt"});
    if (o.prometheus_base_port > 0)
      a.insert(a.end(), {"--prometheus", "127.0.0.1:" + std::to_string(o.prometheus_base_port + i)});
    if (o.tensorboard)
      a.insert(a.end(), {"--tensorboard", run_dir + "/tensorboard/peer" + std::to_string(i)});
    if (gossip) {
      p.listen = addr(i);
      // Every peer joins through the first seed_count peers (but itself), so one seed's restart
      // does not stall joins; a seed names the other seeds so that, having lost everyone, it
      // still has someone to re-dial.
      const int k = std::min(seed_count(o.peers), slots);
      for (int j = 0; j < k; ++j)
        if (j != i) p.seeds.push_back(addr(j));
      if (o.netns) {
        p.advertise = p.listen;
        p.listen = "0.0.0.0:" + std::to_string(kNetnsPort);
        a.insert(a.end(), {"--listen", p.listen, "--advertise", p.advertise});
      } else {
        a.insert(a.end(), {"--listen", p.listen});
      }
      if (!p.seeds.empty()) {
        std::string s;
        for (const auto& x : p.seeds) s += (s.empty() ? "" : ",") + x;
        a.insert(a.end(), {"--seeds", s});
      }
    }
    bool help = false;
    try {
      p.config = parse_peer_args(a, &help);
    } catch (const UsageError& e) {
      throw UsageError("peer " + std::to_string(i) + ": " + e.what());
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

std::string launch_usage() {
  std::string u =
      R"(usage: gossip-launch --peers N [--out DIR] [--mode gossip|local|central|fedavg] [flags...]
       gossip-launch --compare RUN_DIR... [--markdown]
       gossip-launch --report DIR [--out OUT] [--target-acc A] [--ended-by SIGNAL]
                                               (peers' metrics from anywhere)
       gossip-launch --resume RUN_DIR          (an interrupted run, from its checkpoints)

Starts N gossip-peer processes on this machine, shows their progress live on stderr, and
writes a run folder a person can read: command.txt, config.json, peerI/{metrics.jsonl,
log.txt,ckpt/,identity.key}, consensus.jsonl, summary.json and PNG plots.

Launcher flags:
@FLAGS@

Peer flags (see gossip-peer --help) are passed to every peer: --data, --partition, --seed,
--model, --backend, --epochs, --batch, --lr, --gossip-every, --wire, --network-key, ...
The launcher sets --listen, --seeds, --identity, --metrics, --checkpoint-dir, --shard and
--num-shards itself, and in gossip mode --min-peers N for the first N peers, so that no peer
trains alone while the others start (a forwarded --min-peers overrides it). In gossip mode
it writes a fresh network key into the run folder unless --network-key is given.

Churn shorthands (--churn without a file):
@CHURN_HELP@
Exit codes: 0 every peer finished, 1 a peer failed (its row and summary.json say how),
2 bad flag, value or input, 130 interrupted (the summary is still written).
Plots need python3 with matplotlib (/usr/bin/python3 is tried first); set GT_SCRIPTS_DIR
to the folder holding plot_run.py if it is not found.
)";
  u.replace(u.find("@CHURN_HELP@"), 12, core::kChurnShorthandHelp);
  u.replace(u.find("@FLAGS@\n"), 8,
            launch_options().help(25) + help_line("--help", "this text", 25));
  return u;
}

}  // namespace gossiptrain::apps
