// GT_ASSERT stays on whatever the build type: checked here with NDEBUG defined, as Release and
// RelWithDebInfo define it.
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "base/assert.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>

TEST_CASE("GT_ASSERT stops the process on a broken invariant even where NDEBUG is defined",
          "[core]") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(2);  // keep the suite's output clean of the child's message
    const int broken = 1;
    GT_ASSERT(broken == 2);
    ::_exit(0);  // reached only if the check is off
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}

TEST_CASE("GT_ASSERT lets a process whose invariant holds go on", "[core]") {
  int evaluated = 0;
  GT_ASSERT(++evaluated == 1);
  CHECK(evaluated == 1);
}
