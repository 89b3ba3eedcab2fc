// Validation of the channel limits (limits.hpp).
#include "net/secure/limits.hpp"

#include "net/secure/identity.hpp"

namespace gossiptrain::net {

void Limits::validate() const {
  auto bad = [](const std::string& what) { throw ConfigError("net limits: " + what); };
  if (max_frame_bytes < 1024 || max_frame_bytes > kMaxFrameCapBytes)
    bad("max_frame_bytes must be in [1024, " + std::to_string(kMaxFrameCapBytes) + "]");
  if (max_message_bytes < (64u << 10) || max_message_bytes > kMaxMessageCapBytes)
    bad("max_message_bytes must be in [64 KiB, " + std::to_string(kMaxMessageCapBytes) + "]");
  if (max_connections == 0) bad("max_connections must be > 0");
  if (max_handshakes_in_flight == 0) bad("max_handshakes_in_flight must be > 0");
  if (handshake_timeout.count() <= 0 || idle_timeout.count() <= 0 ||
      keepalive_interval.count() <= 0 || close_linger.count() < 0)
    bad("timeouts must be positive");
  if (keepalive_interval >= idle_timeout)
    bad("keepalive_interval must be shorter than idle_timeout");
  if (send_queue_max_messages == 0) bad("send_queue_max_messages must be > 0");
  if (rekey_after_frames == 0 || rekey_after_frames > kMaxFramesPerKey)
    bad("rekey_after_frames must be in [1, 2^31]");
  if (rekey_after_bytes == 0 || rekey_after_bytes > kMaxBytesPerKey)
    bad("rekey_after_bytes must be in [1, 64 GiB]");
}

}  // namespace gossiptrain::net
