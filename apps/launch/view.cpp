#include "apps/launch/view.hpp"

#include <algorithm>
#include <cstdio>

namespace gossiptrain::apps {

std::vector<std::string> view_rows(const std::vector<ViewRow>& rows, std::size_t max_rows,
                                   std::size_t slowest, const std::string& full_table) {
  std::vector<std::string> out;
  if (rows.size() <= max_rows) {
    for (const auto& r : rows) out.push_back(r.text);
    return out;
  }
  slowest = std::min(slowest, max_rows);
  std::vector<const ViewRow*> failing, running;
  for (const auto& r : rows) {
    if (r.failing) failing.push_back(&r);
    else if (r.running) running.push_back(&r);
  }
  const std::size_t fail_room = max_rows - slowest;
  std::size_t shown = 0;
  for (std::size_t k = 0; k < failing.size() && k < fail_room; ++k, ++shown)
    out.push_back(failing[k]->text);
  std::stable_sort(running.begin(), running.end(),
                   [](const ViewRow* a, const ViewRow* b) { return a->progress < b->progress; });
  // The room the failing peers left goes to more of the slowest.
  for (std::size_t k = 0; k < running.size() && shown < max_rows; ++k, ++shown)
    out.push_back(running[k]->text);
  char b[256];
  std::snprintf(b, sizeof b,
                "  ... %zu of %zu peers shown (%zu failing first, then the slowest); "
                "every peer: %s",
                shown, rows.size(), std::min(failing.size(), fail_room), full_table.c_str());
  out.push_back(b);
  return out;
}

std::string view_summary(const std::vector<ViewRow>& rows) {
  std::size_t running = 0, failing = 0;
  double lo = 1.0, hi = 0.0, sum = 0.0;
  for (const auto& r : rows) {
    running += r.running;
    failing += r.failing;
    lo = std::min(lo, r.progress);
    hi = std::max(hi, r.progress);
    sum += r.progress;
  }
  char b[192];
  if (rows.empty()) return "no peers";
  std::snprintf(b, sizeof b,
                "peers: %zu running, %zu not running, %zu failing; progress min %.0f%% mean "
                "%.0f%% max %.0f%%",
                running, rows.size() - running, failing, 100 * lo, 100 * sum / rows.size(),
                100 * hi);
  return b;
}

}  // namespace gossiptrain::apps
