// gossip-launch's live view at any swarm size: every peer's row while they fit on a screen, else
// the failing peers and the slowest ones under a summary line, with the full table in the run
// folder (table.txt).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gossiptrain::apps {

struct ViewRow {
  std::size_t index = 0;
  std::string text;       // the formatted table row
  double progress = 0.0;  // fraction of its steps done (0..1)
  bool failing = false;   // failed, exited with an error or not averaging
  bool running = false;
};

// Up to this many peer rows the view shows them all.
inline constexpr std::size_t kViewAllRows = 24;

// The rows to show under the header: all of them (in peer order) when there are at most
// max_rows; else the failing peers first (at most max_rows - slowest of them), then the slowest
// running peers by progress (ties by index) up to max_rows rows, then one line saying how many
// rows are shown and where the full table is (full_table).
std::vector<std::string> view_rows(const std::vector<ViewRow>& rows, std::size_t max_rows,
                                   std::size_t slowest, const std::string& full_table);

// A one-line summary of the swarm for the compact view: how many peers run, are done and
// failing, and the spread of their progress.
std::string view_summary(const std::vector<ViewRow>& rows);

}  // namespace gossiptrain::apps
