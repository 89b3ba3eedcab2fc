// gossip-bench subjects. Each subject lives in its own bench_<subject>.cpp and registers itself with
// GT_BENCH_SUBJECT. A subject takes the arguments after its name, prints one JSON object (the
// measured figure, the reference measured in the same run, and their ratio: docs/ARCHITECTURE.md,
// "gossip-bench") and returns the process exit code (2 for bad arguments).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

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

#define GT_BENCH_SUBJECT(name, summary, fn) \
  static ::gossiptrain::apps::BenchRegistrar gt_bench_registrar_##fn(name, summary, fn)

}  // namespace gossiptrain::apps
