// Churn scenarios: JSON parsing (the shorthand is shorthand.cpp), static validation (indices, disjoint groups, lifecycle
// order) and expansion of the random model. All randomness is our own inverse-CDF sampling on
// base::Xoshiro256, so a seed gives the same schedule with every standard library.
#include "core/churn/scenario.hpp"
#include "core/churn/detail.hpp"

#include "base/rng.hpp"
#include "core/parse_number.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <utility>

namespace gossiptrain::core {

namespace churn_detail {
[[noreturn]] void fail(const std::string& what) {
  throw ScenarioError(std::string(kPrefix) + what);
}
bool is_lifecycle(ChurnKind k) {
  return k == ChurnKind::Crash || k == ChurnKind::Stop || k == ChurnKind::Restart ||
         k == ChurnKind::Pause || k == ChurnKind::Resume;
}
}  // namespace churn_detail

namespace {

using nlohmann::json;
using namespace churn_detail;

constexpr std::array<std::pair<ChurnKind, std::string_view>, 10> kKindNames{{
    {ChurnKind::Crash, "crash"},
    {ChurnKind::Stop, "stop"},
    {ChurnKind::Restart, "restart"},
    {ChurnKind::Join, "join"},
    {ChurnKind::Pause, "pause"},
    {ChurnKind::Resume, "resume"},
    {ChurnKind::Partition, "partition"},
    {ChurnKind::Heal, "heal"},
    {ChurnKind::Link, "link"},
    {ChurnKind::Fault, "fault"},
}};

constexpr const char* kKindList =
    "crash, stop, restart, join, pause, resume, partition, heal, link or fault";

bool has_peers(ChurnKind k) {
  return is_lifecycle(k) || k == ChurnKind::Link || k == ChurnKind::Fault;
}
bool has_for(ChurnKind k) {
  return k == ChurnKind::Pause || k == ChurnKind::Partition || k == ChurnKind::Link ||
         k == ChurnKind::Fault || k == ChurnKind::Crash || k == ChurnKind::Stop;
}

// The keys an event of this kind may carry.
std::vector<std::string_view> event_keys(ChurnKind k) {
  std::vector<std::string_view> keys{"at", "at_progress", "event"};
  if (has_peers(k)) keys.push_back("peers");
  if (has_for(k)) keys.push_back("for");
  if (k == ChurnKind::Join) keys.push_back("count");
  if (k == ChurnKind::Partition) keys.push_back("groups");
  if (k == ChurnKind::Link) keys.insert(keys.end(), {"rate_mbit", "loss"});
  if (k == ChurnKind::Fault) keys.push_back("mode");
  return keys;
}

void check_keys(const json& obj, const std::vector<std::string_view>& allowed,
                const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail(where + "unknown key \"" + key + "\" (allowed: " + list + ")");
  }
}

// A finite number; `where` ends with ": " (or is empty at top level).
double number(const json& v, const std::string& where, std::string_view key) {
  if (!v.is_number()) fail(where + "\"" + std::string(key) + "\" must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(where + "\"" + std::string(key) + "\" must be finite");
  return x;
}

double positive(const json& v, const std::string& where, std::string_view key) {
  const double x = number(v, where, key);
  if (!(x > 0.0)) fail(where + "\"" + std::string(key) + "\" must be > 0");
  return x;
}

// An integer in [lo, hi].
std::int64_t integer(const json& v, const std::string& where, std::string_view key, std::int64_t lo,
                     std::int64_t hi) {
  const std::string name = "\"" + std::string(key) + "\"";
  if (!v.is_number_integer()) fail(where + name + " must be an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    fail(where + name + " must be <= " + std::to_string(hi));
  }
  const std::int64_t x = v.get<std::int64_t>();
  if (x < lo || x > hi) {
    fail(where + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

// A non-empty list of distinct peer indices (>= 0; the upper bound is checked once joins are
// counted, in check_indices).
std::vector<int> peer_list(const json& v, const std::string& where, std::string_view key) {
  const std::string name = "\"" + std::string(key) + "\"";
  if (!v.is_array() || v.empty()) fail(where + name + " must be a non-empty list of peer indices");
  std::vector<int> peers;
  for (const auto& p : v) {
    if (!p.is_number_integer()) fail(where + name + " must hold integer peer indices");
    peers.push_back(static_cast<int>(integer(p, where, key, 0, 1 << 30)));
    if (std::count(peers.begin(), peers.end(), peers.back()) > 1) {
      fail(where + name + ": peer " + std::to_string(peers.back()) + " is listed twice");
    }
  }
  return peers;
}

std::vector<std::vector<int>> group_list(const json& v, const std::string& where) {
  if (!v.is_array() || v.size() < 2) fail(where + "\"groups\" must be a list of >= 2 peer lists");
  std::vector<std::vector<int>> groups;
  std::set<int> seen;
  for (const auto& g : v) {
    groups.push_back(peer_list(g, where, "groups"));
    for (int p : groups.back()) {
      if (!seen.insert(p).second) {
        fail(where + "\"groups\" must be disjoint: peer " + std::to_string(p) +
             " is in two groups");
      }
    }
  }
  return groups;
}

// "scale:K" (K finite), "random", "signflip", "stale" or "nan".
std::string fault_mode(const json& v, const std::string& where) {
  const char* forms = "\"mode\" must be one of scale:K, random, signflip, stale, nan";
  if (!v.is_string()) fail(where + forms);
  const std::string m = v.get<std::string>();
  if (m == "random" || m == "signflip" || m == "stale" || m == "nan") return m;
  if (m.starts_with("scale:")) {
    const auto k = parse_whole<double>(std::string_view(m).substr(6));
    if (k && std::isfinite(*k)) return m;
    fail(where + "\"mode\" " + m + ": K must be a finite number");
  }
  fail(where + forms + " (got \"" + m + "\")");
}

// Reads "at" / "at_progress" (exactly one) into e.
void read_when(const json& j, const std::string& where, ChurnEvent& e) {
  const bool at = j.contains("at"), progress = j.contains("at_progress");
  if (at == progress) fail(where + "needs exactly one of \"at\" and \"at_progress\"");
  e.by_progress = progress;
  if (at) {
    e.at = number(j["at"], where, "at");
    if (e.at < 0.0) fail(where + "\"at\" must be >= 0 seconds");
  } else {
    e.at = number(j["at_progress"], where, "at_progress");
    if (e.at < 0.0 || e.at > 1.0) fail(where + "\"at_progress\" must be in [0, 1]");
  }
}

// The fields that depend on the kind.
void read_kind_fields(const json& j, const std::string& where, ChurnEvent& e) {
  auto need = [&](const char* key) -> const json& {
    if (!j.contains(key)) fail(where + "missing \"" + key + "\"");
    return j[key];
  };
  if (has_peers(e.kind)) e.peers = peer_list(need("peers"), where, "peers");
  if (j.contains("for")) e.for_s = positive(j["for"], where, "for");
  switch (e.kind) {
    case ChurnKind::Join:
      if (j.contains("count"))
        e.count = static_cast<int>(integer(j["count"], where, "count", 1, 1 << 20));
      break;
    case ChurnKind::Partition: e.groups = group_list(need("groups"), where); break;
    case ChurnKind::Link:
      if (j.contains("rate_mbit")) e.rate_mbit = positive(j["rate_mbit"], where, "rate_mbit");
      if (j.contains("loss")) {
        e.loss = number(j["loss"], where, "loss");
        if (*e.loss < 0.0 || *e.loss >= 1.0) fail(where + "\"loss\" must be in [0, 1)");
      }
      if (!e.rate_mbit && !e.loss) fail(where + "needs \"rate_mbit\" or \"loss\" (or both)");
      break;
    case ChurnKind::Fault: e.mode = fault_mode(need("mode"), where); break;
    default: break;
  }
}

ChurnEvent parse_event(const json& j, std::size_t index) {
  std::string where = "event " + std::to_string(index) + ": ";
  if (!j.is_object()) fail(where + "must be an object");
  if (!j.contains("event") || !j["event"].is_string()) {
    fail(where + "\"event\" must be one of " + kKindList);
  }
  const std::string name = j["event"].get<std::string>();
  const auto kind = churn_kind_from_name(name);
  if (!kind) fail(where + "\"event\" must be one of " + kKindList + " (got \"" + name + "\")");
  where = "event " + std::to_string(index) + " (" + name + "): ";
  check_keys(j, event_keys(*kind), where);
  ChurnEvent e;
  e.kind = *kind;
  read_when(j, where, e);
  read_kind_fields(j, where, e);
  return e;
}

// "exponential" -> 0, "weibull:K" -> K.
double distribution(const json& v) {
  const char* forms = "random: \"distribution\" must be \"exponential\" or \"weibull:K\" (K > 0)";
  if (!v.is_string()) fail(forms);
  const std::string d = v.get<std::string>();
  if (d == "exponential") return 0.0;
  if (d.starts_with("weibull:")) {
    const auto k = parse_whole<double>(std::string_view(d).substr(8));
    if (k && std::isfinite(*k) && *k > 0.0) return *k;
  }
  fail(std::string(forms) + " (got \"" + d + "\")");
}

RandomChurn parse_random(const json& j, int n) {
  const std::string where = "random: ";
  if (!j.is_object()) fail("\"random\" must be an object");
  check_keys(j,
             {"kind", "mean_uptime_s", "mean_downtime_s", "distribution", "restart",
              "max_down_fraction", "peers", "start_s"},
             where);
  RandomChurn r;
  const std::string kind =
      j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>() : "";
  if (kind == "crash") r.down = ChurnKind::Crash;
  else if (kind == "stop") r.down = ChurnKind::Stop;
  else if (kind == "pause") r.down = ChurnKind::Pause;
  else fail(where + "\"kind\" must be crash, stop or pause");
  for (const char* key : {"mean_uptime_s", "mean_downtime_s"}) {
    if (!j.contains(key)) fail(where + "missing \"" + key + "\"");
  }
  r.mean_uptime_s = positive(j["mean_uptime_s"], where, "mean_uptime_s");
  r.mean_downtime_s = positive(j["mean_downtime_s"], where, "mean_downtime_s");
  if (j.contains("distribution")) r.weibull_k = distribution(j["distribution"]);
  if (j.contains("restart")) {
    if (!j["restart"].is_boolean()) fail(where + "\"restart\" must be true or false");
    r.restart = j["restart"].get<bool>();
    if (!r.restart && r.down == ChurnKind::Pause)
      fail(where + "\"restart\": a paused peer always resumes");
  }
  if (j.contains("max_down_fraction")) {
    r.max_down_fraction = number(j["max_down_fraction"], where, "max_down_fraction");
    if (!(r.max_down_fraction > 0.0 && r.max_down_fraction <= 1.0)) {
      fail(where + "\"max_down_fraction\" must be in (0, 1]");
    }
  }
  if (j.contains("start_s")) {
    r.start_s = number(j["start_s"], where, "start_s");
    if (r.start_s < 0.0) fail(where + "\"start_s\" must be >= 0");
  }
  if (j.contains("peers")) {
    r.peers = peer_list(j["peers"], where, "peers");
    for (int p : r.peers) {
      if (p >= n)
        fail(where + "\"peers\": peer " + std::to_string(p) + " is not an initial peer (0.." +
             std::to_string(n - 1) + ")");
    }
  } else {
    for (int p = 0; p < n; ++p) r.peers.push_back(p);
  }
  return r;
}

std::string event_where(const ChurnScenario& s, std::size_t i) {
  return "event " + std::to_string(i) + " (" + std::string(churn_kind_name(s.events[i].kind)) +
         "): ";
}

// Every index below the number of peer slots; random's peers not driven by explicit events too.
void check_indices(const ChurnScenario& s) {
  const int total = total_peers(s);
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const ChurnEvent& e = s.events[i];
    std::vector<int> all = e.peers;
    for (const auto& g : e.groups) all.insert(all.end(), g.begin(), g.end());
    for (int p : all) {
      if (p < total) continue;
      fail(event_where(s, i) + "\"" + (e.groups.empty() ? "peers" : "groups") + "\": peer " +
           std::to_string(p) + " is out of range (" + std::to_string(s.initial_peers) +
           " initial peers + " + std::to_string(total - s.initial_peers) + " joined: 0.." +
           std::to_string(total - 1) + ")");
    }
    if (!s.random || !is_lifecycle(e.kind)) continue;
    for (int p : e.peers) {
      if (std::count(s.random->peers.begin(), s.random->peers.end(), p)) {
        fail(event_where(s, i) + "\"peers\": peer " + std::to_string(p) +
             " is churned by \"random\" too");
      }
    }
  }
}

std::string at_text(double t) {
  std::ostringstream os;
  os << t << " s";
  return os.str();
}

enum class PeerState { Absent, Up, Down, Paused };

// A lifecycle kind's transition: a peer must (must_be) or must not be in `state` before it, and is
// in `next` after it; `problem` is what the refusal says before the event's time.
struct Transition {
  ChurnKind kind;
  PeerState state;
  bool must_be;
  const char* problem;
  PeerState next;
};
constexpr Transition kTransitions[] = {
    {ChurnKind::Crash, PeerState::Down, false, " is already down at", PeerState::Down},
    {ChurnKind::Stop, PeerState::Down, false, " is already down at", PeerState::Down},
    {ChurnKind::Pause, PeerState::Up, true, " is not running at", PeerState::Paused},
    {ChurnKind::Restart, PeerState::Down, true, " was not crashed or stopped before",
     PeerState::Up},
    {ChurnKind::Resume, PeerState::Paused, true, " is not paused at", PeerState::Up},
};

// Applies lifecycle event i to its peers' states, refusing impossible transitions.
void step_lifecycle(const ChurnScenario& s, std::size_t i, std::vector<PeerState>& state,
                    const std::vector<bool>& decidable) {
  const ChurnEvent& e = s.events[i];
  const auto* t = std::find_if(std::begin(kTransitions), std::end(kTransitions),
                               [&](const Transition& x) { return x.kind == e.kind; });
  for (int p : e.peers) {
    if (!decidable[static_cast<std::size_t>(p)]) continue;
    PeerState& st = state[static_cast<std::size_t>(p)];
    const std::string who = event_where(s, i) + "peer " + std::to_string(p);
    if (st == PeerState::Absent) fail(who + " has not joined yet at " + at_text(e.at));
    if (t == std::end(kTransitions)) continue;
    if ((st == t->state) != t->must_be) fail(who + t->problem + " " + at_text(e.at));
    st = t->next;
  }
}

// Which peers' lifecycle can be checked statically: only those whose every lifecycle event is
// time-based, and joined peers only when every join is time-based too (with an at_progress join
// the order in which joined peers get their indices is unknown). The others are skipped.
std::vector<bool> decidable_peers(const ChurnScenario& s) {
  const int total = total_peers(s);
  bool joins_timed = true;
  for (const auto& e : s.events) joins_timed &= !(e.kind == ChurnKind::Join && e.by_progress);
  std::vector<bool> ok(static_cast<std::size_t>(total), true);
  for (int p = s.initial_peers; p < total; ++p) ok[static_cast<std::size_t>(p)] = joins_timed;
  for (const auto& e : s.events) {
    if (!is_lifecycle(e.kind) || !e.by_progress) continue;
    for (int p : e.peers) ok[static_cast<std::size_t>(p)] = false;
  }
  return ok;
}

// Walks the timed events in time order (ties in file order): joined peers appear, pauses with
// "for" end, and crash/stop/restart/pause/resume must fit the peer's state.
void check_lifecycle(const ChurnScenario& s) {
  const auto decidable = decidable_peers(s);
  std::vector<PeerState> state(decidable.size(), PeerState::Absent);
  std::fill(state.begin(), state.begin() + s.initial_peers, PeerState::Up);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    if (!s.events[i].by_progress) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return s.events[a].at < s.events[b].at; });
  // time -> (peer, the state that ends): pause, crash and stop with "for" end by themselves.
  std::multimap<double, std::pair<int, PeerState>> auto_resume;
  int joined = 0;
  for (std::size_t i : order) {
    const ChurnEvent& e = s.events[i];
    while (!auto_resume.empty() && auto_resume.begin()->first <= e.at) {
      const auto [p, ends] = auto_resume.begin()->second;
      auto& st = state[static_cast<std::size_t>(p)];
      if (st == ends) st = PeerState::Up;
      auto_resume.erase(auto_resume.begin());
    }
    if (e.kind == ChurnKind::Join) {
      for (int k = 0; k < e.count; ++k)
        state[static_cast<std::size_t>(s.initial_peers + joined++)] = PeerState::Up;
    }
    if (!is_lifecycle(e.kind)) continue;
    step_lifecycle(s, i, state, decidable);
    if (is_lifecycle(e.kind) && e.for_s) {
      const PeerState ends = e.kind == ChurnKind::Pause ? PeerState::Paused : PeerState::Down;
      for (int p : e.peers) auto_resume.emplace(e.at + *e.for_s, std::pair(p, ends));
    }
  }
}

// A duration with the given mean: exponential (k == 0) or Weibull with shape k and scale
// mean / Gamma(1 + 1/k), both by inverse CDF of an open uniform (never log(0)).
double draw_duration(base::Xoshiro256& rng, double mean, double k) {
  const double e = -std::log(rng.uniform_open());  // Exp(1)
  if (k == 0.0) return mean * e;
  return mean / std::tgamma(1.0 + 1.0 / k) * std::pow(e, 1.0 / k);
}

ChurnEvent generated_event(ChurnKind kind, double at, int peer) {
  ChurnEvent e;
  e.kind = kind;
  e.at = at;
  e.peers = {peer};
  e.generated = true;
  return e;
}

// The random model's events in [start_s, horizon_s), in time order. One generator draws in the
// order transitions happen (ties by position in r.peers), so the schedule depends on the seed only.
std::vector<ChurnEvent> expand_random(const RandomChurn& r, int n, std::uint64_t seed,
                                      double horizon_s) {
  base::Xoshiro256 rng(seed);
  const int cap = static_cast<int>(std::floor(r.max_down_fraction * n + 1e-9));
  const ChurnKind up_kind = r.down == ChurnKind::Pause ? ChurnKind::Resume : ChurnKind::Restart;
  using Next = std::pair<double, std::size_t>;  // time of the next transition, position in peers
  std::priority_queue<Next, std::vector<Next>, std::greater<Next>> next;
  std::vector<bool> down(r.peers.size(), false);
  for (std::size_t i = 0; i < r.peers.size(); ++i) {
    next.emplace(r.start_s + draw_duration(rng, r.mean_uptime_s, r.weibull_k), i);
  }
  std::vector<ChurnEvent> out;
  int down_now = 0;
  while (!next.empty() && next.top().first < horizon_s) {
    const auto [t, i] = next.top();
    next.pop();
    if (down[i]) {
      out.push_back(generated_event(up_kind, t, r.peers[i]));
      down[i] = false;
      --down_now;
    } else if (down_now >= cap) {  // too many down: skip this down-draw, stay up for a new uptime
      next.emplace(t + draw_duration(rng, r.mean_uptime_s, r.weibull_k), i);
      continue;
    } else {
      out.push_back(generated_event(r.down, t, r.peers[i]));
      down[i] = true;
      ++down_now;
      if (!r.restart) continue;  // stays down for good
      next.emplace(t + draw_duration(rng, r.mean_downtime_s, r.weibull_k), i);
      continue;
    }
    next.emplace(t + draw_duration(rng, r.mean_uptime_s, r.weibull_k), i);
  }
  return out;
}

// Puts `source` ("file F" or "shorthand") after the prefix of a parse error.
[[noreturn]] void rethrow_with_source(const ScenarioError& e, const std::string& source) {
  std::string msg = e.what();
  if (msg.starts_with(kPrefix)) msg = msg.substr(kPrefix.size());
  fail(source + ": " + msg);
}

}  // namespace

std::string_view churn_kind_name(ChurnKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "?";
}

std::optional<ChurnKind> churn_kind_from_name(std::string_view name) {
  for (const auto& [k, n] : kKindNames) {
    if (n == name) return k;
  }
  return std::nullopt;
}

ChurnScenario parse_churn_scenario(const json& j, int initial_peers) {
  if (initial_peers < 1) fail("the swarm needs at least 1 initial peer");
  if (!j.is_object()) fail("must be a JSON object");
  check_keys(j, {"seed", "events", "random"}, "");
  ChurnScenario s;
  s.initial_peers = initial_peers;
  if (j.contains("seed")) {
    const json& v = j["seed"];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
      fail("\"seed\" must be an integer >= 0");
    }
    s.seed = v.get<std::uint64_t>();
  }
  if (!j.contains("events") && !j.contains("random")) fail("needs \"events\" or \"random\"");
  if (j.contains("events")) {
    if (!j["events"].is_array()) fail("\"events\" must be a list");
    for (std::size_t i = 0; i < j["events"].size(); ++i)
      s.events.push_back(parse_event(j["events"][i], i));
  }
  if (j.contains("random")) s.random = parse_random(j["random"], initial_peers);
  check_indices(s);
  check_lifecycle(s);
  return s;
}

ChurnSchedule expand_schedule(const ChurnScenario& s, double horizon_s) {
  ChurnSchedule out;
  for (const auto& e : s.events) (e.by_progress ? out.by_progress : out.timed).push_back(e);
  if (s.random) {
    auto r = expand_random(*s.random, s.initial_peers, s.seed, horizon_s);
    out.timed.insert(out.timed.end(), r.begin(), r.end());
  }
  auto by_at = [](const ChurnEvent& a, const ChurnEvent& b) { return a.at < b.at; };
  std::stable_sort(out.timed.begin(), out.timed.end(), by_at);
  std::stable_sort(out.by_progress.begin(), out.by_progress.end(), by_at);
  return out;
}

json to_json(const ChurnEvent& e) {
  json j;
  j[e.by_progress ? "at_progress" : "at"] = e.at;
  j["event"] = std::string(churn_kind_name(e.kind));
  if (has_peers(e.kind)) j["peers"] = e.peers;
  if (e.kind == ChurnKind::Join) j["count"] = e.count;
  if (e.kind == ChurnKind::Partition) j["groups"] = e.groups;
  if (e.for_s) j["for"] = *e.for_s;
  if (e.rate_mbit) j["rate_mbit"] = *e.rate_mbit;
  if (e.loss) j["loss"] = *e.loss;
  if (e.kind == ChurnKind::Fault) j["mode"] = e.mode;
  return j;
}


ChurnScenario load_churn_scenario(const std::string& file_or_shorthand, int initial_peers) {
  if (looks_like_shorthand(file_or_shorthand)) {
    const json j = churn_shorthand_to_json(file_or_shorthand);
    try {
      return parse_churn_scenario(j, initial_peers);
    } catch (const ScenarioError& e) {
      rethrow_with_source(e, "shorthand \"" + file_or_shorthand + "\"");
    }
  }
  std::ifstream in(file_or_shorthand);
  if (!in) {
    fail("cannot read \"" + file_or_shorthand +
         "\": not a readable file, nor a shorthand such as random:crash,uptime=30,downtime=5");
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(file_or_shorthand + ": invalid JSON: " + e.what());
  }
  try {
    return parse_churn_scenario(j, initial_peers);
  } catch (const ScenarioError& e) {
    rethrow_with_source(e, file_or_shorthand);
  }
}

bool needs_network_control(const ChurnScenario& s) {
  return std::any_of(s.events.begin(), s.events.end(), [](const ChurnEvent& e) {
    return e.kind == ChurnKind::Partition || e.kind == ChurnKind::Link;
  });
}

int total_peers(const ChurnScenario& s) {
  int total = s.initial_peers;
  for (const auto& e : s.events) total += e.kind == ChurnKind::Join ? e.count : 0;
  return total;
}

}  // namespace gossiptrain::core
