// Small statistics shared by the layers above (gossip's robust bound, the benchmarks).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gossiptrain::base {

// The median of v: the upper of the two middle values of an even count; 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace gossiptrain::base
