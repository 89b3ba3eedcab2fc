// The kernels' enums as flag values (Options::named): each spelled as the kernels name it, so a
// flag table reads --precision into the typed value once (the wires: wire_flags.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"

namespace gossiptrain::apps {

inline std::vector<std::pair<std::string, kernels::Precision>> precision_values() {
  std::vector<std::pair<std::string, kernels::Precision>> v;
  for (auto p : {kernels::Precision::Fp32, kernels::Precision::Tf32, kernels::Precision::Bf16})
    v.emplace_back(std::string(kernels::precision_name(p)), p);
  return v;
}

}  // namespace gossiptrain::apps
