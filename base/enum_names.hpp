// Stable lowercase names of an enum's values (logs, metrics reasons, counters) from one table per
// enum: names[i] names the value first + i, an empty entry a value that was never used.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace gossiptrain::base {

// "unknown" for a value outside the table or with an empty entry.
template <class E, std::size_t N>
constexpr std::string_view enum_name(E v, E first, const std::string_view (&names)[N]) {
  const auto i = static_cast<long long>(v) - static_cast<long long>(first);
  if (i < 0 || i >= static_cast<long long>(N) || names[i].empty()) return "unknown";
  return names[i];
}

// The value a name stands for in the table; none for a name it does not hold.
template <class E, std::size_t N>
constexpr std::optional<E> enum_from_name(std::string_view name, E first,
                                          const std::string_view (&names)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (!names[i].empty() && names[i] == name)
      return static_cast<E>(static_cast<long long>(first) + static_cast<long long>(i));
  return std::nullopt;
}

// For a static_assert that a table covers first..last.
template <class E>
constexpr std::size_t enum_count(E first, E last) {
  return static_cast<std::size_t>(static_cast<long long>(last) - static_cast<long long>(first) + 1);
}

}  // namespace gossiptrain::base
