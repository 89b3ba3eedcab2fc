// The BLAS kernels of our programs: answering a probe child, settling the OpenBLAS core before
// training (re-executing with OPENBLAS_CORETYPE when it must change), and saying what runs.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cpu/blas_core_choice.hpp"
#include "kernels/cpu/blas_info.hpp"

namespace gossiptrain::apps {

// First thing in main: in a probe child, writes the probe's line and returns main's exit code.
std::optional<int> answer_blas_probe();

// Settles this process's OpenBLAS core (kernels::choose_blas_core with flag = --blas-core). When
// the core must change, re-executes this program with OPENBLAS_CORETYPE and GT_BLAS_CORE_CHOSEN
// set and does not return; if that fails, it warns and goes on with the core loaded.
kernels::BlasCoreChoice settle_blas_core(const std::string& flag);

// For gossip-launch: decides once and sets OPENBLAS_CORETYPE and GT_BLAS_CORE_CHOSEN in this
// process's environment, which its peers inherit, so that they neither probe nor re-execute.
kernels::BlasCoreChoice choose_blas_core_for_children(const std::string& flag);

// The log line at start-up, and the fields of the metrics data line and gossip-bench's JSON:
// blas_library, blas_version, blas_core, blas_threads, blas_core_source (and blas_core_tried).
void log_blas(const kernels::BlasCoreChoice& choice);
nlohmann::json blas_fields(const kernels::BlasCoreChoice& choice);

// --blas-core: auto | keep | a core name (letters, digits, '_'); UsageError otherwise.
std::string to_blas_core(const std::string& flag, const std::string& v);
extern const char* const kBlasCoreHelp;

}  // namespace gossiptrain::apps
