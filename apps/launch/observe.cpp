// prometheus.yml and the swarm model export (see launch_observe.hpp).
#include "apps/launch/observe.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/checkpoint.hpp"

extern char** environ;

namespace gossiptrain::apps {

std::string prometheus_config(const std::vector<PeerPlan>& plans, int base_port) {
  std::ostringstream os;
  os << "# Written by gossip-launch: prometheus --config.file=prometheus.yml\n"
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: gossiptrain\n    static_configs:\n";
  for (const auto& p : plans)
    os << "      - targets: ['127.0.0.1:" << base_port + p.index << "']\n"
       << "        labels: {peer: 'peer" << p.index << "'}\n";
  return os.str();
}

nlohmann::json export_swarm_model(const std::string& run_dir, const std::vector<std::string>& ckpts,
                                  const PeerConfig& cfg, const std::string& peer_bin) {
  namespace fs = std::filesystem;
  const std::string dir = run_dir + "/swarm";
  fs::create_directories(dir);
  if (ckpts.empty()) return {{"error", "no peer finished with a checkpoint"}};
  core::Checkpoint avg;
  try {
    avg = core::load_checkpoint(ckpts[0]);
    std::vector<double> sum(avg.params.begin(), avg.params.end());
    for (std::size_t i = 1; i < ckpts.size(); ++i) {
      const core::Checkpoint c = core::load_checkpoint(ckpts[i]);
      if (c.fingerprint != avg.fingerprint || c.params.size() != sum.size())
        return {{"error", ckpts[i] + " holds another model"}};
      for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += c.params[k];
    }
    for (std::size_t k = 0; k < sum.size(); ++k)
      avg.params[k] = float(sum[k] / double(ckpts.size()));
    core::save_checkpoint(dir + "/ckpt", avg);
  } catch (const core::CheckpointError& e) {
    return {{"error", e.what()}};
  }
  const std::string out = dir + "/model.safetensors", log = dir + "/export.log";
  const std::string backend(kernels::to_string(cfg.backend));
  std::vector<std::string> args = {peer_bin,      "--export",    out,      "--from-checkpoint",
                                   dir + "/ckpt", "--data",      cfg.data, "--backend",
                                   backend,       "--log-level", "warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return {{"error", "cannot start " + peer_bin}};
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::ifstream in(log);
  nlohmann::json res;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') res = nlohmann::json::parse(line, nullptr, false);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !res.is_object())
    return {{"error", "the export failed: see " + log}};
  res["path"] = out;
  res["peers"] = ckpts.size();
  return res;
}

}  // namespace gossiptrain::apps
