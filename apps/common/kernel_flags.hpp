// The kernels' enums as flag values (Options::named): each spelled as the kernels name it, so a
// flag table reads --wire and --precision into the typed value once.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"

namespace gossiptrain::apps {

inline std::vector<std::pair<std::string, kernels::Wire>> wire_values() {
  std::vector<std::pair<std::string, kernels::Wire>> v;
  for (auto w : {kernels::Wire::Fp32, kernels::Wire::Fp16, kernels::Wire::Bf16,
                 kernels::Wire::Int8, kernels::Wire::Int4, kernels::Wire::Int2,
                 kernels::Wire::Int4Rel})
    v.emplace_back(std::string(kernels::wire_name(w)), w);
  return v;
}

inline std::vector<std::pair<std::string, kernels::Precision>> precision_values() {
  std::vector<std::pair<std::string, kernels::Precision>> v;
  for (auto p : {kernels::Precision::Fp32, kernels::Precision::Tf32, kernels::Precision::Bf16})
    v.emplace_back(std::string(kernels::precision_name(p)), p);
  return v;
}

}  // namespace gossiptrain::apps
