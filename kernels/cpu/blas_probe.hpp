// The self-test of an OpenBLAS core: the models' GEMM shapes against a reference computed without
// BLAS, run in a child process so that a core which crashes (SIGILL) or hangs takes only the child.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace gossiptrain::kernels {

// Set in the probe child: the core it was asked to run (the parent also sets OPENBLAS_CORETYPE).
inline constexpr const char* kBlasProbeEnv = "GT_BLAS_PROBE";
// Tests only: the probe child adds an error to one result, as a wrong kernel would ("1"), or dies
// of SIGILL ("crash").
inline constexpr const char* kBlasProbeCorruptEnv = "GT_BLAS_PROBE_CORRUPT";

// The GEMM shapes through cblas_sgemm in this process. worst is the largest |C - ref| over its
// element's error bound, (K + 2) u (|alpha| sum_k |a_ik b_kj| + |beta c_ij|) with u = 2^-24, which
// any correct fp32 summation order stays under (the classic bound for a K-term dot product, plus
// the scalings by alpha and beta): so ok is worst <= 1, with no tuning to the machine. A wrong
// kernel (a wrong element, a lost block, garbage) lands orders of magnitude above it.
struct GemmCheck {
  bool ok = false;
  double worst = 0.0;  // max |err| / bound; infinity for a non-finite result
  std::string shape;   // where worst was: "MxNxK ta tb"
  int shapes = 0;
};
GemmCheck check_gemm_shapes(bool corrupt);

struct ProbeResult {
  bool ok = false;
  std::string core;    // the core the child loaded
  double worst = 0.0;  // as GemmCheck::worst
  std::string shape;   // as GemmCheck::shape
  std::string
      failure;      // "" when ok, else what went wrong: "wrong result", "crashed (signal 4)", ...
  double ms = 0.0;  // the child's whole run
};

// Runs exe (a program of ours whose main answers blas_probe_child_report() first) as a probe child
// with OPENBLAS_CORETYPE=core; kills it after timeout.
ProbeResult probe_core(const std::string& exe, const std::string& core,
                       std::chrono::milliseconds timeout);

// In a probe child (GT_BLAS_PROBE set): runs the check and returns the one line the child must
// write to standard output for its parent; nullopt in any other process.
std::optional<std::string> blas_probe_child_report();

}  // namespace gossiptrain::kernels
