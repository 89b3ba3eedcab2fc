// GT_ASSERT: the project's invariant check. It stays on in every build type (NDEBUG, which
// Release and RelWithDebInfo define, does not turn it off): a broken invariant stops the process
// (docs/ARCHITECTURE.md, "Error policy"). Not for input checks: those throw or return.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace gossiptrain::base {

// The function and line name the place; no file path (it would put the source tree's path into
// every installed program).
[[noreturn]] inline void assert_failed(const char* expr, const char* func, int line) noexcept {
  std::fprintf(stderr, "invariant broken in %s, line %d: %s\n", func, line, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace gossiptrain::base

#define GT_ASSERT(cond)                                                                         \
  ((cond) ? static_cast<void>(0)                                                               \
          : ::gossiptrain::base::assert_failed(#cond, __func__, __LINE__))
