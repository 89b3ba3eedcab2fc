// A number that must be the whole of a text (partition specs, churn shorthand).
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace gossiptrain::core {

// nullopt when the text is empty, not a T, out of T's range, or has anything after the number.
template <class T>
std::optional<T> parse_whole(std::string_view text) {
  T x{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return x;
}

}  // namespace gossiptrain::core
