// gossip-peer --churn: the events of one shard, played by the peer itself between two steps.

#include "apps/common/peer_churn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <fstream>

#include <spdlog/spdlog.h>

namespace gossiptrain::apps {

std::vector<core::ChurnEvent> peer_churn_events(const std::string& path, int shard,
                                                int num_shards) {
  const core::ChurnScenario s = core::load_churn_scenario(path, num_shards);
  if (s.random)
    throw core::ScenarioError("churn scenario " + path +
                              ": a \"random\" model needs gossip-launch --churn; a peer alone "
                              "plays explicit events only");
  std::vector<core::ChurnEvent> mine;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const core::ChurnEvent& e = s.events[i];
    const std::string what = "churn scenario " + path + ": event " + std::to_string(i) + " (" +
                             std::string(core::churn_kind_name(e.kind)) + ")";
    switch (e.kind) {
      case core::ChurnKind::Crash:
      case core::ChurnKind::Stop:
      case core::ChurnKind::Pause:
        if (e.kind == core::ChurnKind::Pause && !e.for_s)
          throw core::ScenarioError(what + ": a peer pauses itself only for a given \"for\"");
        for (int p : e.peers)
          if (p == shard) mine.push_back(e);
        break;
      case core::ChurnKind::Restart:
      case core::ChurnKind::Resume:
      case core::ChurnKind::Join:
        break;  // the engine's (an srun wrapper loop, a StatefulSet, podman --restart)
      default:
        throw core::ScenarioError(what +
                                  ": needs gossip-launch --churn (--netns), not a peer alone");
    }
  }
  return mine;
}

PeerChurn::PeerChurn(std::vector<core::ChurnEvent> events, std::string state_file, int shard,
                     core::Metrics& metrics, std::atomic<bool>& stop)
    : events_(std::move(events)),
      played_(events_.size(), false),
      state_file_(std::move(state_file)),
      shard_(shard),
      metrics_(metrics),
      stop_(stop) {
  std::ifstream in(state_file_);
  for (std::size_t i; in >> i;)
    if (i < played_.size()) played_[i] = true;
  if (pending() < events_.size())
    spdlog::info("churn: {} of this peer's {} events already played (in {})",
                 events_.size() - pending(), events_.size(), state_file_);
}

std::size_t PeerChurn::pending() const {
  std::size_t n = 0;
  for (bool p : played_) n += !p;
  return n;
}

void PeerChurn::mark_played(std::size_t i) {
  played_[i] = true;
  // Written and synced before the event: a crash must find it on the disk after the restart.
  const std::string line = std::to_string(i) + "\n";
  int fd = ::open(state_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    spdlog::warn("churn: cannot write {}: a restart would play event {} again", state_file_, i);
    return;
  }
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
  ::fsync(fd);
  ::close(fd);
}

void PeerChurn::between_steps(core::StepContext& ctx) {
  if (!ctx.training_done) {
    const double progress = core::progress_of(ctx);
    const double now = metrics_.seconds();
    for (std::size_t i = 0; i < events_.size(); ++i) {
      if (played_[i]) continue;
      const auto& e = events_[i];
      const bool due = e.by_progress ? progress >= 0 && progress >= e.at : now >= e.at;
      if (due) play(i, ctx);
    }
  }
  if (inner_) inner_->between_steps(ctx);
}

void PeerChurn::play(std::size_t i, const core::StepContext& ctx) {
  const core::ChurnEvent& e = events_[i];
  const std::string kind(core::churn_kind_name(e.kind));
  mark_played(i);
  nlohmann::json fields = {{"kind", kind},
                           {"churn_peer", shard_},
                           {"step", ctx.step},
                           {"progress", core::progress_of(ctx)},
                           {"scenario", core::to_json(e)}};
  if (e.for_s) fields["for"] = *e.for_s;
  metrics_.emit("churn", fields);
  spdlog::warn("churn: {} of this peer (shard {}) at step {}", kind, shard_, ctx.step);
  switch (e.kind) {
    case core::ChurnKind::Crash:
      spdlog::default_logger()->flush();
      ::kill(::getpid(), SIGKILL);  // at once: no checkpoint, no goodbye to the swarm
      ::_exit(137);
    case core::ChurnKind::Pause: {
      // The whole process stops, network thread included, as SIGSTOP from outside would; a child
      // wakes it. Only async-signal-safe calls in the child of a threaded process.
      const pid_t parent = ::getpid();
      const double s = *e.for_s;
      const pid_t child = ::fork();
      if (child == 0) {
        timespec ts{time_t(s), long((s - double(time_t(s))) * 1e9)};
        while (::nanosleep(&ts, &ts) != 0) {
        }
        ::kill(parent, SIGCONT);
        ::_exit(0);
      }
      if (child < 0) {
        spdlog::error("churn: cannot fork the waker of a pause: not pausing");
        return;
      }
      ::kill(parent, SIGSTOP);
      int st = 0;
      ::waitpid(child, &st, 0);
      metrics_.emit("churn", {{"kind", "resume"}, {"churn_peer", shard_}, {"step", ctx.step}});
      spdlog::warn("churn: resumed after a pause of {:.1f} s", s);
      return;
    }
    case core::ChurnKind::Stop:
      stop_.store(true);  // a clean stop: final checkpoint, then out of the swarm
      return;
    default: return;
  }
}

}  // namespace gossiptrain::apps
