// Incremental metrics reading and per-peer figures for gossip-launch (see launch_metrics.hpp).
#include "apps/launch/metrics.hpp"

#include <map>

#include <cmath>
#include <cstdio>

namespace gossiptrain::apps {

void MetricsTail::read_more() {
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) return;
  if (std::fseek(f, long(offset_), SEEK_SET) == 0) {
    char chunk[65536];
    std::size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) {
      buf_.append(chunk, n);
      offset_ += n;
    }
  }
  std::fclose(f);
}

namespace {

std::optional<double> num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::optional<double> PeerStats::add_line(const std::string& line, double target_acc) {
  if (line.empty()) return std::nullopt;
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("t") || !j.contains("peer") ||
      !j.contains("event") || !j["t"].is_number() || !j["event"].is_string()) {
    ++bad_lines;
    return std::nullopt;
  }
  add_event(j, target_acc);
  return j["t"].get<double>();
}

void PeerStats::restarted() {
  ++life;
  clock_in_life = false;
  done = false;
  stopped = false;
  final_test_acc.reset();
  final_eval_acc.reset();
  done_steps.reset();
  seconds.reset();
}

void PeerStats::add_event(const nlohmann::json& j, double target_acc) {
  ++lines;
  const double t = j["t"].get<double>();
  const std::string ev = j["event"].get<std::string>();
  // A process's t never decreases (Metrics), so a smaller one is a restarted peer's new process;
  // so is a second `clock` line (each process writes one, near its start).
  if (lines > 1 && (t < last_t || (ev == "clock" && clock_in_life))) restarted();
  if (ev == "clock") clock_in_life = true;
  last_t = t;
  if (j["peer"].is_string()) id = j["peer"].get<std::string>();
  const std::int64_t bytes_before = bytes;
  fold(j, ev, t, target_acc);
  // A FedAvg client's bytes over time. Bounded: past the cap, the last mark moves.
  if (fedavg_client && bytes != bytes_before) {
    if (bytes_marks.size() >= kMaxBytesMarks) bytes_marks.pop_back();
    bytes_marks.push_back({life, t, bytes});
  }
}

void PeerStats::fold(const nlohmann::json& j, const std::string& ev, double t, double target_acc) {
  // A `hold` line (waiting for the swarm before the first step) holds until training shows again.
  if (ev == "hold") {
    hold = j.value("reason", "waiting");
    if (auto v = num(j, "left_s")) hold += ", at most " + std::to_string(int(std::ceil(*v))) + " s";
  } else if (ev == "step" || ev == "eval" || ev == "catch_up" || ev == "min_peers" ||
             ev == "done") {
    hold.clear();
  }
  using Fold = void (PeerStats::*)(const nlohmann::json&, double, double);
  static const std::map<std::string, Fold, std::less<>> kFolds = {
      {"step", &PeerStats::fold_step},           {"eval", &PeerStats::fold_eval},
      {"exchange", &PeerStats::fold_exchange},   {"round", &PeerStats::fold_fedavg},
      {"update", &PeerStats::fold_fedavg},       {"exchange_alert", &PeerStats::fold_alert},
      {"ban", &PeerStats::fold_ban},             {"member", &PeerStats::fold_member},
      {"checkpoint", &PeerStats::fold_checkpoint}, {"done", &PeerStats::fold_done},
      {"error", &PeerStats::fold_error},
  };
  if (const auto it = kFolds.find(ev); it != kFolds.end()) (this->*it->second)(j, t, target_acc);
}

void PeerStats::fold_step(const nlohmann::json& j, double, double) {
  if (auto v = num(j, "step")) step = std::int64_t(*v);
  if (auto v = num(j, "steps_total")) steps_total = std::int64_t(*v);
  if (auto v = num(j, "loss")) loss = v;
  if (auto v = num(j, "samples_per_s")) samples_per_s = v;
}

void PeerStats::fold_eval(const nlohmann::json& j, double t, double target_acc) {
  if (auto v = num(j, "epoch")) epoch = int(*v);
  if (auto v = num(j, "step")) step = std::max(step.value_or(0), std::int64_t(*v));
  if (auto v = num(j, "train_loss")) loss = v;
  if (auto v = num(j, "samples_per_s")) samples_per_s = v;
  if (auto v = num(j, "test_acc")) {
    test_acc = v;
    if (!best_test_acc || *v > *best_test_acc) best_test_acc = v;
    if (!time_to_target && *v >= target_acc) {
      time_to_target = t;
      target_life = life;
      bytes_at_target = bytes;
      target_epoch = epoch;
      target_exchanges = exchanges_initiated;
    }
    if (j.contains("final") && j["final"].is_boolean() && j["final"].get<bool>()) final_eval_acc = v;
  }
}

void PeerStats::fold_exchange(const nlohmann::json& j, double, double) {
  bool ok = j.contains("ok") && j["ok"].is_boolean() && j["ok"].get<bool>();
  if (ok) {
    ++exchanges_ok;
    if (j.contains("role") && j["role"] == "initiator") ++exchanges_initiated;
    // Lines of an older peer carry no `averaging`: every ok exchange averaged then.
    const bool averaged =
        !j.contains("averaging") || !j["averaging"].is_boolean() || j["averaging"].get<bool>();
    ++(averaged ? exchanges_averaging : exchanges_clipped);
    if (auto v = num(j, "w_eff")) mix_weight_sum += *v;
    else if (auto w = num(j, "w")) mix_weight_sum += *w * num(j, "clip").value_or(1.0);
  } else {
    ++exchanges_failed;
    std::string reason = "unknown";
    if (j.contains("reason") && j["reason"].is_string() &&
        !j["reason"].get<std::string>().empty())
      reason = j["reason"].get<std::string>();
    ++failed_by_reason[reason];
  }
  // bytes_sent is this peer's share; `bytes` (both directions) only when that is missing.
  if (auto v = num(j, "bytes_sent")) bytes += std::int64_t(*v);
  else if (auto w = num(j, "bytes")) bytes += std::int64_t(*w);
  if (auto v = num(j, "bytes")) bytes_wire += std::int64_t(*v);
}

// FedAvg: the server's tasks (round), a client's model (update).
void PeerStats::fold_fedavg(const nlohmann::json& j, double, double) {
  const bool update = j.value("event", "") == "update";
  if (update) fedavg_client = true;
  if (auto v = num(j, update ? "bytes" : "bytes_sent")) {
    bytes += std::int64_t(*v);
    bytes_wire += std::int64_t(*v);
  }
}

void PeerStats::fold_alert(const nlohmann::json& j, double, double) {
  not_averaging = j.value("state", "") == "failing";
  if (not_averaging) {
    ++averaging_alerts;
    alert_reason = j.value("reason", "");
    alert_addr = j.value("addr", "");
  }
}

void PeerStats::fold_ban(const nlohmann::json& j, double, double) {
  ++bans;
  if (j.contains("partner") && j["partner"].is_string() && banned.size() < 1024)
    ++banned[j["partner"].get<std::string>()];
}

void PeerStats::fold_member(const nlohmann::json& j, double, double) {
  // Metrics writes a field that would shadow the header as EVENT_KEY: the member is member_peer.
  for (const char* k : {"member_peer", "member", "id"})
    if (j.contains(k) && j[k].is_string() && j.contains("state") && j["state"].is_string()) {
      members[j[k].get<std::string>()] = j["state"].get<std::string>();
      break;
    }
}

void PeerStats::fold_checkpoint(const nlohmann::json& j, double, double) {
  if (auto v = num(j, "epoch")) epoch = std::max(epoch.value_or(0), int(*v));
}

void PeerStats::fold_done(const nlohmann::json& j, double, double) {
  done = true;
  final_test_acc = num(j, "final_test_acc");  // null: the peer does not know it
  if (auto v = num(j, "best_test_acc"))
    if (!best_test_acc || *v > *best_test_acc) best_test_acc = v;
  if (auto v = num(j, "steps")) done_steps = std::int64_t(*v);
  if (auto v = num(j, "epochs")) epoch = int(*v);
  if (auto v = num(j, "seconds")) seconds = v;
  stopped = j.contains("stopped") && j["stopped"].is_boolean() && j["stopped"].get<bool>();
}

void PeerStats::fold_error(const nlohmann::json& j, double, double) {
  ++errors;
  for (const char* k : {"message", "error", "what", "reason"})
    if (j.contains(k) && j[k].is_string()) {
      last_error = j[k].get<std::string>();
      break;
    }
}

int PeerStats::members_alive() const {
  int n = 0;
  for (const auto& [who, state] : members)
    if (state == "alive" || state == "suspect") ++n;
  return n;
}

double PeerStats::progress() const {
  if (done) return 1.0;
  if (steps_total <= 0) return 0.0;
  return std::min(1.0, double(step.value_or(0)) / double(steps_total));
}

}  // namespace gossiptrain::apps
