// What the churn scenario's two files share (scenario.cpp, shorthand.cpp).
#pragma once

#include <string>
#include <string_view>

#include "core/churn/scenario.hpp"

namespace gossiptrain::core::churn_detail {

inline constexpr std::string_view kPrefix = "churn scenario: ";
// Throws ScenarioError with kPrefix before what.
[[noreturn]] void fail(const std::string& what);
// Crash, stop, restart, pause or resume: an event of one peer's life.
bool is_lifecycle(ChurnKind k);
// True when the argument starts with a shorthand item: KIND: or one of the KEY= options.
bool looks_like_shorthand(std::string_view arg);

}  // namespace gossiptrain::core::churn_detail
