// Limits and deadlines of the encrypted channel: what a remote may make us allocate or wait for.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gossiptrain::net {

// 3: one little-endian codec (frame lengths, versioned exchange messages); 4: the transport's own
// messages 0xF0-0xF5 (reverse connections, reachability, relays; docs/nat.md), which a peer of
// protocol 3 would take for unknown gossip messages.
inline constexpr std::uint16_t kProtocolVersion = 4;
// Hard caps that configuration cannot exceed.
inline constexpr std::size_t kMaxFrameCapBytes = 16u << 20;       // plaintext per frame
inline constexpr std::uint64_t kMaxMessageCapBytes = 8ull << 30;  // one streamed message
inline constexpr std::size_t kMaxAddrBytes = 128;                 // advertised "host:port"
inline constexpr std::size_t kMaxCloseReasonBytes = 256;
// Nonces are 64-bit counters; we switch keys long before any AEAD limit (libsodium: 2^32
// messages is the conservative bound we keep far below; AES-GCM ~350 GB per key).
inline constexpr std::uint64_t kMaxFramesPerKey = 1ull << 31;
inline constexpr std::uint64_t kMaxBytesPerKey = 64ull << 30;

enum class AeadPreference { Auto, Aes256Gcm, ChaCha20Poly1305 };

struct Limits {
  std::size_t max_frame_bytes = 1u << 20;        // plaintext bytes per data frame
  std::uint64_t max_message_bytes = 1ull << 30;  // largest message accepted or sent
  std::size_t max_connections = 256;             // established + handshaking
  std::size_t max_handshakes_in_flight = 64;
  std::chrono::milliseconds handshake_timeout{5000};    // TCP connect + whole handshake
  std::chrono::milliseconds idle_timeout{30000};        // no complete frame received for this long
  std::chrono::milliseconds keepalive_interval{10000};  // send a ping after this much silence
  std::chrono::milliseconds close_linger{2000};         // flush + close frame + wait for remote EOF
  std::size_t send_queue_max_messages = 64;
  std::uint64_t send_queue_max_bytes = 2ull << 30;
  // The sender ratchets its key (announced by a rekey frame) after this many frames or bytes.
  std::uint64_t rekey_after_frames = 1ull << 24;
  std::uint64_t rekey_after_bytes = 16ull << 30;

  // Throws ConfigError (identity.hpp) describing the first bad value.
  void validate() const;
};

}  // namespace gossiptrain::net
