// summary.json, consensus distance and the --compare table for gossip-launch.
#include "apps/launch/summary.hpp"
#include "apps/launch/fedavg_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gossiptrain::apps {

Consensus consensus_distance(const std::vector<std::vector<float>>& params) {
  Consensus c;
  if (params.empty()) return c;
  const std::size_t n = params[0].size();
  for (const auto& p : params)
    if (p.size() != n)
      throw std::invalid_argument("parameter vectors differ in length (" + std::to_string(n) +
                                  " vs " + std::to_string(p.size()) + "): different models");
  // Double accumulation: the average of a few hundred thousand floats must not drift.
  std::vector<double> avg(n, 0.0);
  for (const auto& p : params)
    for (std::size_t k = 0; k < n; ++k) avg[k] += p[k];
  for (auto& a : avg) a /= double(params.size());
  for (const auto& p : params) {
    double s = 0.0;
    for (std::size_t k = 0; k < n; ++k) {
      const double d = double(p[k]) - avg[k];
      s += d * d;
    }
    c.per_peer.push_back(std::sqrt(s));
  }
  for (double d : c.per_peer) c.mean += d;
  c.mean /= double(c.per_peer.size());
  return c;
}

namespace {

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Run time of t on process `life`'s clock (its spawn time where its start is not known).
double on_run_clock(const PeerOutcome& out, int life, double t) {
  const auto& l = out.life_offsets_s;
  if (life >= 0 && std::size_t(life) < l.size()) return l[std::size_t(life)] + t;
  return (l.empty() ? out.start_offset_s : l.back()) + t;
}

// A peer's seconds over all its processes: from its first process's start to the end of the
// latest (its `done` seconds), on the run's clock; null before it is done.
std::optional<double> peer_seconds(const PeerStats& s, const PeerOutcome& out) {
  if (!s.seconds) return std::nullopt;
  const auto& l = out.life_offsets_s;
  return l.size() > 1 ? l.back() - l.front() + *s.seconds : *s.seconds;
}

// A total over the peers that reported the figure (a number in their summary); empty when none did.
void add_to(std::optional<std::int64_t>& total, const nlohmann::json& v) {
  if (v.is_number()) total = total.value_or(0) + v.get<std::int64_t>();
}

// Peer i's figures. Exchange counts come from its metrics lines, so a peer without any has none.
nlohmann::json peer_summary(const RunFacts& run, std::size_t i, const PeerStats& s,
                            const PeerOutcome& out, const std::optional<double>& final_acc,
                            const std::optional<double>& t_launch) {
  const std::optional<std::int64_t> steps = s.done_steps ? s.done_steps : s.step;
  // Without a checkpoint the count is steps x batch, an upper bound (the last batch of an epoch
  // can be short).
  std::optional<std::int64_t> samples = out.ckpt_samples;
  nlohmann::json samples_from = "checkpoint";
  if (!samples && steps) {
    samples = *steps * std::int64_t(run.batch);
    samples_from = "steps_x_batch";
  } else if (!samples) {
    samples_from = nullptr;
  }
  const bool reported = s.lines > 0;
  auto count = [&](auto v) { return reported ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {
      {"peer", int(i)},
      {"id", s.id},
      {"state", out.state},
      {"exit_code", out.exit_code >= 0 ? nlohmann::json(out.exit_code) : nlohmann::json(nullptr)},
      {"signal", out.signal ? nlohmann::json(out.signal) : nlohmann::json(nullptr)},
      {"failed", out.failed},
      {"alive_at_end", out.alive_at_end},
      {"final_test_acc", opt(final_acc)},
      {"best_test_acc", opt(s.best_test_acc)},
      {"time_to_target_s", opt(s.time_to_target)},
      {"time_to_target_launch_s", opt(t_launch)},
      {"epochs", opt(s.epoch)},
      {"steps", opt(steps)},
      {"samples", opt(samples)},
      {"samples_from", samples_from},
      {"seconds", opt(peer_seconds(s, out))},
      {"exchanges_ok", count(s.exchanges_ok)},
      {"exchanges_failed", count(s.exchanges_failed)},
      {"exchanges_failed_by_reason", s.failed_by_reason},
      {"exchanges_averaging", count(s.exchanges_averaging)},
      {"exchanges_clipped", count(s.exchanges_clipped)},
      {"mix_weight_sum", reported ? nlohmann::json(s.mix_weight_sum) : nlohmann::json(nullptr)},
      {"averaging_alerts", s.averaging_alerts},
      {"not_averaging_at_end", s.not_averaging},
      {"bans", s.bans},
      {"banned", s.banned},
      {"averaging_alert_reason", s.averaging_alerts ? nlohmann::json(s.alert_reason) : nullptr},
      {"averaging_alert_addr", s.averaging_alerts ? nlohmann::json(s.alert_addr) : nullptr},
      {"bytes_sent", count(s.bytes)},
      {"bytes_sent_mb", reported ? nlohmann::json(double(s.bytes) / 1e6) : nlohmann::json(nullptr)},
      {"bytes_to_target_mb", nullptr},  // sum_peers fills it in once the swarm's time is known
      {"bytes_sent_and_received", count(s.bytes_wire)},
      {"consensus_distance", opt(out.consensus)},
      {"metrics_lines", s.lines},
      {"metrics_bad_lines", s.bad_lines},
      {"errors", s.errors},
      {"last_error", s.last_error},
      {"start_offset_s", out.start_offset_s},
      {"clock_offset_s", out.life_offsets_s.empty() ? nlohmann::json(nullptr)
                                                     : nlohmann::json(out.life_offsets_s.back())},
      {"life_offsets_s", out.life_offsets_s},
  };
}

}  // namespace

namespace {

// What the summary sums up over the started peers.
struct PeerTotals {
  nlohmann::json peers = nlohmann::json::array();
  std::vector<double> finals;  // final accuracies of the peers alive at the end
  std::optional<double> best, t_all, t_first;
  bool all_reached = false;
  std::optional<std::int64_t> samples, bytes, ok, failed, averaging;
  std::optional<double> bytes_to_target_mb;
  std::map<std::string, int> reasons;
  int bans = 0;
  nlohmann::json failed_peers = nlohmann::json::array();
  nlohmann::json not_averaging = nlohmann::json::array();
};

// A FedAvg client's bytes sent by run time T: its last mark at or before T.
std::int64_t client_bytes_by(const PeerStats& s, const PeerOutcome& out, double T) {
  std::int64_t b = 0;
  for (const auto& m : s.bytes_marks)
    if (on_run_clock(out, m.life, m.t) <= T) b = m.bytes;
  return b;
}

// bytes_to_target_mb, per peer and for the swarm (docs/communication.md): a peer that evaluates,
// the MB it had sent when its first evaluation at or above the target came; a FedAvg client,
// the MB it had sent by the swarm's time to the target. The swarm's is their sum, null unless
// every started peer has one.
void bytes_to_target(PeerTotals& t, const std::vector<PeerStats>& stats,
                     const std::vector<PeerOutcome>& outcomes) {
  bool all = !t.peers.empty();
  double sum = 0.0;
  for (auto& p : t.peers) {
    const std::size_t i = std::size_t(p["peer"].get<int>());
    const PeerStats& s = stats[i];
    std::optional<double> mb;
    if (s.fedavg_client) {
      if (t.all_reached && t.t_all) mb = double(client_bytes_by(s, outcomes[i], *t.t_all)) / 1e6;
    } else if (s.bytes_at_target) {
      mb = double(*s.bytes_at_target) / 1e6;
    }
    p["bytes_to_target_mb"] = opt(mb);
    if (mb) sum += *mb;
    else all = false;
  }
  if (all) t.bytes_to_target_mb = sum;
}

PeerTotals sum_peers(const RunFacts& run, const std::vector<PeerStats>& stats,
                     const std::vector<PeerOutcome>& outcomes) {
  PeerTotals t;
  t.all_reached = !stats.empty();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const PeerStats& s = stats[i];
    const PeerOutcome& out = outcomes[i];
    if (!out.started) continue;
    // The final figure is the model as the peer ended: its eval marked final (after lingering or
    // a stop), else the one `done` reports, else (a peer killed before `done`) its last eval.
    std::optional<double> final_acc = s.final_eval_acc   ? s.final_eval_acc
                                      : s.final_test_acc ? s.final_test_acc
                                                         : s.test_acc;
    if (final_acc && out.alive_at_end) t.finals.push_back(*final_acc);
    if (s.best_test_acc && (!t.best || *s.best_test_acc > *t.best)) t.best = s.best_test_acc;
    std::optional<double> t_launch;
    if (s.time_to_target) {
      // The first time it got there, in whichever process: on the run's clock.
      t_launch = on_run_clock(out, s.target_life, *s.time_to_target);
      if (!t.t_all || *t_launch > *t.t_all) t.t_all = t_launch;
      if (!t.t_first || *t_launch < *t.t_first) t.t_first = t_launch;
    } else if (!s.fedavg_client) {
      t.all_reached = false;
    }
    t.peers.push_back(peer_summary(run, i, s, out, final_acc, t_launch));
    const nlohmann::json& p = t.peers.back();
    add_to(t.samples, p["samples"]);
    add_to(t.bytes, p["bytes_sent"]);
    add_to(t.ok, p["exchanges_ok"]);
    add_to(t.failed, p["exchanges_failed"]);
    add_to(t.averaging, p["exchanges_averaging"]);
    for (const auto& [r, n] : s.failed_by_reason) t.reasons[r] += n;
    if (out.failed) t.failed_peers.push_back(int(i));
    if (s.averaging_alerts > 0) t.not_averaging.push_back(int(i));
    t.bans += s.bans;
  }
  bytes_to_target(t, stats, outcomes);
  return t;
}

}  // namespace

nlohmann::json make_summary(const RunFacts& run, const std::vector<PeerStats>& stats,
                            const std::vector<PeerOutcome>& outcomes) {
  const LaunchOptions& o = *run.options;
  const PeerTotals t = sum_peers(run, stats, outcomes);
  std::optional<double> mean, mn, mx, spread;
  if (!t.finals.empty()) {
    double sum = 0;
    for (double f : t.finals) sum += f;
    mean = sum / double(t.finals.size());
    mn = *std::min_element(t.finals.begin(), t.finals.end());
    mx = *std::max_element(t.finals.begin(), t.finals.end());
    spread = *mean - *mn;
  }
  nlohmann::json j = {
      {"run_dir", run.run_dir},
      {"mode", mode_name(o.mode)},
      {"partition", o.partition},
      {"data", o.data},
      {"model", run.model},
      {"epochs", run.epochs},
      {"batch", run.batch},
      {"seed", o.seed},
      {"num_peers", int(t.peers.size())},
      {"started_at", run.started_at},
      {"seconds", run.seconds},
      {"interrupted", run.interrupted},
      {"failed_peers", t.failed_peers},
      // Peers that said every exchange failed for a while (they trained alone meanwhile).
      {"peers_not_averaging", t.not_averaging},
      // `ban` lines over all peers (robust mixing banned a partner after repeated refusals).
      {"bans", t.bans},
      {"target_acc", o.target_acc},
      {"final_test_acc_mean", opt(mean)},
      {"final_test_acc_min", opt(mn)},
      {"final_test_acc_max", opt(mx)},
      {"final_test_acc_spread", opt(spread)},
      {"best_test_acc", opt(t.best)},
      // On the run's clock (every launch of it, run_clock.hpp): when every peer had first reached
      // the target, in any of its processes (null if one never did), and the first peer to.
      {"time_to_target_s", t.all_reached ? opt(t.t_all) : nlohmann::json(nullptr)},
      {"time_to_target_first_s", opt(t.t_first)},
      {"samples", opt(t.samples)},
      {"exchanges_ok", opt(t.ok)},
      {"exchanges_failed", opt(t.failed)},
      {"exchanges_averaging", opt(t.averaging)},
      {"exchanges_failed_by_reason", t.reasons},
      {"bytes_sent", opt(t.bytes)},
      {"bytes_sent_mb", t.bytes ? nlohmann::json(double(*t.bytes) / 1e6) : nlohmann::json(nullptr)},
      // Summed over the peers: the MB each sent until its first evaluation at or above the target
      // (a FedAvg client: until the swarm's time_to_target_s); null unless every peer got there.
      {"bytes_to_target_mb", opt(t.bytes_to_target_mb)},
      {"consensus_distance", opt(run.consensus_distance)},
      {"consensus_note", run.consensus_note},
      {"consensus_points", run.consensus_points},
      {"peers", t.peers},
  };
  return j;
}

std::string pct(const std::optional<double>& v) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100.0 * *v);
  return b;
}

std::string peer_table_header() {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-4s %-16s %7s %7s %8s %8s %8s %17s %8s %4s  %s", "peer", "id",
                "epoch", "step", "loss", "acc", "best", "exch avg/ok/fail", "MB sent", "live",
                "state");
  return buf;
}

std::string peer_table_row(std::size_t i, const PeerStats& s, int epochs,
                           const std::string& state) {
  // Counts from the metrics lines are only shown once the peer has written one.
  const bool reported = s.lines > 0;
  std::string ep = s.epoch ? std::to_string(*s.epoch) : "-";
  // Within an epoch, the fraction of the run's epochs done, from the `step` lines: a long epoch
  // (a CNN on a CPU: minutes) would otherwise show no progress until it ends.
  if (!s.done && s.step && s.steps_total > 0 && epochs > 0) {
    const double e = s.progress() * epochs;
    if (e >= s.epoch.value_or(0) + 0.05 && e < epochs) {
      char f[32];
      std::snprintf(f, sizeof f, "%.1f", e);
      ep = f;
    }
  }
  ep += "/" + std::to_string(epochs);
  const std::string step = s.step ? std::to_string(*s.step) : "-";
  // avg: the ok exchanges that averaged (not clipped to almost nothing).
  const std::string exch = reported ? std::to_string(s.exchanges_averaging) + "/" +
                                          std::to_string(s.exchanges_ok) + "/" +
                                          std::to_string(s.exchanges_failed)
                                    : "-";
  const std::string live = reported ? std::to_string(s.members_alive()) : "-";
  char loss[32] = "-", mb[32] = "-";
  if (s.loss) std::snprintf(loss, sizeof loss, "%.4f", *s.loss);
  if (reported) std::snprintf(mb, sizeof mb, "%.2f", double(s.bytes) / 1e6);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-4zu %-16.16s %7s %7s %8s %8s %8s %17s %8s %4s  %s", i,
                s.id.empty() ? "-" : s.id.c_str(), ep.c_str(), step.c_str(), loss,
                pct(s.test_acc).c_str(), pct(s.best_test_acc).c_str(), exch.c_str(), mb,
                live.c_str(), state.c_str());
  return buf;
}

namespace {

std::string fmt(const nlohmann::json& v, const char* f, double scale = 1.0) {
  if (!v.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v.get<double>() * scale);
  return buf;
}

std::string get_str(const nlohmann::json& j, const char* k) {
  auto it = j.find(k);
  if (it == j.end()) return "-";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number()) return it->dump();
  return "-";
}

}  // namespace

std::string compare_runs(const std::vector<std::string>& dirs, bool markdown) {
  const std::vector<std::string> head = {
      "run",  "mode",        "partition", "peers",          "mean acc",     "min acc",
      "best", "t->target s", "to target", "exch ok/failed", "MB to target", "MB sent", "consensus"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : dirs) {
    const std::string path = d + "/summary.json";
    std::ifstream in(path);
    if (!in) throw UsageError("--compare: cannot read " + path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError("--compare: " + path + " is not valid JSON: " + e.what());
    }
    std::string name = std::filesystem::path(d).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(d).lexically_normal().parent_path().filename();
    std::string mb = j.contains("bytes_sent") && j["bytes_sent"].is_number()
                         ? fmt(j["bytes_sent"], "%.1f", 1e-6)
                         : "-";
    rows.push_back({name, get_str(j, "mode"), get_str(j, "partition"), peers_cell(j),
                    fmt(j.value("final_test_acc_mean", nlohmann::json()), "%.2f%%", 100),
                    fmt(j.value("final_test_acc_min", nlohmann::json()), "%.2f%%", 100),
                    fmt(j.value("best_test_acc", nlohmann::json()), "%.2f%%", 100),
                    fmt(j.value("time_to_target_s", nlohmann::json()), "%.1f"),
                    to_target_cell(j), get_str(j, "exchanges_ok") + "/" + get_str(j, "exchanges_failed"),
                    fmt(j.value("bytes_to_target_mb", nlohmann::json()), "%.1f"), mb,
                    fmt(j.value("consensus_distance", nlohmann::json()), "%.4g")});
  }
  std::ostringstream os;
  if (markdown) {
    auto line = [&](const std::vector<std::string>& r) {
      os << "|";
      for (const auto& c : r) os << " " << c << " |";
      os << "\n";
    };
    line(head);
    os << "|";
    for (std::size_t c = 0; c < head.size(); ++c) os << (c < 4 ? "---|" : "---:|");
    os << "\n";
    for (const auto& r : rows) line(r);
    return os.str();
  }
  std::vector<std::size_t> w(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    for (std::size_t c = 0; c < r.size(); ++c) {
      // Text columns left-aligned, figures right-aligned.
      std::string pad(w[c] - r[c].size(), ' ');
      os << (c < 3 ? r[c] + pad : pad + r[c]) << (c + 1 < r.size() ? "  " : "\n");
    }
  };
  line(head);
  for (const auto& r : rows) line(r);
  return os.str();
}

}  // namespace gossiptrain::apps
