// Flag and --config parsing for gossip-peer; one table of options drives parsing, JSON and --help.
#include "apps/common/options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/common/blas.hpp"
#include "base/enum_names.hpp"
#include "core/partition.hpp"
#include "gossip/exchange/averager.hpp"
#include "kernels/backend.hpp"
#include "apps/common/kernel_flags.hpp"
#include "apps/common/wire_flags.hpp"
#include "net/socket/address.hpp"
#include "net/secure/crypto_pool.hpp"

namespace gossiptrain::apps {

namespace {
constexpr std::string_view kCatchUpNames[] = {"auto", "off"};
static_assert(std::size(kCatchUpNames) == base::enum_count(CatchUpMode::Auto, CatchUpMode::Off));
}  // namespace

void from_string(std::string_view text, CatchUpMode& out) {
  if (auto m = base::enum_from_name(text, CatchUpMode::Auto, kCatchUpNames)) {
    out = *m;
    return;
  }
  throw std::invalid_argument("unknown catch-up mode '" + std::string(text) +
                              "' (expected auto or off)");
}

namespace {

using PeerOption = Option<PeerConfig>;
using O = Options<PeerConfig>;

// A field of the training config or of robust mixing, for O::number and the like.
template <class T>
auto train(T core::TrainConfig::*field) {
  return field_of(&PeerConfig::train, field);
}
// A field of the gossip node's averager, of its robust mixing, of its outer step
// (PeerConfig::node).
template <class T>
auto averager(T gossip::AveragerConfig::*field) {
  return [field](PeerConfig& c) -> T& { return c.node.averager.*field; };
}
template <class T>
auto robust(T gossip::RobustConfig::*field) {
  return [field](PeerConfig& c) -> T& { return c.node.averager.robust.*field; };
}
template <class T>
auto outer(T gossip::OuterConfig::*field) {
  return [field](PeerConfig& c) -> T& { return c.node.outer.*field; };
}
using A = gossip::AveragerConfig;
using R = gossip::RobustConfig;

// A number whose 0 is spelled "off".
auto show_off(double gossip::NodeConfig::*field) {
  return [field](PeerConfig& c) {
    const double x = c.node.*field;
    return x == 0.0 ? std::string("off") : show_value(x);
  };
}

// Any finite number: the range is core::validate's, checked once the whole config is read.
double to_number(const std::string& flag, const std::string& v) {
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x))
    throw bad_value(flag, v, "a number");
  return x;
}

// A flag that sets an optional wire: "off" clears it, a --wire value that allowed() takes sets
// it; read as --wire is (wire_flags.hpp), shown as the wire's name or "off".
PeerOption wire_or_off(const std::string& name, std::string help,
                       std::optional<gossip::WireFormat> gossip::AveragerConfig::*field,
                       bool (*allowed)(gossip::WireFormat), ValueKind kind) {
  return O::named<std::optional<gossip::WireFormat>>(name, wire_or_off_values(allowed),
                                                     std::move(help), averager(field))
      .of_kind(kind);
}

}  // namespace

// gossip-peer's table ends with the FedAvg flags, kept in their own file.
static std::vector<Option<PeerConfig>> with_fedavg(std::vector<Option<PeerConfig>> options) {
  add_fedavg_options(options);
  add_cluster_options(options);
  return options;
}

const OptionTable<PeerConfig>& peer_options() {
  static const OptionTable<PeerConfig> table(with_fedavg({
      PeerOption{"listen", "HOST:PORT", "address to listen on for other peers (port 0: any free port)",
       [](PeerConfig& c, const std::string& v) {
         check_host_port(v, "listen", AddrUse::Listen);
         c.listen = v;
         c.listen_given = true;
       }}.shows(show_field<PeerConfig>(&PeerConfig::listen)).of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kPythonPeer),
      PeerOption{"advertise", "HOST:PORT",
       "address other peers dial, the one membership announces (required when --listen is a "
       "wildcard such as 0.0.0.0)",
       [](PeerConfig& c, const std::string& v) {
         check_host_port(v, "advertise", AddrUse::Dial);
         c.advertise = v;
       }}.unset_means("the listen address").of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kPythonPeer),
      PeerOption{"seeds", "HOST:PORT,...", "peers to join through",
       [](PeerConfig& c, const std::string& v) { c.node.membership.seeds = parse_addr_list(v, "seeds"); }}.unset_means("none: train alone").of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kPythonPeer),
      O::text("identity", "FILE", "Ed25519 identity key file, created (mode 0600) if missing",
              &PeerConfig::identity).for_programs(kGossipPeer | kPythonPeer),
      O::text("network-key", "FILE", "32-byte pre-shared network key; peers without it are refused",
              &PeerConfig::network_key).for_programs(kGossipPeer | kPythonPeer),
      O::text("allowlist", "FILE", "hex public keys, one per line: admit only these peers",
              &PeerConfig::allowlist).for_programs(kGossipPeer | kPythonPeer),
      O::text("data", "DIR|npy:DIR|npy:XTR,YTR,XTE,YTE|synthetic",
              "IDX folder (Fashion-MNIST, MNIST, EMNIST: train-/t10k-images-idx3-ubyte[.gz], "
              "...); npy:DIR (x_train.npy, y_train.npy, x_test.npy, y_test.npy) or four .npy "
              "files (inputs float32|uint8 N x D or N x H x W x C, integer labels N); or "
              "'synthetic' for generated data",
              &PeerConfig::data).for_programs(kGossipPeer | kGossipSim),
      PeerOption{"partition", "iid|dirichlet:ALPHA|shards:K|classes:K",
       "how the training set is split over shards (classes:K: NIID-Bench's #C=K, K labels per "
       "shard)",
       [](PeerConfig& c, const std::string& v) {
         try {
           c.partition_spec = core::parse_partition(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(std::string("--partition: ") + e.what());
         }
         c.partition = v;
       }}.shows(show_field<PeerConfig>(&PeerConfig::partition)).of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("num-shards", "N", "number of shards the training set is split into",
                &PeerConfig::num_shards, 1, 100000).for_programs(kGossipPeer | kPythonPeer),
      O::number("shard", "I", "which shard this peer trains on (0-based)", &PeerConfig::shard, 0,
                99999).for_programs(kGossipPeer | kPythonPeer),
      O::number("seed", "S", "seed of the partition, the initial weights and the batch order",
                train(&core::TrainConfig::seed), 0, 1ll << 53),
      O::text("model", "SPEC", std::string("model: ") + core::kModelSpecHelp,
              train(&core::TrainConfig::model))
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::choice("backend", {"auto", "cpu", "cuda"},
                "compute backend (auto: cuda when a GPU is present)", &PeerConfig::backend)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("device", "N", "CUDA device of this peer (0-based; with --backend cuda or auto)",
                &PeerConfig::device, 0, 1023).for_programs(kGossipPeer | kGossipSim),
      O::named<kernels::Precision>(
          "precision", precision_values(),
          "arithmetic of the matrix products: fp32 (exact), tf32 or bf16 tensor cores "
          "(fp32 accumulation and fp32 weights; cuda only)",
          &PeerConfig::precision).for_programs(kGossipPeer | kGossipSim),
      O::number("epochs", "E", "epochs; with --num-shards N an epoch is 1/N of the training set",
                train(&core::TrainConfig::epochs), 1, 100000)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("batch", "B", "minibatch size", train(&core::TrainConfig::batch), 1, 65536)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("progress-every", "S",
                "a progress line within an epoch at most every S seconds (0: only the epoch lines)",
                train(&core::TrainConfig::progress_every_s), 0, 86400),
      PeerOption{"lr", "LR", "peak learning rate",
       [](PeerConfig& c, const std::string& v) { c.train.lr = float(to_number("lr", v)); }}.shows([](PeerConfig& c) { return show_value(c.train.lr); }).of_kind(ValueKind::Number)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("momentum", "M", "SGD momentum (qgm: its beta and mu)",
                train(&core::TrainConfig::momentum), 0, 0.999999)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("weight-decay", "WD", "L2 weight decay",
                train(&core::TrainConfig::weight_decay), 0, 0.999999)
          .for_programs(kGossipPeer | kGossipSim),
      O::choice(
          "optimizer", {"sgd", "adam", "qgm"},
          "optimizer (sgd = SGD with momentum; qgm = quasi-global momentum, Lin et al. 2021: the "
          "momentum is built from the model's change across steps, averaging included)",
          train(&core::TrainConfig::optimizer)).for_programs(kGossipPeer | kGossipSim),
      O::choice("schedule", {"cosine", "constant"},
                "learning-rate schedule (cosine decays to 0 at the end)",
                train(&core::TrainConfig::schedule)).for_programs(kGossipPeer | kGossipSim),
      O::named<bool>("logit-adjust", {{"off", false}, {"on", true}},
                     "on: train on softmax(z + log max(p, 1/C)), p the label frequencies of this "
                     "peer's shard, C the classes, and evaluate on softmax(z), so a peer does "
                     "not learn its own label skew into the shared model; about nothing changes "
                     "on an IID shard (docs/models.md, \"Skewed labels\")",
                     train(&core::TrainConfig::logit_adjust)).for_programs(kGossipPeer | kGossipSim),
      O::number("gossip-every", "STEPS", "start an averaging exchange every STEPS training steps",
                averager(&A::gossip_every), 1, 1000000)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"max-lag", "STEPS|auto|off",
       "after STEPS training steps without an exchange that averaged, stop training and serve "
       "the protocol until one does (at most 2 s), so a fast backend keeps averaging; after 3 "
       "such waits in a row in vain, the steps between waits double with each further one (at "
       "most 64 x STEPS, a warning says so) until an exchange averages again; auto: "
       "--gossip-every on a GPU, 4 x --gossip-every on the CPU; off: never wait",
       [](PeerConfig& c, const std::string& v) {
         c.node.max_lag =
             v == "off"    ? gossip::MaxLag::off()
             : v == "auto" ? gossip::MaxLag()
                           : gossip::MaxLag::steps(int(to_int("max-lag", v, 1, 1000000)));
       }}.shows([](PeerConfig& c) { return to_string(c.node.max_lag); })
          .of_kind(ValueKind::NumberOrWord).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"max-lag-share", "F|off",
       "--max-lag's time budget: training waits for exchanges at most F seconds per second it "
       "trains (burst 0.5 s); where an exchange takes longer than --max-lag steps, the waits then "
       "come further apart and the bound costs at most 1/(1+F) of throughput (off: wait every "
       "--max-lag steps, whatever the exchanges cost)",
       [](PeerConfig& c, const std::string& v) {
         c.node.max_lag_share = v == "off" ? 0.0 : to_number("max-lag-share", v);
         if (!(c.node.max_lag_share > 0.0 && c.node.max_lag_share <= 100.0) && v != "off")
           throw bad_value("max-lag-share", v, "a number in (0, 100] or off");
       }}.shows(show_off(&gossip::NodeConfig::max_lag_share)).of_kind(ValueKind::NumberOrWord)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"max-ahead", "F|off",
       "keep pace: a peer more than F of its run ahead of the slowest partner it heard from in "
       "the last 10 s (exchanges and membership pings say each side's progress) stops training and "
       "serves exchanges until it is not, at most 2 s at a time; partners over 0.1 behind are not "
       "waited for, unless two or more are and none is nearer: then it waits for the front of "
       "them (off: never wait)",
       [](PeerConfig& c, const std::string& v) {
         c.node.max_ahead = v == "off" ? 0.0 : to_number("max-ahead", v);
         if (!(c.node.max_ahead > 0.0 && c.node.max_ahead < 1.0) && v != "off")
           throw bad_value("max-ahead", v, "a number in (0, 1) or off");
       }}.shows(show_off(&gossip::NodeConfig::max_ahead)).of_kind(ValueKind::NumberOrWord)
          .for_programs(kGossipPeer | kGossipSim),
      O::named<gossip::WireFormat>("wire", wire_values(), "encoding of parameters on the wire (docs/communication.md)",
                              averager(&A::wire))
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"error-feedback", "on|off",
       "with a lossy --wire (fp16, bf16, int8, int4, int2, int4-rel): send the encoding of x + e and keep in e what it "
       "rounded off, for the next exchange (docs/communication.md)",
       [](PeerConfig& c, const std::string& v) {
         if (v != "on" && v != "off") throw bad_value("error-feedback", v, "on or off");
         c.node.averager.error_feedback = v == "on";
       }}.shows([](PeerConfig& c) { return show_value(c.node.averager.error_feedback); })
          .of_kind(ValueKind::Text).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      wire_or_off("finish-wire",
                  "from --finish-from of training on, exchange in this wire instead of --wire "
                  "(both partners switch; a peer switches too when a partner is on it): a coarse "
                  "wire early, a finer one where the final accuracy is made "
                  "(docs/communication.md)",
                  &A::finish_wire, [](gossip::WireFormat) { return true; },
                  ValueKind::NumberOrWord)
          .for_programs(kGossipPeer | kGossipSim),
      wire_or_off("slow-link-wire",
                  "with --wire fp32 and no --finish-wire: exchange in this wire, with error "
                  "feedback, with each partner whose link is measured slow (under 4 MB/s both "
                  "ways in an fp32 exchange; the partner takes the wire the request names), fp32 "
                  "with the others (docs/communication.md; off: fp32 with every partner)",
                  &A::slow_link_wire,
                  [](gossip::WireFormat w) {
                    return w != gossip::WireFormat::Fp32 && w != gossip::WireFormat::Int2;
                  },
                  ValueKind::Text)
          .for_programs(kGossipPeer | kGossipSim),
      O::number("finish-from", "P",
                "the fraction of training after which --finish-wire takes over",
                averager(&A::finish_from), 0.01, 1).for_programs(kGossipPeer | kGossipSim),
      O::number("outer-every", "H",
                "outer optimizer (DiLoCo/NoLoCo style, docs/communication.md): every H steps, one "
                "Nesterov step on the pseudo-gradient since the last one, averaging included "
                "(0: off)",
                outer(&gossip::OuterConfig::every), 0, 1000000)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("outer-lr", "LR", "the outer step's learning rate (1 with momentum 0: the outer "
                "step changes nothing)", outer(&gossip::OuterConfig::lr), 0.01, 10)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("outer-momentum", "MU", "the outer step's Nesterov momentum",
                outer(&gossip::OuterConfig::momentum), 0, 0.99)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"comm-preset", "low|default",
       "low: the best-measured low-communication settings (docs/communication.md), --wire "
       "int4-rel --error-feedback on --gossip-every 10 --finish-wire off --max-lag 10 "
       "--max-lag-share off --outer-every 0 (training waits for the link rather than train "
       "alone); default: --wire fp32 --error-feedback off --gossip-every 4 --finish-wire off "
       "--max-lag auto --max-lag-share 0.25 --outer-every 0. Flags after it override it",
       [](PeerConfig& c, const std::string& v) {
         if (v != "low" && v != "default") throw bad_value("comm-preset", v, "low or default");
         const bool low = v == "low";
         gossip::AveragerConfig& a = c.node.averager;
         a.wire = low ? gossip::WireFormat::Int4Rel : gossip::WireFormat::Fp32;
         a.error_feedback = low;
         a.gossip_every = low ? 10 : 4;
         a.finish_wire.reset();
         a.finish_from = 0.9;
         c.node.max_lag = low ? gossip::MaxLag::steps(10) : gossip::MaxLag();
         c.node.max_lag_share = low ? 0.0 : 0.25;
         c.node.outer.every = 0;
       }}.unset_means("none: each flag's own default").of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::named<bool>("weighting", {{"uniform", false}, {"samples", true}},
                     "mix weight: 1/2 (uniform), or by the two shards' sample counts",
                     averager(&A::weight_by_samples)).for_programs(kGossipPeer | kGossipSim),
      O::number("max-diff-norm", "X", "refuse a partner whose ||r - s|| exceeds X (0: no bound)",
                averager(&A::max_diff_norm), 0, 1e30)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::named<gossip::MixMode>(
          "mix", {{"plain", gossip::MixMode::Plain}, {"clipped", gossip::MixMode::Clipped}},
          "how a partner's vector is mixed in: plain x += w (r - s), or clipped: the difference "
          "scaled down to at most tau, an adaptive bound",
          robust(&R::mix)).for_programs(kGossipPeer | kPythonPeer),
      O::number("clip-mult", "K",
                "clipped: tau = K times the median over the partners of the last --clip-window "
                "applied exchanges of each one's ||r - s|| (the larger of its latest and its "
                "median there; the refusal rules use the latest)",
                robust(&R::clip_mult), 0.1, 1e6)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("clip-window", "N",
                "clipped: applied exchanges whose partners the median is taken over",
                robust(&R::clip_window), 1, 100000)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("clip-warmup", "N",
                "clipped: for the first N accepted exchanges tau is --clip-warmup-frac times our "
                "parameters' norm, and a difference beyond that norm is refused",
                robust(&R::clip_warmup), 0, 100000)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("clip-warmup-frac", "F", "clipped: see --clip-warmup",
                robust(&R::warmup_frac), 1e-6, 1)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("suspect-mult", "K",
                "clipped: refuse a partner whose typical ||r - s|| (median of its last 5, over the "
                "median of all accepted) is K times that of the partners we meet (0: off)...",
                robust(&R::suspect_mult), 0, 1e6)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("suspect-floor", "F",
                "...once its ||r - s|| is also beyond F times our parameters' norm",
                robust(&R::suspect_floor), 0, 1e6)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::named<bool>(
          "suspect-action", {{"refuse", false}, {"clip", true}},
          "what happens to a partner far persistently (--suspect-mult): refused, counting towards "
          "a ban, or clipped to a third of tau (less with each further such exchange: "
          "--suspect-decay) and mixed (refuse also bans honest peers that restart far behind, see "
          "README)",
          robust(&R::suspect_clip)).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number(
          "suspect-decay", "F",
          "with --suspect-action clip: each further exchange in a row with a partner judged far "
          "persistently multiplies its clip by F (B, B*F, B*F^2, ...), so one that never comes "
          "closer (stale) fades out, down to --suspect-min-clip; one that came closer by a tenth "
          "since its streak began starts at B again; in (0, 1], 1 = always B",
          robust(&R::suspect_decay), 1e-6, 1).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("suspect-min-clip", "F",
                "the honest-drift floor: an exchange in which both sides clipped the other (each "
                "found the other far, as after a partition), or with a partner far behind or "
                "ahead in steps, mixes at least F of the plain weight, so drifted peers come back; "
                "a partner that alone is far (stale) still fades out; 0: no floor",
                robust(&R::suspect_min_clip), 0, 1)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::named<gossip::PartnerMode>(
          "partner-choice",
          {{"weighted", gossip::PartnerMode::Weighted},
           {"uniform", gossip::PartnerMode::Uniform},
           {"hypercube", gossip::PartnerMode::Hypercube}},
          "which live member to ask: uniform; weighted: a partner whose recent exchanges took "
          "over 3 times the median is asked much less often; hypercube: one scheduled partner "
          "per round from the sorted member list, so that a quiet swarm of n holds the exact "
          "average after floor(log2 n) + 2 rounds (log2 n for a power of two; a partner that "
          "does not take part within 2 s, or 4 exchange times when longer, per round it has to "
          "serve first, the wait restarted while it answers, at most 16 times: a weighted draw; "
          "in training, where the vectors move between rounds, a weighted draw at once)",
          [](PeerConfig& c) -> gossip::PartnerMode& { return c.node.averager.choice.mode; })
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number(
          "refuse-mult", "K",
          "clipped: refuse an exchange whose ||r - s|| exceeds K tau and our parameters' own norm, "
          "reason anomalous",
          robust(&R::refuse_mult), 1, 1e6).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number("ban-after", "N",
                "ban a partner whose vector was refused N times within --ban-window (0: never; "
                "not counted: the warm-up's refusals in our first 64 steps while our norm is over "
                "twice its start, docs/robustness.md)",
                robust(&R::ban_after), 0, 1000)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::seconds("ban-window", "window for --ban-after", robust(&R::ban_window), 0)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::seconds("ban",
                 "first ban's length, doubled for each later ban of the same partner, at most an "
                 "hour",
                 robust(&R::ban_base), 0, 3600)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"fault", "MODE",
       "experiments only, refused unless GOSSIPTRAIN_ALLOW_FAULTS=1: send a corrupted vector, "
       "scale:K|random|signflip|stale|nan, and mix nothing in",
       [](PeerConfig& c, const std::string& v) {
         const char* allow = std::getenv("GOSSIPTRAIN_ALLOW_FAULTS");
         if (!allow || std::string(allow) != "1")
           throw UsageError(
               "--fault: refused: simulating a faulty peer needs the environment "
               "variable GOSSIPTRAIN_ALLOW_FAULTS=1");
         try {
           c.node.averager.fault = gossip::parse_fault(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(std::string("--") + e.what());
         }
         c.fault_spec = v;
       }}.unset_means("none: an honest peer").of_kind(ValueKind::Text)
          .for_programs(kGossipPeer | kPythonPeer),
      O::number(
          "net-nice", "N",
          "run the network thread N nice levels below training, so that exchanges take mostly the "
          "CPU training leaves; membership shares that thread, so keep it 0 on a busy machine "
          "(0-19; only with gossip)",
          &PeerConfig::net_nice, 0, 19).for_programs(kGossipPeer | kPythonPeer),
      O::number_or(
          "net-cores", "K", "auto", -1,
          "keep K cores for the network threads and pin training (and its BLAS threads) to the "
          "others, so that an exchange never stalls a matrix product; auto: none below "
          "8 usable cores (priorities decide), else max(2, cores/8); 0: pin nothing",
          &PeerConfig::net_cores, 0, 1024),
      O::number_or("compute-threads", "N", "auto", 0,
                   "BLAS threads of the cpu backend; auto: one per training core when "
                   "--net-cores pins, else OpenBLAS's own choice (OPENBLAS_NUM_THREADS); with "
                   "auto and OPENBLAS_NUM_THREADS unset, a peer times its steps on that pool and "
                   "on one thread every 30 s and trains on the faster (on busy cores, one)",
                   &PeerConfig::compute_threads, 1, 1024),
      PeerOption{"blas-core", "auto|keep|CORE", kBlasCoreHelp,
       [](PeerConfig& c, const std::string& v) { c.blas_core = to_blas_core("blas-core", v); }}.shows(show_field<PeerConfig>(&PeerConfig::blas_core)).of_kind(ValueKind::Text),
      PeerOption{"max-rate", "MB_PER_S",
       "send an exchange's snapshot at most this fast, spreading its CPU over more training steps "
       "(0: no cap; else at least 20, the rate partners' deadlines assume)",
       [](PeerConfig& c, const std::string& v) {
         c.node.averager.max_rate_bytes_per_s = to_max_rate_mb("max-rate", v) * 1e6;
       }}.shows([](PeerConfig& c) {
           return show_value(c.node.averager.max_rate_bytes_per_s / 1e6);
         })
          .of_kind(ValueKind::Number)
          .for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      O::number(
          "train-nice", "N",
          "run training N nice levels below the other threads, so that exchanges and membership "
          "never wait behind a step when several peers share the cores (0-19; gossip-launch passes "
          "5 with --net-nice 0)",
          &PeerConfig::train_nice, 0, 19),
      O::number(
          "crypto-threads", "N",
          "threads that encrypt and decrypt the frames of messages of 4 MiB or more, in order of "
          "their nonces (0 or 1: the network thread alone; only with gossip)",
          &PeerConfig::crypto_threads, 0, net::kMaxCryptoThreads)
          .shows([](PeerConfig& c) {
            return c.crypto_threads < 0 ? "min(cores - 1, 4), 1 on 2 cores or fewer"
                                        : show_value(c.crypto_threads);
          }).for_programs(kGossipPeer | kPythonPeer),
      O::seconds("linger", "keep serving exchanges after training", &PeerConfig::linger_s, 0)
          .shows([](PeerConfig& c) {
            return c.linger_s >= 0 ? show_value(c.linger_s)
                                   : show_value(kDefaultLingerS) + " with --seeds or --listen, else 0";
          }).for_programs(kGossipPeer | kGossipSim),
      O::seconds("linger-heal",
                 "after --linger, while two or more members are silent (dead, or suspected: not yet "
                 "declared) without having left and they are a third or more of those known (a "
                 "partition, not peers that finished), linger "
                 "up to this long more for them to come back, then --linger once more so both "
                 "sides settle; as long, at most, for a swarm still training far behind this peer "
                 "or for a finished partner to take the state of (--catch-up-behind) (0: off)",
                 &PeerConfig::linger_heal_s, 0).for_programs(kGossipPeer),
      O::number("linger-settle", "D",
                "while lingering, start exchanges until every partner met since this peer last "
                "moved is within D (||r - s||) of it, then only one every 2 s; a heal that comes "
                "after training is crossed so (0: a lingering peer only serves)",
                averager(&A::settle_distance), 0, 1e30).for_programs(kGossipPeer | kGossipSim),
      O::seconds("stall-timeout",
                 "the training thread counts as hung after this long with no step, evaluation "
                 "batch or wait (or 50 times its slowest gap, if longer): it says so at error "
                 "level and the peer leaves the swarm (0: no watchdog)",
                 &PeerConfig::stall_timeout_s, 0),
      O::seconds("stop-grace",
                 "after SIGINT or SIGTERM the peer exits within this many seconds whatever state "
                 "its training thread is in, without a final checkpoint if it had to force it "
                 "(a second SIGINT exits at once; a repeated SIGTERM does not)",
                 &PeerConfig::stop_grace_s, 1),
      O::choice(
          "catch-up", {"auto", "off"},
          "auto: a peer with no checkpoint to resume from that finds live members fetches one's "
          "state (parameters, optimizer state, step) before its first step; in a cohort "
          "(--min-peers above 1) only from a member that resumed its checkpoint (a run resized "
          "with the same --run-id), none when all start fresh (gossip-sim's cohorts do not catch up)",
          &PeerConfig::catch_up).for_programs(kGossipPeer | kGossipSim | kPythonPeer),
      PeerOption{"catch-up-behind", "F|off",
       "a peer that finds itself F of its run or more behind partners that clip its exchanges "
       "away (its process was paused while the swarm trained on: averaging cannot bring it back) "
       "fetches one's state as a joiner does, and trains on from there; it needs two such "
       "partners and more than half of those it exchanged with in the last 10 s, and tries at "
       "most once in 30 s. At the end, a peer apart from the swarm (it averaged a tenth as often "
       "as --gossip-every asks, on a slow link, or was clipped away) takes a finished partner's "
       "state in its linger, and a peer done while the swarm is F of its run behind lingers for "
       "it, up to --linger-heal (off: neither; it trains on and leaves with its own model)",
       [](PeerConfig& c, const std::string& v) {
         c.node.behind.behind = v == "off" ? 0.0 : to_number("catch-up-behind", v);
         if (!(c.node.behind.behind > 0.0 && c.node.behind.behind <= 1.0) && v != "off")
           throw bad_value("catch-up-behind", v, "a number in (0, 1] or off");
       }}.shows([](PeerConfig& c) {
           return c.node.behind.behind > 0 ? show_value(c.node.behind.behind) : std::string("off");
         }).of_kind(ValueKind::NumberOrWord).for_programs(kGossipPeer),
      O::seconds("catch-up-timeout",
                 "give up catching up after this and start from our own weights",
                 &PeerConfig::catch_up_timeout_s, 1).for_programs(kGossipPeer | kPythonPeer),
      O::number("min-peers", "N",
                "wait before the first step until N live members, this peer included, are known "
                "(1: do not wait)",
                &PeerConfig::min_peers, 1, 100000).for_programs(kGossipPeer | kPythonPeer),
      O::seconds(
          "min-peers-timeout",
          "stop waiting for --min-peers after this and start anyway, with a warning",
          &PeerConfig::min_peers_timeout_s, 0).for_programs(kGossipPeer | kPythonPeer),
      O::text("metrics", "FILE.jsonl", "append metrics as JSON lines to FILE",
              &PeerConfig::metrics).for_programs(kGossipPeer | kPythonPeer),
      PeerOption{"prometheus", "HOST:PORT",
       "serve /metrics (Prometheus text format), /healthz and /readyz on HOST:PORT, e.g. 127.0.0.1:9100 "
       "(the host must be given)",
       [](PeerConfig& c, const std::string& v) {
         check_host_port(v, "prometheus", AddrUse::Listen);
         if (v.empty() || v[0] == ':')
           throw bad_value("prometheus", v, "HOST:PORT with the host given, e.g. 127.0.0.1:9100");
         c.prometheus = v;
       }}.unset_means("off").of_kind(ValueKind::Text),
      O::text("tensorboard", "DIR",
              "write TensorBoard event files of the metric lines' scalars into DIR as they come",
              &PeerConfig::tensorboard),
      O::text("export", "FILE.safetensors",
              "write the final model to FILE (safetensors, PyTorch layer names and shapes); with "
              "--from-checkpoint: export that checkpoint, evaluate it on the test set and exit",
              &PeerConfig::export_path),
      O::text("from-checkpoint", "DIR",
              "with --export: the checkpoint folder to export (its model spec is used)",
              &PeerConfig::from_checkpoint),
      O::text("checkpoint-dir", "DIR", "write checkpoints to DIR and resume from it on restart",
              train(&core::TrainConfig::checkpoint_dir)).for_programs(kGossipPeer | kPythonPeer),
      PeerOption{"run-id", "ID",
       "the run this peer belongs to, written in every checkpoint: a checkpoint of another run id "
       "is refused (exit 2), and one written with another number of shards continues at the same "
       "epoch and fraction of it (docs/cluster.md, \"One run\"); 1-64 characters of A-Z a-z 0-9 "
       ". _ -",
       [](PeerConfig& c, const std::string& v) {
         try {
           core::check_run_id(v);
         } catch (const std::invalid_argument& e) {
           throw UsageError(e.what());
         }
         c.train.run_id = v;
       }}.unset_means("GT_RUN_ID under --cluster, else none: any checkpoint of this model "
                      "continues").of_kind(ValueKind::Text).for_programs(kGossipPeer | kPythonPeer),
      O::number("checkpoint-every", "SECONDS",
                "also checkpoint every SECONDS of training, besides every epoch end and on stop; a "
                "killed peer loses at most this much",
                train(&core::TrainConfig::checkpoint_every_s), 1, 86400)
          .for_programs(kGossipPeer | kPythonPeer),
      O::choice("log-level", {"trace", "debug", "info", "warn", "error"}, "log level",
                &PeerConfig::log_level).for_programs(kGossipPeer | kPythonPeer),
      // Applied before the other flags (parse_peer_args); not a key of the file itself.
      PeerOption{"config", "FILE.json", "the same keys as the flags, without '--'",
       [](PeerConfig&, const std::string&) {}}.unset_means("none").of_kind(ValueKind::Text),
  }));
  return table;
}

namespace {

// A --config key's value as the flag's text; a JSON type the option does not take (a string
// where a number is expected, a bool for a value) is refused, naming the key and the type.
std::string config_value(const PeerOption& o, const nlohmann::json& value, const std::string& where) {
  auto refuse = [&](const std::string& want) {
    return UsageError(where + ": '" + o.name + "' takes " + want + ", not " + value.dump());
  };
  if (value.is_array() && o.name == "seeds") {
    std::string v;
    for (const auto& s : value) {
      if (!s.is_string()) throw refuse("a string \"HOST:PORT,...\" or an array of such strings");
      v += (v.empty() ? "" : ",") + s.get<std::string>();
    }
    return v;
  }
  if (o.kind == ValueKind::Switch) {
    if (!value.is_boolean()) throw refuse("true or false (a switch)");
    return "";
  }
  if (value.is_string()) {
    const std::string v = value.get<std::string>();
    const bool numeric = !v.empty() && [&] {
      double x = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      return ec == std::errc() && p == v.data() + v.size();
    }();
    if (o.kind == ValueKind::Number) throw refuse("a number (" + o.arg + ")");
    if (o.kind == ValueKind::NumberOrWord && numeric)
      throw refuse("a number or a word (" + o.arg + "), a number as a JSON number");
    return v;
  }
  if (value.is_number()) {
    if (o.kind == ValueKind::Text) throw refuse("a string (" + o.arg + ")");
    if (value.is_number_integer()) return std::to_string(value.get<long long>());
    std::ostringstream os;
    os.precision(17);
    os << value.get<double>();
    return os.str();
  }
  switch (o.kind) {
    case ValueKind::Number: throw refuse("a number (" + o.arg + ")");
    case ValueKind::NumberOrWord: throw refuse("a number or a word (" + o.arg + ")");
    case ValueKind::Text: throw refuse("a string (" + o.arg + ")");
    default: throw refuse("a string or a number (" + o.arg + ")");
  }
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
  std::vector<std::string> keys = peer_options().names();
  keys.erase(std::remove(keys.begin(), keys.end(), "config"), keys.end());
  for (const auto& [key, value] : j.items()) {
    const PeerOption* o = peer_options().find(key);
    if (!o || key == "config") {
      const std::string near = nearest_name(key, keys);
      throw UsageError("--config " + path + ": unknown key '" + key + "'" +
                       (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
    const std::string v = config_value(*o, value, "--config " + path);
    if (o->kind == ValueKind::Switch && !value.get<bool>()) continue;  // false: not given
    o->set(c, v);
  }
}

}  // namespace

double to_max_rate_mb(const std::string& flag, const std::string& v) {
  const double mb = to_double(flag, v, 0, 1e6);
  if (mb > 0 && mb < 20)
    throw UsageError("--" + flag + ": " + v +
                     " is under 20 (MB/s), the floor partners' "
                     "deadlines assume; use 0 for no cap");
  return mb;
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
                     "HOST:" +
                     std::to_string(port) +
                     " with this machine's address (e.g. "
                     "--advertise 10.0.0.1:" +
                     std::to_string(port) + ")");
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
  if (!peer_options().parse(args, c)) {
    *help = true;
    return c;
  }
  const auto given = given_flags(args);
  if (given.count("advertise") && !c.cluster.advertise_interface.empty())
    throw UsageError("--advertise and --advertise-interface both say what to announce: give one");
  apply_cluster(c, given, process_env());
  if (c.cluster.kind.empty() && !c.cluster.advertise_interface.empty()) {
    std::string host;
    std::uint16_t port = 0;
    if (!net::split_host_port(c.listen, host, port) || port == 0)
      throw UsageError("--advertise-interface needs --listen HOST:PORT with a port other than 0");
    apply_advertise_interface(c, port);
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
  if (!c.from_checkpoint.empty() && c.export_path.empty())
    throw UsageError("--from-checkpoint needs --export FILE.safetensors");
  check_fedavg_options(c);
  try {  // the gossip settings' rules, the averager's own (gossip::check_config)
    gossip::check_config(c.node.averager);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (c.linger_s < 0) c.linger_s = c.gossip_enabled() ? kDefaultLingerS : 0.0;
  return c;
}

// --help's layout: what a first run needs, then the rest by topic.
const std::vector<HelpGroup>& peer_help_groups() {
  static const std::vector<HelpGroup> groups = {
      {"A first run", {"data", "model", "epochs", "batch", "lr", "listen", "seeds", "metrics",
                       "checkpoint-dir", "run-id", "config"}},
      {"Data", {"partition", "num-shards", "shard", "seed"}},
      {"Model and training",
       {"optimizer", "momentum", "weight-decay", "schedule", "logit-adjust", "backend", "device", "precision",
        "compute-threads", "blas-core", "train-nice", "progress-every", "checkpoint-every",
        "stall-timeout", "stop-grace"}},
      {"Gossip",
       {"gossip-every", "comm-preset", "wire", "error-feedback", "finish-wire", "finish-from",
        "slow-link-wire", "max-lag", "max-lag-share", "max-ahead", "outer-every", "outer-lr", "outer-momentum",
        "weighting", "partner-choice", "catch-up", "catch-up-behind", "catch-up-timeout", "min-peers",
        "min-peers-timeout", "linger", "linger-heal", "linger-settle", "max-rate"}},
      {"Robust mixing",
       {"mix", "clip-mult", "clip-window", "clip-warmup", "clip-warmup-frac", "suspect-mult",
        "suspect-floor", "suspect-action", "suspect-decay", "suspect-min-clip", "refuse-mult",
        "max-diff-norm", "ban-after", "ban-window", "ban", "fault"}},
      {"Network", {"advertise", "advertise-interface", "identity", "network-key", "allowlist", "net-nice", "net-cores",
                   "crypto-threads"}},
      {"Cluster (docs/cluster.md)",
       {"cluster", "base-port", "run-dir", "k8s-service", "k8s-replicas", "cluster-seeds",
        "churn"}},
      {"Observability", {"prometheus", "tensorboard", "log-level", "export", "from-checkpoint"}},
      {"FedAvg (docs/fedavg.md)",
       {"fedavg-server", "fedavg-server-addr", "rounds", "clients-per-round", "local-epochs",
        "local-steps", "fedprox-mu", "server-momentum", "round-timeout", "min-clients",
        "min-clients-timeout", "fedavg-wait"}},
  };
  return groups;
}

std::string peer_usage() {
  std::ostringstream os;
  os << "usage: gossip-peer [--config FILE.json] [flags]\n\n"
        "One gossiptrain peer: trains a model replica on its data shard and, given --seeds,\n"
        "averages parameters with random live peers over an encrypted channel.\n"
        "Without --seeds it trains alone. Every flag may also be a key of the --config file\n"
        "(numbers as JSON numbers, switches as true or false).\n\n";
  os << peer_options().help(40, peer_help_groups()) << "\n"
     << help_line("--help", "this text", 40)
     << "\n"
        "Exit codes: 0 done, 1 runtime failure, 2 bad flag or value, 130 interrupted.\n";
  return os.str();
}

}  // namespace gossiptrain::apps
