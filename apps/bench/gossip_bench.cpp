// gossip-bench: benchmarks that print JSON. Dispatches to the subjects registered by bench_*.cpp.
#include <cstdio>
#include <cstring>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/bench/bench.hpp"
#include "apps/common/blas.hpp"

using namespace gossiptrain::apps;

static void usage(std::FILE* f) {
  std::fprintf(f, "usage: gossip-bench SUBJECT [options] --json\nsubjects:\n");
  for (const auto& [name, s] : bench_registry())
    std::fprintf(f, "  %-10s %s\n", name.c_str(), s.summary.c_str());
  std::fprintf(f, "run 'gossip-bench SUBJECT --help' for a subject's options\n");
}

int main(int argc, char** argv) {
  if (const auto rc = answer_blas_probe()) return *rc;  // a probe child of ours
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  // Standard output carries the one JSON object; every log line goes to standard error.
  spdlog::set_default_logger(spdlog::stderr_color_mt("gossip-bench"));
  std::string subject = argv[1];
  auto it = bench_registry().find(subject);
  if (it == bench_registry().end()) {
    std::fprintf(stderr, "gossip-bench: unknown subject '%s'\n", subject.c_str());
    usage(stderr);
    return 2;
  }
  try {
    return it->second.run(Args(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossip-bench %s: %s\n", subject.c_str(), e.what());
    return 1;
  }
}
