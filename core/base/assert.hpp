// GT_ASSERT: the project's invariant check. It stays on in every build type (NDEBUG, which
// Release and RelWithDebInfo define, does not turn it off): a broken invariant stops the process
// (docs/ARCHITECTURE.md, "Error policy"). Not for input checks: those throw or return.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace gossiptrain::base {

[[noreturn]] inline void assert_failed(const char* expr, const char* file, int line,
                                       const char* func) noexcept {
  std::fprintf(stderr, "%s:%d: %s: invariant broken: %s\n", file, line, func, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace gossiptrain::base

#define GT_ASSERT(cond)                                                                         \
  ((cond) ? static_cast<void>(0)                                                               \
          : ::gossiptrain::base::assert_failed(#cond, __FILE__, __LINE__, __func__))
