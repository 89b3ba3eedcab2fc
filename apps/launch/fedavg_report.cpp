// Figures that put FedAvg and gossip runs on equal terms; the FedAvg server's outages.
#include "apps/launch/fedavg_report.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace gossiptrain::apps {

using nlohmann::json;

double fedavg_progress(const PeerStats& server, const PeerConfig& server_config) {
  if (server.done) return 1.0;
  const int rounds = server_config.fedavg.rounds;
  if (rounds <= 0) return 0.0;
  return std::min(1.0, double(server.epoch.value_or(0)) / double(rounds));
}

namespace {

const char* role_of(LaunchMode mode, std::size_t peer) {
  if (mode != LaunchMode::Fedavg) return "peer";
  return peer == 0 ? "server" : "client";
}

json opt_int(const std::optional<long long>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

namespace {

// Each peer's role and figures at the target; the counts of peers and servers.
void add_roles(json& summary, LaunchMode mode, const std::vector<PeerStats>& stats) {
  int peers = 0, servers = 0;
  for (auto& p : summary["peers"]) {
    const std::size_t i = p.value("peer", 0);
    const std::string role = role_of(mode, i);
    p["role"] = role;
    const PeerStats* s = i < stats.size() ? &stats[i] : nullptr;
    p["epochs_at_target"] = s && s->target_epoch ? json(*s->target_epoch) : json(nullptr);
    p["exchanges_to_target"] = s && s->target_exchanges ? json(*s->target_exchanges) : json(nullptr);
    (role == "server" ? servers : peers) += 1;
  }
  summary["num_peers"] = peers;
  summary["num_servers"] = servers;
}

struct ToTarget {
  std::optional<long long> rounds, epochs, exchanges;
};

// FedAvg: the server's round that reached the target, in rounds and local epochs.
ToTarget fedavg_to_target(int local_epochs, const std::vector<PeerStats>& stats) {
  ToTarget t;
  if (stats.empty() || !stats[0].target_epoch) return t;
  t.rounds = *stats[0].target_epoch;
  if (local_epochs > 0) t.epochs = *t.rounds * local_epochs;  // 0: rounds of --local-steps
  return t;
}

// Gossip (and local): every peer that trained must have reached the target (as for
// time_to_target_s); the largest epoch, and the exchanges all peers initiated until then.
ToTarget peers_to_target(const json& summary, LaunchMode mode,
                         const std::vector<PeerStats>& stats) {
  ToTarget t;
  bool all = false;
  long long ex = 0, ep = 0;
  for (const auto& p : summary["peers"]) {
    const std::size_t i = p.value("peer", 0);
    if (i >= stats.size()) continue;
    if (!stats[i].target_epoch) return t;
    all = true;
    ep = std::max<long long>(ep, *stats[i].target_epoch);
    ex += stats[i].target_exchanges.value_or(0);
  }
  if (!all) return t;
  t.epochs = ep;
  if (mode == LaunchMode::Gossip) t.exchanges = ex;
  return t;
}

}  // namespace

void add_target_figures(json& summary, LaunchMode mode, int local_epochs,
                        const std::vector<PeerStats>& stats) {
  add_roles(summary, mode, stats);
  if (mode == LaunchMode::Fedavg && !summary["peers"].empty()) {
    // The global model is the server's: a client evaluates nothing (one restarted by churn that
    // never got a task is not even known as a client), so the time to the target is the server's.
    const json& server = summary["peers"][0];
    summary["time_to_target_s"] = server.value("time_to_target_launch_s", json(nullptr));
    summary["time_to_target_first_s"] = summary["time_to_target_s"];
  }
  const ToTarget t = mode == LaunchMode::Fedavg ? fedavg_to_target(local_epochs, stats)
                                                : peers_to_target(summary, mode, stats);
  summary["rounds_to_target"] = opt_int(t.rounds);
  summary["epochs_to_target"] = opt_int(t.epochs);
  summary["exchanges_to_target"] = opt_int(t.exchanges);
}

namespace {

bool names_server(const json& e) {
  if (!e.contains("applied_to") || !e["applied_to"].is_array()) return false;
  for (const auto& p : e["applied_to"])
    if (p.is_number_integer() && p.get<int>() == 0) return true;
  return false;
}

struct Round {
  double t;
  long long round;
};

// The server's completed rounds: its eval lines, in launch time.
std::vector<Round> server_rounds(const std::vector<json>& events) {
  std::vector<Round> rounds;
  for (const auto& e : events)
    if (e.value("event", "") == "eval" && e.value("peer", -1) == 0 && e.contains("step") &&
        e["step"].is_number())
      rounds.push_back({e.value("t", 0.0), e["step"].get<long long>()});
  return rounds;
}

json opt_round(const std::optional<Round>& r) { return r ? json(r->round) : json(nullptr); }

json opt_time(const std::optional<Round>& r) { return r ? json(r->t) : json(nullptr); }

// Walks the launch's events and closes an outage each time the server came back (or at the end).
class OutageTracker {
 public:
  OutageTracker(const std::vector<Round>& rounds, double run_seconds)
      : rounds_(rounds), run_seconds_(run_seconds) {}

  void on_event(const json& e) {
    const std::string ev = e.value("event", "");
    const double t = e.value("t", 0.0);
    if (ev == "churn" && names_server(e))
      on_churn(e.value("kind", ""), t);
    else if (ev == "exit" && e.value("peer", -1) == 0 && !down_at_)
      on_exit(e, t);
    else if (ev == "start" && e.value("peer", -1) == 0)
      on_start(t);
  }

  json finish() {
    if (down_at_) close_outage(std::nullopt);
    return outages_;
  }

 private:
  void on_churn(const std::string& kind, double t) {
    if (kind == "crash" || kind == "stop") {
      last_churn_ = t;
      how_ = kind;
    } else if (kind == "pause" && !down_at_) {
      down_at_ = t;
      how_ = "pause";
    } else if (kind == "resume" && down_at_ && how_ == "pause") {
      close_outage(t);
    }
  }

  void on_exit(const json& e, double t) {
    const bool by_churn = e.value("by_churn", false);
    const json& code = e.contains("exit_code") ? e["exit_code"] : json(nullptr);
    const bool clean = code.is_number_integer() && (code == 0 || code == 130);
    // A server that had finished its rounds (exit 0) as the scenario's signal came is no outage.
    const bool finished = code.is_number_integer() && code == 0;
    if ((by_churn && !finished) || !clean) {
      down_at_ = by_churn && last_churn_ ? *last_churn_ : t;
      if (!by_churn) how_ = "exit";
    }
    last_churn_.reset();
  }

  void on_start(double t) {
    if (!started_) first_start_ = t;
    started_ = true;
    if (down_at_) close_outage(t);
  }

  // The last round done before the server went down and the first done after it came back.
  std::pair<std::optional<Round>, std::optional<Round>> rounds_around(
      std::optional<double> back_at) const {
    std::optional<Round> before, after;
    for (const auto& r : rounds_) {
      if (r.t <= *down_at_) before = r;
      if (back_at && r.t > *back_at && !after) after = r;
    }
    // A round completed just before the crash can be timed just after it (the launcher's estimate
    // of the server's clock is an upper bound): the round the restart resumed from was done.
    if (after)
      for (const auto& r : rounds_)
        if (r.round == after->round - 1 && r.t <= *back_at && (!before || r.round > before->round))
          before = Round{std::min(r.t, *down_at_), r.round};
    return {before, after};
  }

  void close_outage(std::optional<double> back_at) {
    json o = {{"down_at_s", *down_at_}, {"how", how_}};
    o["back_at_s"] = back_at ? json(*back_at) : json(nullptr);
    o["down_s"] = back_at ? json(*back_at - *down_at_) : json(nullptr);
    const auto [before, after] = rounds_around(back_at);
    const double from = before ? before->t : first_start_;
    o["last_round_before"] = before ? json(before->round) : json(0);
    o["last_round_before_at_s"] = opt_time(before);
    o["first_round_after"] = opt_round(after);
    o["first_round_after_at_s"] = opt_time(after);
    // The restarted server resumed from its checkpoint: the round it completed first, less one.
    o["resumed_at_round"] = after ? json(after->round - 1) : json(nullptr);
    o["no_progress_s"] = (after ? after->t : run_seconds_) - from;
    o["recovered"] = bool(after);
    outages_.push_back(o);
    down_at_.reset();
  }

  const std::vector<Round>& rounds_;
  const double run_seconds_;
  json outages_ = json::array();
  std::optional<double> down_at_, last_churn_;
  std::string how_;
  double first_start_ = 0.0;
  bool started_ = false;
};

}  // namespace

json fedavg_report(const std::vector<json>& events, double run_seconds) {
  const std::vector<Round> rounds = server_rounds(events);
  OutageTracker tracker(rounds, run_seconds);
  for (const auto& e : events) tracker.on_event(e);
  const json outages = tracker.finish();
  double stalled = 0.0;
  for (const auto& o : outages) stalled += o["no_progress_s"].get<double>();
  json r = {{"rounds_completed", rounds.empty() ? 0 : rounds.back().round},
            {"server_outages", outages},
            {"no_progress_s_total", stalled}};
  json times = json::array();
  for (const auto& x : rounds) times.push_back({{"round", x.round}, {"t", x.t}});
  r["round_times"] = times;
  return r;
}

std::vector<std::string> describe_fedavg_outages(const json& report) {
  std::vector<std::string> out;
  if (!report.contains("server_outages")) return out;
  for (const auto& o : report["server_outages"]) {
    char buf[320];
    const std::string how = o.value("how", "down");
    if (o["recovered"].get<bool>()) {
      std::snprintf(buf, sizeof buf,
                    "FedAvg server %s at %.1f s, back at %.1f s (%.1f s down): no round "
                    "completed for %.1f s (round %lld at %.1f s -> round %lld at %.1f s, resumed "
                    "at round %lld)",
                    how.c_str(), o["down_at_s"].get<double>(), o["back_at_s"].get<double>(),
                    o["down_s"].get<double>(), o["no_progress_s"].get<double>(),
                    o["last_round_before"].get<long long>(),
                    o["last_round_before_at_s"].is_number()
                        ? o["last_round_before_at_s"].get<double>()
                        : 0.0,
                    o["first_round_after"].get<long long>(),
                    o["first_round_after_at_s"].get<double>(),
                    o["resumed_at_round"].get<long long>());
    } else {
      std::snprintf(buf, sizeof buf,
                    "FedAvg server %s at %.1f s and no round completed after it (%.1f s without "
                    "progress to the end of the run, last round %lld)",
                    how.c_str(), o["down_at_s"].get<double>(), o["no_progress_s"].get<double>(),
                    o["last_round_before"].get<long long>());
    }
    out.emplace_back(buf);
  }
  return out;
}

std::string to_target_cell(const json& s) {
  auto n = [&](const char* k) -> std::optional<long long> {
    if (!s.contains(k) || !s[k].is_number_integer()) return std::nullopt;
    return s[k].get<long long>();
  };
  if (auto r = n("rounds_to_target")) return std::to_string(*r) + " rounds";
  if (auto x = n("exchanges_to_target")) return std::to_string(*x) + " exch";
  if (auto e = n("epochs_to_target")) return std::to_string(*e) + " epochs";
  return "-";
}

std::string peers_cell(const json& s) {
  std::string p = s.contains("num_peers") ? s["num_peers"].dump() : "-";
  if (s.contains("num_servers") && s["num_servers"].is_number_integer() &&
      s["num_servers"].get<int>() > 0)
    p += " + server";
  return p;
}

}  // namespace gossiptrain::apps
