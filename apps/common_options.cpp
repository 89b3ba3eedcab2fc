// Flag and --config parsing for gossip-peer; one table of options drives parsing, JSON and --help.
#include "apps/common_options.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/partition.hpp"
#include "gossip/averager.hpp"
#include "kernels/backend.hpp"
#include "net/address.hpp"
#include "net/crypto_pool.hpp"

namespace gossiptrain::apps {

namespace {

struct Option {
  std::string name;  // without the leading dashes
  std::string arg;   // value placeholder for --help
  std::string help;
  std::function<void(PeerConfig&, const std::string&)> set;
};

UsageError bad_value(const std::string& flag, const std::string& v, const std::string& want) {
  return UsageError("--" + flag + ": bad value '" + v + "' (" + want + ")");
}

std::string one_of(const std::string& flag, const std::string& v,
                   std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : "|") + std::string(a);
  }
  throw bad_value(flag, v, "one of " + list);
}

const std::vector<Option>& options() {
  static const std::vector<Option> opts = {
      {"listen", "HOST:PORT", "address to listen on for other peers (port 0: any free port)",
       [](PeerConfig& c, const std::string& v) {
         check_host_port(v, "listen");
         c.listen = v;
         c.listen_given = true;
       }},
      {"advertise", "HOST:PORT",
       "address other peers dial, the one membership announces (default: the listen address; "
       "required when --listen is a wildcard such as 0.0.0.0)",
       [](PeerConfig& c, const std::string& v) {
         check_dialable(v, "advertise");
         c.advertise = v;
       }},
      {"seeds", "HOST:PORT,...", "peers to join through; none: train alone",
       [](PeerConfig& c, const std::string& v) {
         c.seeds = parse_addr_list(v, "seeds");
         for (const auto& a : c.seeds) check_dialable(a, "seeds");
       }},
      {"identity", "FILE", "Ed25519 identity key file, created (mode 0600) if missing",
       [](PeerConfig& c, const std::string& v) { c.identity = v; }},
      {"network-key", "FILE", "32-byte pre-shared network key; peers without it are refused",
       [](PeerConfig& c, const std::string& v) { c.network_key = v; }},
      {"allowlist", "FILE", "hex public keys, one per line: admit only these peers",
       [](PeerConfig& c, const std::string& v) { c.allowlist = v; }},
      {"data", "DIR|synthetic", "Fashion-MNIST IDX directory, or 'synthetic' for generated data",
       [](PeerConfig& c, const std::string& v) { c.data = v; }},
      {"partition", "iid|dirichlet:ALPHA|shards:K", "how the training set is split over shards",
       [](PeerConfig& c, const std::string& v) {
         try {
           core::parse_partition(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(std::string("--partition: ") + e.what());
         }
         c.partition = v;
       }},
      {"num-shards", "N", "number of shards the training set is split into",
       [](PeerConfig& c, const std::string& v) {
         c.num_shards = int(to_int("num-shards", v, 1, 100000));
       }},
      {"shard", "I", "which shard this peer trains on (0-based)",
       [](PeerConfig& c, const std::string& v) { c.shard = int(to_int("shard", v, 0, 99999)); }},
      {"seed", "S", "seed of the partition, the initial weights and the batch order",
       [](PeerConfig& c, const std::string& v) {
         c.train.seed = std::uint64_t(to_int("seed", v, 0, (1ll << 53)));
       }},
      {"model", "SPEC", std::string("model: ") + core::kModelSpecHelp,
       [](PeerConfig& c, const std::string& v) { c.train.model = v; }},
      {"backend", "auto|cpu|cuda", "compute backend (auto: cuda when a GPU is present)",
       [](PeerConfig& c, const std::string& v) {
         c.backend = one_of("backend", v, {"auto", "cpu", "cuda"});
       }},
      {"device", "N", "CUDA device of this peer (0-based; with --backend cuda or auto)",
       [](PeerConfig& c, const std::string& v) { c.device = int(to_int("device", v, 0, 1023)); }},
      {"precision", "fp32|tf32|bf16",
       "arithmetic of the matrix products: fp32 (default, exact), tf32 or bf16 tensor cores "
       "(fp32 accumulation and fp32 weights; cuda only)",
       [](PeerConfig& c, const std::string& v) {
         c.precision = one_of("precision", v, {"fp32", "tf32", "bf16"});
       }},
      {"epochs", "E", "epochs; with --num-shards N an epoch is 1/N of the training set",
       [](PeerConfig& c, const std::string& v) {
         c.train.epochs = int(to_int("epochs", v, 1, 100000));
       }},
      {"batch", "B", "minibatch size",
       [](PeerConfig& c, const std::string& v) {
         c.train.batch = int(to_int("batch", v, 1, 65536));
       }},
      {"lr", "LR", "peak learning rate",
       [](PeerConfig& c, const std::string& v) { c.train.lr = float(to_double("lr", v, 1e-9, 10)); }},
      {"momentum", "M", "SGD momentum (qgm: its beta and mu)",
       [](PeerConfig& c, const std::string& v) {
         c.train.momentum = float(to_double("momentum", v, 0, 0.999999));
       }},
      {"weight-decay", "WD", "L2 weight decay (default 0)",
       [](PeerConfig& c, const std::string& v) {
         c.train.weight_decay = float(to_double("weight-decay", v, 0, 0.999999));
       }},
      {"optimizer", "sgd|adam|qgm",
       "optimizer (sgd = SGD with momentum; qgm = quasi-global momentum, Lin et al. 2021: the "
       "momentum is built from the model's change across steps, averaging included)",
       [](PeerConfig& c, const std::string& v) {
         c.train.optimizer = one_of("optimizer", v, {"sgd", "adam", "qgm"});
       }},
      {"schedule", "cosine|constant", "learning-rate schedule (cosine decays to 0 at the end)",
       [](PeerConfig& c, const std::string& v) {
         c.train.schedule = one_of("schedule", v, {"cosine", "constant"});
       }},
      {"gossip-every", "STEPS", "start an averaging exchange every STEPS training steps",
       [](PeerConfig& c, const std::string& v) {
         c.gossip_every = int(to_int("gossip-every", v, 1, 1000000));
       }},
      {"max-lag", "STEPS|auto|off",
       "after STEPS training steps without a completed exchange, stop training and serve the "
       "protocol until one completes (at most 2 s), so a fast backend keeps averaging; auto "
       "(default): --gossip-every on a GPU, 4 x --gossip-every on the CPU; off: never wait",
       [](PeerConfig& c, const std::string& v) {
         c.max_lag = v == "auto" ? -1 : v == "off" ? 0 : int(to_int("max-lag", v, 1, 1000000));
       }},
      {"wire", "fp32|fp16|bf16|int8", "encoding of parameters on the wire",
       [](PeerConfig& c, const std::string& v) {
         c.wire = one_of("wire", v, {"fp32", "fp16", "bf16", "int8"});
       }},
      {"weighting", "uniform|samples", "mix weight: 1/2, or by the two shards' sample counts",
       [](PeerConfig& c, const std::string& v) {
         c.weighting = one_of("weighting", v, {"uniform", "samples"});
       }},
      {"max-diff-norm", "X", "refuse a partner whose ||r - s|| exceeds X (0: no bound)",
       [](PeerConfig& c, const std::string& v) {
         c.max_diff_norm = to_double("max-diff-norm", v, 0, 1e30);
       }},
      {"mix", "plain|clipped",
       "how a partner's vector is mixed in: plain x += w (r - s), or clipped: the difference "
       "scaled down to at most tau, an adaptive bound (default clipped)",
       [](PeerConfig& c, const std::string& v) { c.mix = one_of("mix", v, {"plain", "clipped"}); }},
      {"clip-mult", "K",
       "clipped: tau = K times the median ||r - s|| of the last --clip-window accepted exchanges "
       "(default 3)",
       [](PeerConfig& c, const std::string& v) { c.clip_mult = to_double("clip-mult", v, 0.1, 1e6); }},
      {"clip-window", "N", "clipped: accepted exchanges the median is taken over (default 32)",
       [](PeerConfig& c, const std::string& v) {
         c.clip_window = int(to_int("clip-window", v, 1, 100000));
       }},
      {"clip-warmup", "N",
       "clipped: for the first N accepted exchanges tau is --clip-warmup-frac times our "
       "parameters' norm, and a difference beyond that norm is refused (default 8)",
       [](PeerConfig& c, const std::string& v) {
         c.clip_warmup = int(to_int("clip-warmup", v, 0, 100000));
       }},
      {"clip-warmup-frac", "F", "clipped: see --clip-warmup (default 0.25)",
       [](PeerConfig& c, const std::string& v) {
         c.clip_warmup_frac = to_double("clip-warmup-frac", v, 1e-6, 1);
       }},
      {"suspect-mult", "K",
       "clipped: refuse a partner whose typical ||r - s|| (median of its last 5, over the median "
       "of all accepted) is K times that of the partners we meet (0: off; default 2.5)...",
       [](PeerConfig& c, const std::string& v) {
         c.suspect_mult = to_double("suspect-mult", v, 0, 1e6);
       }},
      {"suspect-floor", "F",
       "...once its ||r - s|| is also beyond F times our parameters' norm (default 0.05)",
       [](PeerConfig& c, const std::string& v) {
         c.suspect_floor = to_double("suspect-floor", v, 0, 1e6);
       }},
      {"suspect-action", "refuse|clip",
       "what happens to a partner far persistently (--suspect-mult): refused, counting towards "
       "a ban, or clipped to a third of tau (less with each further such exchange: --suspect-decay) "
       "and mixed (default clip: refuse also bans honest peers that restart far behind, see README)",
       [](PeerConfig& c, const std::string& v) {
         c.suspect_action = one_of("suspect-action", v, {"refuse", "clip"});
       }},
      {"suspect-decay", "F",
       "with --suspect-action clip: each further exchange in a row with a partner judged far "
       "persistently multiplies its clip by F (B, B*F, B*F^2, ...), so one that never comes "
       "closer (stale) fades out; in (0, 1], 1 = always B (default 0.5)",
       [](PeerConfig& c, const std::string& v) {
         c.suspect_decay = to_double("suspect-decay", v, 1e-6, 1);
       }},
      {"partner-choice", "weighted|uniform",
       "which live member to ask: uniform, or weighted: a partner whose recent exchanges took "
       "over 3 times the median is asked much less often (default weighted)",
       [](PeerConfig& c, const std::string& v) {
         c.partner_choice = one_of("partner-choice", v, {"weighted", "uniform"});
       }},
      {"refuse-mult", "K",
       "clipped: refuse an exchange whose ||r - s|| exceeds K tau and our parameters' own norm, "
       "reason anomalous (default 10)",
       [](PeerConfig& c, const std::string& v) {
         c.refuse_mult = to_double("refuse-mult", v, 1, 1e6);
       }},
      {"ban-after", "N",
       "ban a partner whose vector was refused N times within --ban-window (0: never; default 3)",
       [](PeerConfig& c, const std::string& v) { c.ban_after = int(to_int("ban-after", v, 0, 1000)); }},
      {"ban-window", "SECONDS", "window for --ban-after (default 120)",
       [](PeerConfig& c, const std::string& v) {
         c.ban_window_s = to_double("ban-window", v, 0, 86400);
       }},
      {"ban", "SECONDS",
       "first ban's length, doubled for each later ban of the same partner, at most an hour "
       "(default 30)",
       [](PeerConfig& c, const std::string& v) { c.ban_s = to_double("ban", v, 0, 3600); }},
      {"fault", "MODE",
       "experiments only, refused unless GOSSIPTRAIN_ALLOW_FAULTS=1: send a corrupted vector, "
       "scale:K|random|signflip|stale|nan, and mix nothing in",
       [](PeerConfig& c, const std::string& v) {
         const char* allow = std::getenv("GOSSIPTRAIN_ALLOW_FAULTS");
         if (!allow || std::string(allow) != "1")
           throw UsageError("--fault: refused: simulating a faulty peer needs the environment "
                            "variable GOSSIPTRAIN_ALLOW_FAULTS=1");
         try {
           gossip::parse_fault(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(std::string("--") + e.what());
         }
         c.fault = v;
       }},
      {"net-nice", "N",
       "run the network thread N nice levels below training, so that exchanges take mostly the CPU "
       "training leaves; membership shares that thread, so keep it 0 on a busy machine (0-19, "
       "default 0; only with gossip)",
       [](PeerConfig& c, const std::string& v) { c.net_nice = int(to_int("net-nice", v, 0, 19)); }},
      {"net-cores", "K|auto",
       "keep K cores for the network threads and pin training (and its BLAS threads) to the "
       "others, so that an exchange never stalls a matrix product; auto (default): none below 8 "
       "usable cores (priorities decide), else max(2, cores/8); 0: pin nothing",
       [](PeerConfig& c, const std::string& v) {
         c.net_cores = v == "auto" ? -1 : int(to_int("net-cores", v, 0, 1024));
       }},
      {"compute-threads", "N|auto",
       "BLAS threads of the cpu backend; auto (default): one per training core when --net-cores "
       "pins, else OpenBLAS's own choice (OPENBLAS_NUM_THREADS)",
       [](PeerConfig& c, const std::string& v) {
         c.compute_threads = v == "auto" ? 0 : int(to_int("compute-threads", v, 1, 1024));
       }},
      {"max-rate", "MB_PER_S",
       "send an exchange's snapshot at most this fast, spreading its CPU over more training "
       "steps (0: no cap, the default; else at least 20, the rate partners' deadlines assume)",
       [](PeerConfig& c, const std::string& v) { c.max_rate_mb = to_max_rate_mb("max-rate", v); }},
      {"train-nice", "N",
       "run training N nice levels below the other threads, so that exchanges and membership "
       "never wait behind a step when several peers share the cores (0-19, default 0; "
       "gossip-launch passes 5 with --net-nice 0)",
       [](PeerConfig& c, const std::string& v) { c.train_nice = int(to_int("train-nice", v, 0, 19)); }},
      {"crypto-threads", "N",
       "threads that encrypt and decrypt the frames of messages of 4 MiB or more, in order of "
       "their nonces (0 or 1: the network thread alone; default min(cores - 1, 4), 1 on 2 cores "
       "or fewer; only with gossip)",
       [](PeerConfig& c, const std::string& v) {
         c.crypto_threads = int(to_int("crypto-threads", v, 0, net::kMaxCryptoThreads));
       }},
      {"linger", "SECONDS", "keep serving exchanges after training (default 10 with gossip)",
       [](PeerConfig& c, const std::string& v) { c.linger_s = to_double("linger", v, 0, 86400); }},
      {"catch-up", "auto|off",
       "auto: a peer with no checkpoint to resume from that finds live members fetches one's "
       "state (parameters, optimizer state, step) before its first step, unless it starts with "
       "a cohort (--min-peers above 1) (default auto)",
       [](PeerConfig& c, const std::string& v) { c.catch_up = one_of("catch-up", v, {"auto", "off"}); }},
      {"catch-up-timeout", "SECONDS",
       "give up catching up after this and start from our own weights (default 60)",
       [](PeerConfig& c, const std::string& v) {
         c.catch_up_timeout_s = to_double("catch-up-timeout", v, 1, 86400);
       }},
      {"min-peers", "N",
       "wait before the first step until N live members, this peer included, are known "
       "(default 1: do not wait)",
       [](PeerConfig& c, const std::string& v) { c.min_peers = int(to_int("min-peers", v, 1, 100000)); }},
      {"min-peers-timeout", "SECONDS",
       "stop waiting for --min-peers after this and start anyway, with a warning (default 120)",
       [](PeerConfig& c, const std::string& v) {
         c.min_peers_timeout_s = to_double("min-peers-timeout", v, 0, 86400);
       }},
      {"metrics", "FILE.jsonl", "append metrics as JSON lines to FILE",
       [](PeerConfig& c, const std::string& v) { c.metrics = v; }},
      {"checkpoint-dir", "DIR", "write checkpoints to DIR and resume from it on restart",
       [](PeerConfig& c, const std::string& v) { c.train.checkpoint_dir = v; }},
      {"checkpoint-every", "SECONDS",
       "also checkpoint every SECONDS of training, besides every epoch end and on stop; a killed "
       "peer loses at most this much (default 60)",
       [](PeerConfig& c, const std::string& v) {
         c.train.checkpoint_every_s = int(to_int("checkpoint-every", v, 1, 86400));
       }},
      {"log-level", "LEVEL", "trace|debug|info|warn|error",
       [](PeerConfig& c, const std::string& v) {
         c.log_level = one_of("log-level", v, {"trace", "debug", "info", "warn", "error"});
       }},
  };
  return opts;
}

const Option* find_option(const std::string& name) {
  for (const auto& o : options())
    if (o.name == name) return &o;
  return nullptr;
}

void apply_config_file(PeerConfig& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--config: cannot read '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--config " + path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw UsageError("--config " + path + ": expected a JSON object");
  for (const auto& [key, value] : j.items()) {
    const Option* o = find_option(key);
    if (!o || key == "config")
      throw UsageError("--config " + path + ": unknown key '" + key + "'");
    std::string v;
    if (value.is_string())
      v = value.get<std::string>();
    else if (value.is_array() && key == "seeds") {
      for (const auto& s : value) {
        if (!s.is_string()) throw UsageError("--config " + path + ": seeds must be strings");
        v += (v.empty() ? "" : ",") + s.get<std::string>();
      }
    } else if (value.is_number_integer())
      v = std::to_string(value.get<long long>());
    else if (value.is_number()) {
      std::ostringstream os;
      os.precision(17);
      os << value.get<double>();
      v = os.str();
    } else
      throw UsageError("--config " + path + ": bad type for '" + key + "'");
    o->set(c, v);
  }
}

}  // namespace

Flag split_flag(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
  Flag f;
  f.name = arg.substr(2);
  if (auto eq = f.name.find('='); eq != std::string::npos) {
    f.value = f.name.substr(eq + 1);
    f.name = f.name.substr(0, eq);
    f.has_value = true;
  }
  return f;
}

long long to_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  long long x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    throw bad_value(flag, v, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

double to_double(const std::string& flag, const std::string& v, double lo, double hi) {
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream os;
    os << "a number in [" << lo << ", " << hi << "]";
    throw bad_value(flag, v, os.str());
  }
  return x;
}

double to_max_rate_mb(const std::string& flag, const std::string& v) {
  const double mb = to_double(flag, v, 0, 1e6);
  if (mb > 0 && mb < 20)
    throw UsageError("--" + flag + ": " + v + " is under 20 (MB/s), the floor partners' "
                     "deadlines assume; use 0 for no cap");
  return mb;
}

void check_host_port(const std::string& addr, const std::string& flag) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw bad_value(flag, addr, "HOST:PORT");
  to_int(flag, addr.substr(colon + 1), 0, 65535);
}

void check_dialable(const std::string& addr, const std::string& flag) {
  check_host_port(addr, flag);
  if (!net::dialable_addr(addr))
    throw UsageError("--" + flag + " " + addr +
                     ": not an address another machine can dial (a wildcard host such as "
                     "0.0.0.0 or ::, or port 0); give this machine's own address, e.g. "
                     "10.0.0.1:7000");
}

std::vector<std::string> parse_addr_list(const std::string& s, const std::string& flag) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto comma = s.find(',', start);
    std::string a = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!a.empty()) {
      check_host_port(a, flag);
      out.push_back(a);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) throw bad_value(flag, s, "HOST:PORT,...");
  return out;
}

namespace {
// Other machines learn our address from membership: a wildcard there would make them dial
// themselves, so a wildcard --listen needs --advertise.
void check_listen_is_announceable(const PeerConfig& c) {
  std::string host;
  std::uint16_t port = 0;
  if (!c.advertise.empty() || !net::split_host_port(c.listen, host, port)) return;
  if (net::is_wildcard_host(host))
    throw UsageError("--listen " + c.listen +
                     " is a wildcard address that no other machine can dial: add --advertise "
                     "HOST:" + std::to_string(port) + " with this machine's address (e.g. "
                     "--advertise 10.0.0.1:" + std::to_string(port) + ")");
}
}  // namespace

PeerConfig parse_peer_args(const std::vector<std::string>& args, bool* help) {
  PeerConfig c;
  *help = false;
  // --config is applied first, so flags on the command line override the file.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) throw UsageError("--config needs a FILE");
      apply_config_file(c, args[i + 1]);
    } else if (args[i].rfind("--config=", 0) == 0) {
      apply_config_file(c, args[i].substr(9));
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return c;
    }
    auto [name, value, has_value] = split_flag(a);
    if (name == "config") {
      if (!has_value) ++i;
      continue;
    }
    const Option* o = find_option(name);
    if (!o) throw UsageError("unknown flag '--" + name + "' (see --help)");
    if (!has_value) {
      if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value (" + o->arg + ")");
      value = args[++i];
    }
    o->set(c, value);
  }
  if (c.shard >= c.num_shards)
    throw UsageError("--shard " + std::to_string(c.shard) + " is out of range for --num-shards " +
                     std::to_string(c.num_shards));
  try {
    core::validate(c.train);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  check_listen_is_announceable(c);
  if (c.linger_s < 0) c.linger_s = c.gossip_enabled() ? 10.0 : 0.0;
  return c;
}

std::string peer_usage() {
  std::ostringstream os;
  os << "usage: gossip-peer [--config FILE.json] [flags]\n\n"
        "One gossiptrain peer: trains a model replica on its data shard and, given --seeds,\n"
        "averages parameters with random live peers over an encrypted channel.\n"
        "Without --seeds it trains alone. Every flag may also be a key of the --config file.\n\n";
  const PeerConfig d;
  for (const auto& o : options()) {
    std::string left = "  --" + o.name + " " + o.arg;
    os << left;
    if (left.size() < 40) os << std::string(40 - left.size(), ' ');
    else os << "\n" << std::string(40, ' ');
    os << o.help << "\n";
  }
  os << "  --config FILE.json                    the same keys as the flags, without '--'\n"
        "  --help                                this text\n\n"
        "Exit codes: 0 done, 1 runtime failure, 2 bad flag or value, 130 interrupted.\n";
  return os.str();
}

}  // namespace gossiptrain::apps
