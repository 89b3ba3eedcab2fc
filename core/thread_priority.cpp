#include "core/thread_priority.hpp"

#include <cerrno>
#include <cstring>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gossiptrain::core {

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

}  // namespace gossiptrain::core
