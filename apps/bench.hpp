// gossip-bench subjects. Each takes the arguments after the subject name, prints one JSON object
// (DESIGN.md: the measured figure, the reference measured in the same run, and their ratio) and
// returns the process exit code (2 for bad arguments).
#pragma once

#include <string>
#include <vector>

namespace gossiptrain::apps {

using Args = std::vector<std::string>;
int bench_train(const Args& args);      // bench_train.cpp
int bench_transport(const Args& args);  // bench_transport.cpp
int bench_average(const Args& args);    // bench_average.cpp

}  // namespace gossiptrain::apps
