// What gossip-launch learns from a peer's metrics.jsonl: an incremental reader that tolerates a
// partial last line, and the running figures (epoch, loss, accuracy, exchanges) it folds them into.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::apps {

// Reads the lines appended to a file since the last call. A line without its newline yet is kept
// until the rest arrives; a file that does not exist yet is simply empty.
class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}
  // Calls on_line for every complete new line; returns how many.
  template <class F>
  int poll(F&& on_line) {
    int n = 0;
    read_more();
    std::size_t start = 0;
    for (;;) {
      auto nl = buf_.find('\n', start);
      if (nl == std::string::npos) break;
      on_line(buf_.substr(start, nl - start));
      start = nl + 1;
      ++n;
    }
    buf_.erase(0, start);
    return n;
  }

 private:
  void read_more();
  std::string path_;
  std::uint64_t offset_ = 0;
  std::string buf_;
};

struct PeerStats {
  std::string id;  // the peer's own name in its metrics (`peer` field)
  int lines = 0;
  int bad_lines = 0;    // not JSON or missing t/peer/event
  double last_t = 0.0;  // of the latest process (t starts again when the peer restarts)
  // Figures the peer has not reported are empty (null in summary.json, `-` in tables).
  std::optional<std::int64_t> step;
  std::int64_t steps_total = 0;  // the run's steps, from `step` lines (0: not seen yet)
  std::optional<int> epoch;      // completed epochs (from eval/checkpoint/done)
  std::optional<double> loss;
  std::optional<double> test_acc;  // last eval
  std::optional<double> best_test_acc;
  // A FedAvg client (it sent an `update`): it never evaluates, the server's global model does, so
  // the time to the target does not wait for it.
  bool fedavg_client = false;
  // These two are the latest process's: a restarted peer's earlier `done` says nothing of the
  // model it ends with.
  std::optional<double> final_test_acc;  // from `done`
  std::optional<double> final_eval_acc;  // last eval marked final (the model as the peer ended)
  std::optional<double> time_to_target;  // peer's t of the first eval at or above the target
  // `bytes` (this peer's sent bytes, every life) when that eval came: the bytes it took to get there.
  std::optional<std::int64_t> bytes_at_target;
  // A FedAvg client's `bytes` after each line that added to it, on the clock of the life it came
  // in: it never evaluates, so its bytes to the target are those sent before the swarm reached it.
  struct BytesMark {
    int life;
    double t;
    std::int64_t bytes;
  };
  std::vector<BytesMark> bytes_marks;
  static constexpr std::size_t kMaxBytesMarks = 100000;
  std::optional<int> target_epoch;       // its epoch then (a FedAvg server's: the round)
  std::optional<int> target_exchanges;   // exchanges_initiated then
  std::string hold;     // why training is on hold, and for how long at most (empty: it is not)
  int life = 0;         // processes of the peer seen before the latest (restarts)
  bool clock_in_life = false;  // the latest process wrote its `clock` line
  int target_life = 0;  // the process whose clock time_to_target is on
  std::optional<double> samples_per_s;
  std::optional<std::int64_t> done_steps;
  bool done = false;
  bool stopped = false;  // done with stopped = true
  std::optional<double> seconds;
  int exchanges_ok = 0;
  int exchanges_failed = 0;
  int exchanges_initiated = 0;  // of exchanges_ok, those this peer started (each counted once)
  // Of exchanges_ok, those that averaged (the line's `averaging`: clip at least 0.01 of the plain
  // weight) and those clipped below that; the sum of the effective weights w c applied.
  int exchanges_averaging = 0;
  int exchanges_clipped = 0;
  double mix_weight_sum = 0.0;
  std::map<std::string, int> failed_by_reason;
  std::int64_t bytes = 0;       // sent by this peer
  std::int64_t bytes_wire = 0;  // sent + received
  // From `exchange_alert` lines: the peer said every exchange had failed for a while.
  bool not_averaging = false;  // the last alert said "failing" and no "recovered" came after it
  int averaging_alerts = 0;    // "failing" alerts over the run
  std::string alert_reason;    // the last alert's most common reason ...
  std::string alert_addr;      // ... and the address it dialled most
  int bans = 0;                // `ban` lines: partners this peer banned (robust mixing)
  std::map<std::string, int> banned;           // partner id -> bans of it
  std::map<std::string, std::string> members;  // member id -> last state
  int errors = 0;
  std::string last_error;

  // Folds one metrics line in. target_acc decides time_to_target. Returns the line's t, or
  // nothing for a line that is not a metrics event.
  std::optional<double> add_line(const std::string& line, double target_acc);
  void add_event(const nlohmann::json& j, double target_acc);
  int members_alive() const;
  // Fraction of its steps done (0..1): 1 once done, 0 before the first `step` line.
  double progress() const;

 private:
  void fold(const nlohmann::json& j, const std::string& ev, double t, double target_acc);
  // One per event kind (fold dispatches); (line, t, target_acc).
  void fold_step(const nlohmann::json& j, double t, double target_acc);
  void fold_eval(const nlohmann::json& j, double t, double target_acc);
  void fold_exchange(const nlohmann::json& j, double t, double target_acc);
  void fold_fedavg(const nlohmann::json& j, double t, double target_acc);
  void fold_alert(const nlohmann::json& j, double t, double target_acc);
  void fold_ban(const nlohmann::json& j, double t, double target_acc);
  void fold_member(const nlohmann::json& j, double t, double target_acc);
  void fold_checkpoint(const nlohmann::json& j, double t, double target_acc);
  void fold_done(const nlohmann::json& j, double t, double target_acc);
  void fold_error(const nlohmann::json& j, double t, double target_acc);
  void restarted();  // a line from a new process of the peer: forget the last one's ending
};

}  // namespace gossiptrain::apps
