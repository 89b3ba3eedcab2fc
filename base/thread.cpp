#include "base/thread.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gossiptrain::base {

namespace {

#if defined(__linux__)
bool set_affinity(pid_t tid, const std::vector<int>& cpus, std::string* error) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (::sched_setaffinity(tid, sizeof set, &set) == 0) return true;
  if (error) *error = std::strerror(errno);
  return false;
}
#endif

}  // namespace

bool lower_this_thread_priority(int by, std::string* error) {
  if (by <= 0) return true;
#if defined(__linux__)
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && ::setpriority(PRIO_PROCESS, tid, now + by > 19 ? 19 : now + by) == 0)
    return true;
  if (error) *error = std::strerror(errno);
  return false;
#else
  if (error) *error = "per-thread priorities are supported on Linux only";
  return false;
#endif
}

bool pin_this_thread(const std::vector<int>& cpus, std::string* error) {
  if (cpus.empty()) return true;
#if defined(__linux__)
  return set_affinity(0, cpus, error);
#else
  if (error) *error = "thread pinning is supported on Linux only";
  return false;
#endif
}

int pin_all_threads(const std::vector<int>& cpus, std::string* error) {
  if (cpus.empty()) return 0;
  int pinned = 0;
#if defined(__linux__)
  DIR* d = ::opendir("/proc/self/task");
  if (!d) {
    if (error) *error = std::string("/proc/self/task: ") + std::strerror(errno);
    return 0;
  }
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (set_affinity(pid_t(std::atoi(e->d_name)), cpus, error)) ++pinned;
  }
  ::closedir(d);
#else
  if (error) *error = "thread pinning is supported on Linux only";
#endif
  return pinned;
}

}  // namespace gossiptrain::base
