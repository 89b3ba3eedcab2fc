// The names of the close reasons (close_reason.hpp).
#include "net/close_reason.hpp"

#include "base/enum_names.hpp"

namespace gossiptrain::net {

namespace {
constexpr std::string_view kNames[] = {
    "unspecified",      "shutdown",    "not_needed",      "self",
    "unexpected_peer",  "malformed",   "unknown_type",    "protocol_violation",
    "no_answer",        "cancelled",   "failed",          "refused",
    "handshake_failed", "timeout",     "io_error",        "remote_closed",
    "truncated",        "frame_error", "shared_identity",
};
static_assert(std::size(kNames) == kCloseReasonCount);
static_assert(base::enum_count(CloseReason::Unspecified, CloseReason::SharedIdentity) ==
              kCloseReasonCount);
}  // namespace

std::string_view close_reason_name(CloseReason r) {
  return base::enum_name(r, CloseReason::Unspecified, kNames);
}

std::string close_text(CloseReason r, std::string_view detail) {
  std::string s(close_reason_name(r));
  if (!detail.empty()) s.append(": ").append(detail);
  return s;
}

}  // namespace gossiptrain::net
