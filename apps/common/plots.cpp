#include "apps/common/plots.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace gossiptrain::apps {

fs::path self_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : p.parent_path();
}

std::optional<fs::path> find_script(const fs::path& self_dir, const std::string& name) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("GT_SCRIPTS_DIR")) dirs.emplace_back(env);
  dirs.push_back(self_dir / ".." / "share" / "gossiptrain" / "scripts");
  std::error_code ec;
  for (const auto& d : dirs)
    if (fs::is_regular_file(d / name, ec)) return fs::weakly_canonical(d / name, ec);
  return std::nullopt;
}

nlohmann::json run_plot_script(const fs::path& script, const fs::path& run_dir, double timeout_s,
                               int poll_ms) {
  nlohmann::json plots = {{"ok", false}};
  // Debian's python3 has matplotlib; the python3 first on PATH may be another one.
  std::string python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const std::string log = (run_dir / "plot.log").string();
  pid_t pid = -1;
  std::vector<std::string> args{script.string(), run_dir.string()};
  std::vector<char*> argv;
  argv.push_back(python.data());
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid = ::fork();
  if (pid == 0) {
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::execvp(python.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", python.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  bool done = false;
  while (pid > 0 && since() < timeout_s) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      done = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  if (!done && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  if (done && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    plots["ok"] = true;
    std::vector<std::string> made;  // the figures in the folder now
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_dir, ec))
      if (e.path().extension() == ".png") made.push_back(e.path().filename().string());
    std::sort(made.begin(), made.end());
    std::string list;
    for (const auto& m : made) list += (list.empty() ? "" : ", ") + m;
    plots["message"] = list.empty() ? "no figure written" : list;
  } else {
    auto tail = last_lines(log, 1);
    const std::string name = script.filename().string();
    plots["message"] = name + (done ? " failed" : " timed out") + " (" + python + "; see " + log +
                       ")" + (tail.empty() ? "" : ": " + tail.back());
  }
  return plots;
}

std::vector<std::string> last_lines(const fs::path& path, int n) {
  std::ifstream in(path);
  std::deque<std::string> q;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    q.push_back(line);
    if (int(q.size()) > n) q.pop_front();
  }
  return {q.begin(), q.end()};
}

}  // namespace gossiptrain::apps
