// The channel handshake as a pure state machine (bytes in -> bytes out, result or error reason), so
// tests and the fuzzer drive it without sockets. The session (channel.cpp) only moves its bytes.
//
// Four fixed-size messages, initiator I, responder R (SIGMA-style, signatures over the transcript):
//   M1 I->R  magic | aead mask | eI                                    | mac
//   M2 R->I  eR | chosen aead | AEAD_kR(idR)                            | mac
//   M3 I->R  AEAD_kI(idI | sig_I(H(T)) | hello_I)                       | mac
//   M4 R->I  AEAD_kR(sig_R(H(T)) | hello_R)                             | mac
// T is the transcript (every wire byte plus the decrypted identity keys and hellos); eI, eR are
// fresh X25519 keys; kI, kR and the session keys come from BLAKE2b-keyed KDFs over the X25519
// secret and T, keyed by the network key; every mac is BLAKE2b keyed by a key derived from the
// network key (all-zero key when there is none), so without it no message verifies. hello =
// protocol version, model fingerprint, instance, listen address; a mismatch fails with a reason.
//
// A remote whose identity key is ours is known only once its signature verifies (R at M3, I at
// M4; M2's identity is a claim): then the instance, a random number of each transport, tells a
// connection to ourselves (same instance: we dialled our own address) from another live process
// that holds our key (a configuration error: close reason shared_identity). R still sends M4 in
// both cases, so that I learns it from R's signature too.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "net/close_reason.hpp"
#include "net/secure/crypto.hpp"
#include "net/secure/identity.hpp"
#include "net/secure/limits.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

struct HandshakeParams {
  const Identity* identity = nullptr;  // not owned; required
  std::optional<crypto::SymKey> network_key;
  const Allowlist* allowlist = nullptr;  // not owned; null admits any authenticated key
  std::uint64_t fingerprint = 0;         // model fingerprint both sides must share
  std::uint16_t version = kProtocolVersion;
  // This transport's random number (TcpTransport draws one per instance): a remote with our key
  // and our instance is ourselves, with our key and another instance a second process using it.
  std::uint64_t instance = 0;
  std::string listen_addr;  // what we advertise (<= kMaxAddrBytes)
  AeadPreference aead = AeadPreference::Auto;
};

struct HandshakeResult {
  crypto::PublicKey remote_key{};
  std::string remote_peer_id;
  std::string remote_listen_addr;
  std::uint64_t remote_fingerprint = 0;
  std::uint16_t remote_version = 0;
  std::uint64_t remote_instance = 0;
  crypto::Aead aead = crypto::Aead::ChaCha20Poly1305;
  crypto::SymKey send_key;
  crypto::SymKey recv_key;
};

// Bit mask of the AEADs a preference allows on this machine.
std::uint8_t aead_mask(AeadPreference pref);

class Handshake {
 public:
  enum class Role { Initiator, Responder };
  enum class State { Start, AwaitM1, AwaitM2, AwaitM3, AwaitM4, Done, Failed };

  static constexpr std::size_t kMacBytes = 32;
  // M1's first bytes. "GTH1" was the handshake before the hello carried an instance.
  static constexpr std::uint8_t kMagic[4] = {'G', 'T', 'H', '2'};
  static constexpr std::size_t kHelloBytes = 2 + 8 + 8 + 1 + kMaxAddrBytes;
  static constexpr std::size_t kM1Bytes = 4 + 1 + 32 + kMacBytes;
  static constexpr std::size_t kM2Bytes = 32 + 1 + 32 + crypto::kAeadTagBytes + kMacBytes;
  static constexpr std::size_t kM3Bytes =
      32 + crypto::kSignatureBytes + kHelloBytes + crypto::kAeadTagBytes + kMacBytes;
  static constexpr std::size_t kM4Bytes =
      crypto::kSignatureBytes + kHelloBytes + crypto::kAeadTagBytes + kMacBytes;

  // Throws ConfigError on bad params (no identity, address too long, unavailable AEAD).
  Handshake(Role role, HandshakeParams params);
  ~Handshake();

  // Initiator only, once: returns M1.
  Bytes start();
  // Size of the next message to read; 0 when done, failed, or the initiator has not started.
  std::size_t expected_bytes() const;
  // Feeds the next message (must be expected_bytes() long, else the handshake fails). Returns the
  // bytes to send, possibly empty. Sets done() or failed(); a failed step may still return bytes
  // (R's M4 on a hello mismatch, so I learns the reason too): send them, then close.
  Bytes on_message(std::span<const std::uint8_t> in);

  State state() const { return state_; }
  bool done() const { return state_ == State::Done; }
  bool failed() const { return state_ == State::Failed; }
  const std::string& error() const { return error_; }
  // The typed reason of a failure: Self (connected to ourselves), SharedIdentity (another process
  // holds our identity key), else HandshakeFailed.
  CloseReason close_reason() const { return close_reason_; }
  // Remote identity, once known (after M2 for I, after M3 for R); empty otherwise.
  std::string remote_peer_id() const;
  // The remote's advertised address, once its hello is decoded (a failed handshake may have it).
  const std::string& remote_listen_addr() const { return result_.remote_listen_addr; }
  // Valid once done(); moves the session keys out.
  HandshakeResult take_result();

 private:
  Bytes fail(std::string reason, CloseReason type = CloseReason::HandshakeFailed);
  // The remote's signature verified with our own key: ourselves or a clone (fails either way).
  void fail_same_key();
  Bytes on_m1(std::span<const std::uint8_t> in);
  Bytes on_m2(std::span<const std::uint8_t> in);
  Bytes on_m3(std::span<const std::uint8_t> in);
  Bytes on_m4(std::span<const std::uint8_t> in);
  crypto::Hash mac_of(std::span<const std::uint8_t> body) const;
  bool check_mac(std::span<const std::uint8_t> msg);
  void append(std::span<const std::uint8_t> b) {
    transcript_.insert(transcript_.end(), b.begin(), b.end());
  }
  crypto::Hash transcript_hash(std::span<const std::uint8_t> extra = {}) const;
  void derive_handshake_keys(const crypto::PublicKey& remote_eph, std::uint8_t chosen);
  void encode_hello(std::uint8_t* out) const;
  bool decode_hello(const std::uint8_t* in);
  bool check_hello();
  void finish();

  Role role_;
  HandshakeParams params_;
  State state_;
  std::string error_;
  CloseReason close_reason_ = CloseReason::HandshakeFailed;
  std::uint8_t my_mask_ = 0;
  crypto::SymKey mac_key_;
  crypto::SymKey net_key_;  // network key or all zero
  crypto::PublicKey eph_pk_{};
  crypto::X25519Secret eph_sk_;
  crypto::SymKey prk_;
  crypto::SymKey k_i_;  // handshake key I->R
  crypto::SymKey k_r_;  // handshake key R->I
  Bytes transcript_;
  bool have_remote_ = false;
  HandshakeResult result_;
};

}  // namespace gossiptrain::net
