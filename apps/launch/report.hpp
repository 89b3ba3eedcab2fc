// gossip-launch --report DIR: one run out of peers' metrics files from anywhere (SLURM's run
// folder, containers' volumes, files copied from several machines): summary.json, table.txt,
// the plots and, when peers played churn events (gossip-peer --churn), the churn section, as a
// local launch writes them. A missing, truncated or foreign file is named and skipped.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

// One peer's metrics file as read.
struct ReportPeer {
  std::string path;                    // as found under the folder
  int index = -1;                      // the peer's number in the report (its shard where known)
  std::vector<std::string> lines;      // the complete metrics lines (t, peer, event), in order
  int bad_lines = 0;                   // lines that are not metrics lines (skipped)
  bool truncated = false;              // the last line had no newline (skipped)
  std::vector<nlohmann::json> clocks;  // `clock` lines: one per process of the peer (its lives)
};

// What was found under a folder: the peers (by index), and a line per file or folder skipped or
// read in part, naming it and why.
struct ReportScan {
  std::vector<ReportPeer> peers;
  std::vector<std::string> notes;
};

// Reads every *.jsonl under dir (recursively, symbolic links not followed) that holds metrics
// lines; never throws for a file's content. Throws UsageError when dir is not a readable folder.
ReportScan scan_report_dir(const std::string& dir);

// The summary (make_summary's, plus "report" and, with churn lines, "churn") and the events on
// one clock (launch-style events.jsonl lines) of the scanned peers.
struct Report {
  nlohmann::json summary;
  std::vector<nlohmann::json> events;
  std::string table;  // table.txt
  // Per peer (as scan.peers), the launch time of each process's t = 0, for the plots.
  std::vector<std::vector<double>> life_offsets;
};
Report build_report(const ReportScan& scan, const LaunchOptions& o, const std::string& dir);

// gossip-launch --report: scans o.report, writes summary.json, table.txt, report.json and
// report-events.jsonl into o.out (default o.report), then the plots. The exit code (2: nothing
// usable found, or a launch's own summary.json in the way).
int run_report(const LaunchOptions& o);

}  // namespace gossiptrain::apps
