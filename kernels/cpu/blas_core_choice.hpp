// Which OpenBLAS core a process runs: the user's (--blas-core, OPENBLAS_CORETYPE), OpenBLAS's own
// when it recognised the CPU, or, when it fell back to a generic core on a CPU with AVX2/AVX-512,
// the matching core once a probe child has checked it (the verdict cached per machine and library).
#pragma once

#include <chrono>
#include <string>

namespace gossiptrain::kernels {

// Marks a process whose OPENBLAS_CORETYPE was set by us (a re-executed peer, gossip-launch's peers)
// rather than by the user: "<core>:<source>[:<core tried>[:<detail>]]".
inline constexpr const char* kBlasChosenEnv = "GT_BLAS_CORE_CHOSEN";
// Tests only: decide as though OpenBLAS had detected this core (its fallback path on a machine
// where it does not fall back); the process then runs this core unless a better one passes.
inline constexpr const char* kBlasPretendEnv = "GT_BLAS_TEST_DETECTED_CORE";

struct BlasCoreChoice {
  std::string core;  // the core to run
  // flag (--blas-core), user (OPENBLAS_CORETYPE), detected (OpenBLAS's own choice, not a
  // fallback), probe / cache (the native core passed, now or before), refused (the native core
  // failed its probe: the fallback stays), no-better (a fallback, but no AVX2 to do better)
  std::string source;
  std::string tried;    // the core probed (or whose cached verdict was read)
  std::string detail;   // what the probe found, for the log
  bool warn = false;    // worth a warning: the fallback stays, or a core asked for did not load
  bool reexec = false;  // core is not the one loaded: run again with OPENBLAS_CORETYPE=core
};

struct BlasCoreRequest {
  std::string flag = "auto";  // --blas-core: auto | keep | a core name
  std::string exe;            // the program the probe child runs (ours: it answers the probe)
  std::string cache_dir;      // where verdicts are kept; "" for none
  std::chrono::milliseconds probe_timeout{30000};
};

// Decides from the environment, the loaded library and the CPU's flags; probes when it must.
BlasCoreChoice choose_blas_core(const BlasCoreRequest& req);

// $XDG_CACHE_HOME/gossiptrain, else ~/.cache/gossiptrain; "" when neither can be named.
std::string default_blas_cache_dir();

// The value of kBlasChosenEnv that passes this choice on.
std::string blas_chosen_marker(const BlasCoreChoice& c);

// One line for the log: "SkylakeX (probe: passed, worst error 0.01 of its bound)".
std::string describe(const BlasCoreChoice& c);

}  // namespace gossiptrain::kernels
