// The plots of a run folder, shared by gossip-launch (scripts/plot/plot_run.py) and gossip-sim
// (scripts/plot/plot_sim.py): the script found and run with a time limit, and what came of it for
// summary.json ("plots").
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::apps {

// The folder of the running binary (/proc/self/exe), "." when unknown.
std::filesystem::path self_dir();

// <name> in $GT_SCRIPTS_DIR, else in self_dir/../share/gossiptrain/scripts (self_dir the
// binary's folder): where `cmake --install` puts the plot scripts (PREFIX/bin ->
// PREFIX/share/gossiptrain/scripts), and where the build stages them (build/apps ->
// build/share/gossiptrain/scripts). No path of the source or build tree is compiled in.
std::optional<std::filesystem::path> find_script(const std::filesystem::path& self_dir,
                                                 const std::string& name);

// Runs the script on run_dir (its output in run_dir/plot.log), killed after timeout_s; polls
// every poll_ms. {"ok": true, "message": the plots made}, or ok false with why and the log's last
// line.
nlohmann::json run_plot_script(const std::filesystem::path& script,
                               const std::filesystem::path& run_dir, double timeout_s, int poll_ms);

// The last n non-empty lines of a text file (a peer's log, plot.log); none when it is unreadable.
std::vector<std::string> last_lines(const std::filesystem::path& path, int n);

}  // namespace gossiptrain::apps
