// gossip-bench subjects. Each subject lives in its own bench_<subject>.cpp and registers itself with
// GT_BENCH_SUBJECT. A subject takes the arguments after its name, prints one JSON object (the
// measured figure, the reference measured in the same run, and their ratio: docs/bench.md,
// "gossip-bench") and returns the process exit code (2 for bad arguments).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/option_table.hpp"
#include "base/stats.hpp"

namespace gossiptrain::apps {

using Args = std::vector<std::string>;
using BenchFn = std::function<int(const Args&)>;

struct BenchSubject {
  std::string summary;
  BenchFn run;
};

inline std::map<std::string, BenchSubject>& bench_registry() {
  static std::map<std::string, BenchSubject> r;
  return r;
}

struct BenchRegistrar {
  BenchRegistrar(const std::string& name, const std::string& summary, BenchFn fn) {
    bench_registry()[name] = BenchSubject{summary, std::move(fn)};
  }
};

// The median of the figures of a subject's rounds (the upper one of an even count); 0 for none.
using base::median;

// The 1-minute load average (-1 where it cannot be read): the subjects print it beside their
// figures, since the machine is often shared.
inline double loadavg() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

// A subject's option table: its rows, then --json, which sets Config::json.
template <class Config>
OptionTable<Config> bench_table(const std::string& json_help, std::vector<Option<Config>> rows) {
  rows.push_back(Options<Config>::flag("json", json_help, &Config::json));
  return OptionTable<Config>(std::move(rows));
}

// Parses a subject's arguments with its option table. Returns the exit code when the subject
// stops there: 0 after --help (the usage on stdout), 2 after a bad flag or value (the message on
// stderr); nullopt when it runs. `about` follows the usage line in --help.
template <class Config>
std::optional<int> parse_bench_args(const std::string& subject, const OptionTable<Config>& table,
                                    const Args& args, Config& c, const std::string& about) {
  try {
    if (table.parse(args, c)) return std::nullopt;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gossip-bench %s: %s\n", subject.c_str(), e.what());
    return 2;
  }
  std::printf("usage: gossip-bench %s [options] [--json]\n%s\n%s", subject.c_str(), about.c_str(),
              table.help(26).c_str());
  return 0;
}

#define GT_BENCH_SUBJECT(name, summary, fn) \
  static ::gossiptrain::apps::BenchRegistrar gt_bench_registrar_##fn(name, summary, fn)

}  // namespace gossiptrain::apps
