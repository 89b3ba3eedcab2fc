// gossip-bench: benchmarks that print JSON. Dispatches to one subject per source file.
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/bench.hpp"

using namespace gossiptrain::apps;

static void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: gossip-bench SUBJECT [options] --json\n"
               "subjects:\n"
               "  train      samples/s and ms/step of a real training step vs the matrix products alone\n"
               "  transport  plain TCP vs AEAD alone vs the encrypted channel, handshake time\n"
               "  average    one pairwise averaging exchange vs the channel carrying the same bytes\n"
               "run 'gossip-bench SUBJECT --help' for a subject's options\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string subject = argv[1];
  Args args(argv + 2, argv + argc);
  try {
    if (subject == "train") return bench_train(args);
    if (subject == "transport") return bench_transport(args);
    if (subject == "average") return bench_average(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossip-bench %s: %s\n", subject.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "gossip-bench: unknown subject '%s'\n", subject.c_str());
  usage(stderr);
  return 2;
}
