#include "apps/launch/churn.hpp"

#include "gossip/membership/membership.hpp"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <set>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace gossiptrain::apps {

using core::ChurnEvent;
using core::ChurnKind;

ChurnDriver::ChurnDriver(core::ChurnScenario scenario, double horizon_s)
    : scenario_(std::move(scenario)) {
  core::ChurnSchedule s = core::expand_schedule(scenario_, horizon_s);
  timed_ = std::move(s.timed);
  by_progress_ = std::move(s.by_progress);
}

void ChurnDriver::schedule_end(const ChurnEvent& e, double now_s) {
  if (!e.for_s) return;
  ChurnEvent end;
  end.at = now_s + *e.for_s;
  end.generated = e.generated;
  end.peers = e.peers;
  switch (e.kind) {
    case ChurnKind::Pause: end.kind = ChurnKind::Resume; break;
    case ChurnKind::Crash:
    case ChurnKind::Stop: end.kind = ChurnKind::Restart; break;
    case ChurnKind::Partition: end.kind = ChurnKind::Heal; end.peers.clear(); break;
    case ChurnKind::Link: end.kind = ChurnKind::Link; break;  // no rate, no loss: restore
    case ChurnKind::Fault: end.kind = ChurnKind::Fault; break;   // no mode: honest again
    default: return;
  }
  ends_.push_back(std::move(end));
}

std::vector<ChurnEvent> ChurnDriver::due(double now_s, double progress) {
  std::vector<ChurnEvent> out;
  // Timed events and ends of effects, merged by time.
  for (;;) {
    const ChurnEvent* next = next_timed_ < timed_.size() ? &timed_[next_timed_] : nullptr;
    auto end = std::min_element(ends_.begin(), ends_.end(),
                                [](const auto& a, const auto& b) { return a.at < b.at; });
    const bool take_end = end != ends_.end() && end->at <= now_s && (!next || end->at < next->at);
    if (take_end) {
      out.push_back(*end);
      ends_.erase(end);
    } else if (next && next->at <= now_s) {
      out.push_back(*next);
      ++next_timed_;
    } else {
      break;
    }
  }
  while (next_progress_ < by_progress_.size() && by_progress_[next_progress_].at <= progress)
    out.push_back(by_progress_[next_progress_++]);
  for (auto& e : out) {
    e.at = now_s;
    e.by_progress = false;
    schedule_end(e, now_s);
  }
  return out;
}

bool ChurnDriver::start_pending() const {
  auto starts = [](const ChurnEvent& e) {
    return e.kind == ChurnKind::Restart || e.kind == ChurnKind::Join ||
           e.kind == ChurnKind::Resume;
  };
  return std::any_of(timed_.begin() + std::ptrdiff_t(next_timed_), timed_.end(), starts) ||
         std::any_of(by_progress_.begin() + std::ptrdiff_t(next_progress_), by_progress_.end(),
                     starts) ||
         std::any_of(ends_.begin(), ends_.end(), starts);
}

bool ChurnDriver::empty() const {
  return next_timed_ == timed_.size() && next_progress_ == by_progress_.size() && ends_.empty();
}

EventLog::EventLog(const std::string& path) : f_(std::fopen(path.c_str(), "a")) {
  if (!f_) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
}

EventLog::~EventLog() {
  if (f_) std::fclose(f_);
}

void EventLog::write(double t, const std::string& event, nlohmann::json fields) {
  nlohmann::json j = {{"t", t}, {"event", event}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  lines_.push_back(j);
  if (!f_) return;
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

const char* slot_state_name(SlotState s) {
  switch (s) {
    case SlotState::NotJoined: return "not joined";
    case SlotState::Up: return "up";
    case SlotState::Paused: return "paused";
    case SlotState::Crashed: return "crashed";
    case SlotState::Stopped: return "stopped";
  }
  return "?";
}

ChurnRunner::ChurnRunner(core::ChurnScenario scenario, double horizon_s, EventLog& log)
    : driver_(std::move(scenario), horizon_s), log_(log) {
  const int n = driver_.total_peers();
  state_.assign(std::size_t(n), SlotState::NotJoined);
  churn_signalled_.assign(std::size_t(n), false);
  restarts_.assign(std::size_t(n), 0);
  next_join_ = driver_.scenario().initial_peers;
}

void ChurnRunner::tick(double now_s, double progress, ChurnPeers& peers) {
  run_deferred_restarts(now_s, peers);
  for (const auto& e : driver_.due(now_s, progress)) apply(e, now_s, peers);
}

// Why an event passed over peer p: the state it found it in.
std::string ChurnRunner::skip_reason(int p, const ChurnPeers& peers) const {
  if (p >= slots()) return "no such peer slot";
  const SlotState st = state_[std::size_t(p)];
  if (st == SlotState::Up && !peers.running(p)) return "it finished on its own";
  return std::string("it is ") + slot_state_name(st);
}

// A peer the scenario took down comes back; one still going down (killed, not reaped yet) comes
// back as soon as it is gone (deferred); one that finished on its own is never restarted.
void ChurnRunner::restart(int p, ChurnPeers& peers, Outcome& o) {
  const SlotState st = state_[std::size_t(p)];
  if (st != SlotState::Crashed && st != SlotState::Stopped) {
    o.skip(p, skip_reason(p, peers));
    return;
  }
  if (peers.running(p)) {
    if (std::find(deferred_restarts_.begin(), deferred_restarts_.end(), p) ==
        deferred_restarts_.end())
      deferred_restarts_.push_back(p);
    o.deferred.push_back(p);
    return;
  }
  peers.start_peer(p);
  state_[std::size_t(p)] = SlotState::Up;
  ++restarts_[std::size_t(p)];
  o.done.push_back(p);
}

void ChurnRunner::run_deferred_restarts(double now_s, ChurnPeers& peers) {
  Outcome o;
  std::vector<int> still;
  for (int p : deferred_restarts_) {
    if (peers.running(p)) still.push_back(p);
    else restart(p, peers, o);
  }
  deferred_restarts_ = std::move(still);
  if (!o.done.empty())
    log_.write(now_s, "churn", {{"kind", "restart"}, {"source", "deferred"}, {"applied_to", o.done}});
}

bool ChurnRunner::exited(int i) {
  // A peer that ends on its own (training over, or a failure) keeps its state: its later events
  // find it not running and are skipped, and it is never restarted. One the scenario crashed or
  // stopped stays crashed or stopped until its restart.
  const bool ours = churn_signalled_.at(std::size_t(i));
  churn_signalled_[std::size_t(i)] = false;
  return ours;
}

void ChurnRunner::release_paused(double now_s, ChurnPeers& peers) {
  nlohmann::json resumed = nlohmann::json::array();
  for (int i = 0; i < slots(); ++i)
    if (peers.running(i) && state_[std::size_t(i)] == SlotState::Up) return;
  if (driver_.start_pending()) return;
  for (int i = 0; i < slots(); ++i) {
    if (state_[std::size_t(i)] != SlotState::Paused || !peers.running(i)) continue;
    peers.send_signal(i, SIGCONT);
    state_[std::size_t(i)] = SlotState::Up;
    resumed.push_back(i);
  }
  if (!resumed.empty())
    log_.write(now_s, "churn", {{"kind", "resume"}, {"source", "end of run"}, {"applied_to", resumed}});
}

bool ChurnRunner::waiting_for_restart() const {
  const bool down = std::any_of(state_.begin(), state_.end(), [](SlotState s) {
    return s == SlotState::Crashed || s == SlotState::Stopped;
  });
  return down && (driver_.start_pending() || !deferred_restarts_.empty());
}

// Signals every named peer that is running and not already in `to`; the rest are skipped (a
// peer that finished, or one the scenario already took down), and say so in events.jsonl.
void ChurnRunner::signal_each(const ChurnEvent& e, int sig, SlotState required, SlotState to,
                              ChurnPeers& peers, Outcome& o, const std::function<void(int)>& then) {
  for (int p : e.peers) {
    if (p >= slots() || !peers.running(p) || state_[std::size_t(p)] != required) {
      o.skip(p, skip_reason(p, peers));
      continue;
    }
    peers.send_signal(p, sig);
    state_[std::size_t(p)] = to;
    if (sig == SIGKILL || sig == SIGTERM) churn_signalled_[std::size_t(p)] = true;
    if (then) then(p);
    o.done.push_back(p);
  }
}

namespace {

// What a signalling event does: the signal, the state a peer must be in, the state it leaves.
struct SignalRule {
  int sig;
  SlotState required, to;
};

SignalRule signal_rule(ChurnKind k) {
  switch (k) {
    case ChurnKind::Crash: return {SIGKILL, SlotState::Up, SlotState::Crashed};
    case ChurnKind::Stop: return {SIGTERM, SlotState::Up, SlotState::Stopped};
    case ChurnKind::Pause: return {SIGSTOP, SlotState::Up, SlotState::Paused};
    case ChurnKind::Resume: return {SIGCONT, SlotState::Paused, SlotState::Up};
    default: throw std::logic_error("churn: no signal for this event");
  }
}

}  // namespace

void ChurnRunner::apply(const ChurnEvent& e, double now_s, ChurnPeers& peers) {
  Outcome o;
  nlohmann::json& done = o.done;
  switch (e.kind) {
    case ChurnKind::Crash:
    case ChurnKind::Stop:
    case ChurnKind::Pause:
    case ChurnKind::Resume: {
      const SignalRule r = signal_rule(e.kind);
      signal_each(e, r.sig, r.required, r.to, peers, o);
      break;
    }
    case ChurnKind::Restart:
      for (int p : e.peers) restart(p, peers, o);
      break;
    case ChurnKind::Join:
      for (int k = 0; k < e.count && next_join_ < slots(); ++k) {
        peers.start_peer(next_join_);
        state_[std::size_t(next_join_)] = SlotState::Up;
        done.push_back(next_join_++);
      }
      break;
    case ChurnKind::Partition:
      peers.partition(e.groups);
      for (const auto& g : e.groups)
        for (int p : g) done.push_back(p);
      break;
    case ChurnKind::Heal:
      peers.heal();
      break;
    case ChurnKind::Link:
      for (int p : e.peers) {
        peers.set_link(p, e.rate_mbit, e.loss);
        done.push_back(p);
      }
      break;
    case ChurnKind::Fault:
      // A faulty peer is the same peer restarted with --fault MODE: stopped gracefully (it
      // checkpoints), then started again from that checkpoint once it is gone; the end of the
      // fault does the same without the flag.
      signal_each(e, SIGTERM, SlotState::Up, SlotState::Stopped, peers, o, [&](int p) {
        peers.set_fault(p, e.mode);
        deferred_restarts_.push_back(p);
      });
      break;
  }
  nlohmann::json j = core::to_json(e);
  j.erase("at");
  j.erase("event");
  j["kind"] = std::string(core::churn_kind_name(e.kind));
  j["source"] = e.generated ? "random" : "scenario";
  j["applied_to"] = done;
  if (!o.deferred.empty()) j["deferred"] = o.deferred;
  if (!o.skipped.empty()) {
    j["skipped"] = o.skipped;
    j["skipped_why"] = o.why;
  }
  log_.write(now_s, "churn", j);
}

std::optional<std::pair<std::string, nlohmann::json>> observed_line(
    std::size_t peer, const std::string& line,
    const std::function<std::optional<std::size_t>(const std::string&)>& index_of) {
  if (line.find("\"event\":\"member\"") == std::string::npos &&
      line.find("\"event\":\"eval\"") == std::string::npos &&
      line.find("\"event\":\"catch_up\"") == std::string::npos)
    return std::nullopt;
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("event")) return std::nullopt;
  const std::string ev = j.value("event", "");
  nlohmann::json f = {{"peer", peer}};
  if (ev == "member") {
    const std::string id = j.value("member", j.value("member_peer", ""));
    f["member"] = id;
    if (auto k = id.empty() ? std::nullopt : index_of(id)) f["member_index"] = *k;
    f["state"] = j.value("state", "");
  } else if (ev == "eval") {
    if (!j.contains("test_acc") || !j["test_acc"].is_number()) return std::nullopt;
    f["test_acc"] = j["test_acc"];
    f["step"] = j.value("step", 0);
  } else {
    for (const auto& [k, v] : j.items())
      if (k != "t" && k != "peer" && k != "event") f[k] = v;
  }
  return std::make_pair(ev, f);
}

double detection_bound_s(int peers) {
  const gossip::MembershipConfig c;
  const double scale = std::max(1.0, std::log10(double(std::max(1, peers))));
  const double min_s = c.suspicion_mult * scale * c.probe_interval.count() / 1000.0;
  return c.suspicion_max_timeout_mult * min_s + c.probe_interval.count() / 1000.0;
}

namespace {

using nlohmann::json;

double tof(const json& e) { return e.value("t", 0.0); }
int peer_of(const json& e) { return e.value("peer", -1); }

// Replays events.jsonl: who runs at time t, each peer's latest accuracy, the consensus samples.
struct Timeline {
  const std::vector<json>& ev;

  std::set<int> running_at(double t) const {
    std::set<int> up;
    for (const auto& e : ev) {
      if (tof(e) > t) break;
      const std::string k = e.value("event", "");
      if (k == "start") up.insert(peer_of(e));
      if (k == "exit") up.erase(peer_of(e));
    }
    return up;
  }
  std::optional<double> start_after(int p, double t) const {
    for (const auto& e : ev)
      if (tof(e) >= t && e.value("event", "") == "start" && peer_of(e) == p) return tof(e);
    return std::nullopt;
  }
  std::optional<double> exit_after(int p, double t) const {
    for (const auto& e : ev)
      if (tof(e) >= t && e.value("event", "") == "exit" && peer_of(e) == p) return tof(e);
    return std::nullopt;
  }
  // Mean over `who` of each peer's last accuracy at or before t (peers without one left out).
  std::optional<double> mean_acc_at(const std::set<int>& who, double t) const {
    std::map<int, double> last;
    for (const auto& e : ev) {
      if (tof(e) > t) break;
      if (e.value("event", "") == "eval" && who.count(peer_of(e))) last[peer_of(e)] = e["test_acc"];
    }
    if (last.empty()) return std::nullopt;
    double s = 0;
    for (const auto& [p, a] : last) s += a;
    return s / double(last.size());
  }
  // Mean over `who` of each peer's first accuracy after t.
  std::optional<double> mean_first_acc_after(const std::set<int>& who, double t) const {
    std::map<int, double> first;
    for (const auto& e : ev)
      if (tof(e) > t && e.value("event", "") == "eval" && who.count(peer_of(e)) &&
          !first.count(peer_of(e)))
        first[peer_of(e)] = e["test_acc"];
    if (first.empty()) return std::nullopt;
    double s = 0;
    for (const auto& [p, a] : first) s += a;
    return s / double(first.size());
  }
  std::optional<double> consensus(double t, bool after) const {
    std::optional<double> best;
    for (const auto& e : ev) {
      if (e.value("event", "") != "consensus") continue;
      if (!after && tof(e) <= t) best = e["distance"].get<double>();
      if (after && tof(e) > t) return e["distance"].get<double>();
    }
    return best;
  }
  // First time after t at which the mean of the latest accuracies of `who` is back to `level`.
  std::optional<double> recovered(const std::set<int>& who, double t, double level) const {
    std::map<int, double> last;
    for (const auto& e : ev) {
      if (e.value("event", "") != "eval" || !who.count(peer_of(e))) continue;
      last[peer_of(e)] = e["test_acc"];
      if (tof(e) <= t || last.size() < who.size()) continue;
      double s = 0;
      for (const auto& [p, a] : last) s += a;
      if (s / double(last.size()) >= level - 1e-9) return tof(e) - t;
    }
    return std::nullopt;
  }
};

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// Seconds after t until peer q first marked peer p dead or left (any later life of p included).
std::optional<double> marked_down_after(const Timeline& tl, int q, int p, double t) {
  for (const auto& e : tl.ev) {
    if (tof(e) < t || e.value("event", "") != "member" || peer_of(e) != q ||
        e.value("member_index", -1) != p)
      continue;
    const std::string state = e.value("state", "");
    if (state == "dead" || state == "left") return tof(e) - t;
  }
  return std::nullopt;
}

// One crashed or stopped peer: when each peer alive at that moment marked it dead or left.
json down_report(const Timeline& tl, const json& churn, int p, double bound) {
  const double t = tof(churn);
  std::set<int> others = tl.running_at(t);
  others.erase(p);
  json detected = json::object(), undetected = json::array();
  std::optional<double> worst;
  // A peer back before the suspicion ran out refutes it: nobody has to declare it dead then.
  const auto back = tl.start_after(p, t);
  for (int q : others) {
    std::optional<double> when = marked_down_after(tl, q, p, t);
    const auto gone = tl.exit_after(q, t);
    if (when && back && t + *when > *back) when.reset();  // about a later life of p
    if (when && (!gone || t + *when <= *gone)) {
      detected[std::to_string(q)] = *when;
      worst = std::max(worst.value_or(0.0), *when);
    } else if ((!gone || *gone - t > bound) && (!back || *back - t > bound)) {
      undetected.push_back(q);  // was up long enough to notice and did not
    }
  }
  // Nobody declared it dead and nobody had to: there is no detection time to hold against the
  // bound, and the report says why instead of a vacuous "within".
  json within = undetected.empty() && (!worst || *worst <= bound);
  json not_measured = nullptr;
  if (!worst && undetected.empty()) {
    within = nullptr;
    char why[160];
    if (others.empty())
      std::snprintf(why, sizeof why, "no other peer was up");
    else if (back && *back - t <= bound)
      std::snprintf(why, sizeof why,
                    "back after %.1f s, before the detection bound (%.1f s): nobody had to "
                    "declare it dead",
                    *back - t, bound);
    else
      std::snprintf(why, sizeof why,
                    "every other peer ended before the detection bound (%.1f s)", bound);
    not_measured = why;
  }
  const auto before = tl.mean_acc_at(others, t);
  return {{"t", t},
          {"kind", churn.value("kind", "")},
          {"peer", p},
          {"detected_by_s", detected},
          {"not_detected_by", undetected},
          {"max_detection_s", opt(worst)},
          {"back_after_s", back ? json(*back - t) : json(nullptr)},
          {"within_bound", within},
          {"detection_not_measured", not_measured},
          {"acc_before", opt(before)},
          {"acc_after", opt(tl.mean_first_acc_after(others, t))},
          {"recovery_s", before ? opt(tl.recovered(others, t, *before)) : json(nullptr)},
          {"consensus_before", opt(tl.consensus(t, false))},
          {"consensus_after", opt(tl.consensus(t, true))}};
}

json join_report(const Timeline& tl, const json& churn, int j) {
  const double t = tof(churn);
  std::set<int> others = tl.running_at(t);
  others.erase(j);
  std::optional<double> first;
  json catch_up = nullptr;
  for (const auto& e : tl.ev) {
    if (tof(e) < t || peer_of(e) != j) continue;
    if (!first && e.value("event", "") == "eval") first = e["test_acc"].get<double>();
    if (catch_up.is_null() && e.value("event", "") == "catch_up") catch_up = e;
  }
  return {{"t", t},
          {"kind", "join"},
          {"peer", j},
          {"first_eval_acc", opt(first)},
          {"swarm_acc_at_join", opt(tl.mean_acc_at(others, t))},
          {"catch_up", catch_up}};
}

}  // namespace

json churn_report(const std::vector<json>& events, const core::ChurnScenario& scenario,
                  const std::string& churn_arg) {
  const Timeline tl{events};
  const double bound = detection_bound_s(scenario.initial_peers);
  json per_event = json::array(), alive = json::array();
  std::map<std::string, int> counts;
  int up = 0;
  for (const auto& e : events) {
    const std::string k = e.value("event", "");
    if (k == "start" || k == "exit") {
      up += k == "start" ? 1 : -1;
      alive.push_back({tof(e), up});
    }
    if (k != "churn") continue;
    const std::string kind = e.value("kind", "");
    if (kind == "partition" || kind == "heal") {
      ++counts[kind];  // one event for the whole swarm
      continue;
    }
    for (const auto& p : e["applied_to"]) {
      ++counts[kind];
      if (kind == "crash" || kind == "stop") per_event.push_back(down_report(tl, e, p, bound));
      if (kind == "join") per_event.push_back(join_report(tl, e, p));
    }
  }
  // Over the crashes and stops whose detection was measured; null when none was.
  json all_within = nullptr;
  int not_measured = 0;
  for (const auto& r : per_event) {
    if (!r.contains("within_bound")) continue;  // a join
    if (r["within_bound"].is_boolean())
      all_within = (all_within.is_null() || all_within.get<bool>()) && r["within_bound"].get<bool>();
    else
      ++not_measured;
  }
  return {{"scenario", churn_arg},
          {"seed", scenario.seed},
          {"applied", counts},
          {"detection_bound_s", bound},
          {"all_detected_within_bound", all_within},
          {"detections_not_measured", not_measured},
          {"events", per_event},
          {"peers_alive_over_time", alive}};
}

std::string describe_churn(const nlohmann::json& e) {
  if (e.value("event", "") != "churn" || !e.contains("t") || !e["t"].is_number()) return {};
  auto peers = [](const nlohmann::json& list) {
    std::string out;
    for (const auto& p : list) out += (out.empty() ? "" : ",") + p.dump();
    return out;
  };
  char t[32];
  std::snprintf(t, sizeof t, "%.1f", e["t"].get<double>());
  const std::string kind = e.value("kind", "?");
  std::string line = std::string("churn at ") + t + " s: " + kind;
  const nlohmann::json applied = e.value("applied_to", nlohmann::json::array());
  if (kind == "partition" && e.contains("groups")) line += " into " + e["groups"].dump();
  else if (applied.is_array() && !applied.empty())
    line += (applied.size() == 1 ? " peer " : " peers ") + peers(applied);
  if (e.contains("mode") && e["mode"].is_string())
    line += " (" + e["mode"].get<std::string>() + ")";
  const std::string source = e.value("source", "");
  if (source == "random") line += " (random model)";
  if (source == "deferred") line += " (its killed process is gone now)";
  if (source == "end of run") line += " (end of run: nobody else is up)";
  const nlohmann::json deferred = e.value("deferred", nlohmann::json::array());
  if (deferred.is_array() && !deferred.empty())
    line += "; " + std::string(deferred.size() == 1 ? "peer " : "peers ") + peers(deferred) +
            " deferred until its killed process is gone";
  const nlohmann::json skipped = e.value("skipped", nlohmann::json::array());
  const nlohmann::json why = e.value("skipped_why", nlohmann::json::object());
  if (skipped.is_array())
    for (const auto& p : skipped) {
      line += "; skipped peer " + p.dump();
      const auto it = why.is_object() ? why.find(p.dump()) : why.end();
      if (it != why.end() && it->is_string()) line += " (" + it->get<std::string>() + ")";
    }
  if (kind != "heal" && kind != "partition" && (!applied.is_array() || applied.empty()) &&
      (!deferred.is_array() || deferred.empty()) && (!skipped.is_array() || skipped.empty()))
    line += ": no peer";
  return line;
}

}  // namespace gossiptrain::apps
