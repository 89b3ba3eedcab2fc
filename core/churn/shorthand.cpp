// The --churn shorthand (random:crash,uptime=30,downtime=5 or crash:3@20,restart:3@35): its
// items turned into the JSON form that scenario.cpp parses, and its help text.
#include <string>
#include <string_view>

#include "core/churn/detail.hpp"
#include "core/churn/scenario.hpp"
#include "core/parse_number.hpp"

namespace gossiptrain::core {

using nlohmann::json;
using namespace churn_detail;

namespace {

// --- shorthand -------------------------------------------------------------------------------

[[noreturn]] void bad_item(std::string_view item, const std::string& why) {
  fail("shorthand item \"" + std::string(item) + "\": " + why + " (see --churn help)");
}

double shorthand_number(std::string_view item, std::string_view text) {
  const auto x = parse_whole<double>(text);
  if (!x) bad_item(item, "\"" + std::string(text) + "\" is not a number");
  return *x;
}

std::int64_t shorthand_integer(std::string_view item, std::string_view text) {
  const auto x = parse_whole<std::int64_t>(text);
  if (!x) bad_item(item, "\"" + std::string(text) + "\" is not an integer");
  return *x;
}

// "I+J+K" -> [I, J, K].
json shorthand_peers(std::string_view item, std::string_view text) {
  json peers = json::array();
  for (std::size_t pos = 0;;) {
    const std::size_t plus = text.find('+', pos);
    peers.push_back(shorthand_integer(item, text.substr(pos, plus - pos)));
    if (plus == std::string_view::npos) return peers;
    pos = plus + 1;
  }
}

// KIND:TARGET@WHEN -> one event (TARGET is PEERS, or COUNT for join).
json shorthand_event(std::string_view item, std::string_view kind, std::string_view rest) {
  const std::size_t at = rest.find('@');
  if (at == std::string_view::npos)
    bad_item(item, "expected " + std::string(kind) + ":TARGET@WHEN");
  const std::string_view target = rest.substr(0, at);
  std::string_view when = rest.substr(at + 1);
  json e{{"event", std::string(kind)}};
  // WHEN/FOR: a crash or stop restarts, a pause resumes, FOR seconds later.
  if (const std::size_t slash = when.find('/'); slash != std::string_view::npos) {
    if (kind != "crash" && kind != "stop" && kind != "pause")
      bad_item(item, "only crash, stop and pause take /FOR");
    e["for"] = shorthand_number(item, when.substr(slash + 1));
    when = when.substr(0, slash);
  }
  if (when.ends_with('%')) {
    e["at_progress"] = shorthand_number(item, when.substr(0, when.size() - 1)) / 100.0;
  } else {
    e["at"] = shorthand_number(item, when);
  }
  if (kind == "join") {
    e["count"] = shorthand_integer(item, target);
  } else {
    e["peers"] = shorthand_peers(item, target);
  }
  return e;
}

// KEY=VALUE of the random model (or the scenario's seed).
void shorthand_option(std::string_view item, json& out) {
  const std::size_t eq = item.find('=');
  const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
  if (key == "seed") {
    out["seed"] = shorthand_integer(item, value);
    return;
  }
  if (!out.contains("random")) bad_item(item, "options come after a random:KIND item");
  json& r = out["random"];
  if (key == "uptime") r["mean_uptime_s"] = shorthand_number(item, value);
  else if (key == "downtime") r["mean_downtime_s"] = shorthand_number(item, value);
  else if (key == "dist") r["distribution"] = std::string(value);
  else if (key == "max_down") r["max_down_fraction"] = shorthand_number(item, value);
  else if (key == "start") r["start_s"] = shorthand_number(item, value);
  else if (key == "peers") r["peers"] = shorthand_peers(item, value);
  else if (key == "restart" && (value == "0" || value == "1")) r["restart"] = value == "1";
  else if (key == "restart") bad_item(item, "restart is 0 or 1");
  else
    bad_item(item, "unknown option \"" + std::string(key) +
                       "\" (uptime, downtime, dist, restart, max_down, start, peers, seed)");
}

void shorthand_item(std::string_view item, json& out) {
  if (item.find('=') != std::string_view::npos) return shorthand_option(item, out);
  const std::size_t colon = item.find(':');
  const std::string_view kind = item.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : item.substr(colon + 1);
  if (colon != std::string_view::npos && kind == "random") {
    if (out.contains("random")) bad_item(item, "only one random:KIND item");
    out["random"] = json{{"kind", std::string(rest)}};
    return;
  }
  const auto k = churn_kind_from_name(kind);
  if (colon == std::string_view::npos || !k || !(is_lifecycle(*k) || *k == ChurnKind::Join)) {
    bad_item(item, "expected random:KIND, KEY=VALUE, EVENT:PEERS@WHEN or join:COUNT@WHEN");
  }
  out["events"].push_back(shorthand_event(item, kind, rest));
}

}  // namespace

bool churn_detail::looks_like_shorthand(std::string_view arg) {
  if (arg.starts_with("random:")) return true;
  for (std::string_view key :
       {"seed=", "uptime=", "downtime=", "dist=", "restart=", "max_down=", "start=", "peers="}) {
    if (arg.starts_with(key)) return true;
  }
  const std::size_t colon = arg.find(':');
  if (colon == std::string_view::npos) return false;
  const auto k = churn_kind_from_name(arg.substr(0, colon));
  return k && (is_lifecycle(*k) || *k == ChurnKind::Join);
}


const char* const kChurnShorthandHelp =
    "--churn FILE.json | SHORTHAND\n"
    "  FILE.json: {\"seed\": N, \"events\": [...], \"random\": {...}} (core/churn/scenario.hpp)\n"
    "  SHORTHAND: comma-separated items, e.g.\n"
    "    random:crash,uptime=30,downtime=5,dist=weibull:0.6,restart=0,max_down=0.25,seed=3\n"
    "    crash:3@20,restart:3@35,join:1@50%\n"
    "  items:\n"
    "    random:KIND        random churn, KIND = crash | stop | pause (at most one), followed by\n"
    "      uptime=S downtime=S    mean seconds up / down (required)\n"
    "      dist=D                 exponential (default) or weibull:K\n"
    "      restart=0|1            crashed/stopped peers come back (default 1)\n"
    "      max_down=F             at most F of the swarm down at once (default 0.5)\n"
    "      start=S                churn starts at S seconds (default 0)\n"
    "      peers=I+J+...          which initial peers churn (default all)\n"
    "    seed=N             the scenario's seed (default 0)\n"
    "    EVENT:I+J@WHEN     EVENT = crash | stop | restart | pause | resume, for peers I, J...\n"
    "    join:COUNT@WHEN    COUNT new peers\n"
    "  WHEN: seconds since launch (20) or percent of training done (50%); crash, stop and pause\n"
    "  take WHEN/FOR: back FOR seconds later (crash:0@40%/20 restarts peer 0 20 s after it)\n";

json churn_shorthand_to_json(std::string_view shorthand) {
  json out = json::object();
  if (shorthand.empty()) fail("empty shorthand (see --churn help)");
  for (std::size_t pos = 0;;) {
    const std::size_t comma = shorthand.find(',', pos);
    shorthand_item(shorthand.substr(pos, comma - pos), out);
    if (comma == std::string_view::npos) return out;
    pos = comma + 1;
  }
}

}  // namespace gossiptrain::core
