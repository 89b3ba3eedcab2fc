// The crypto facade of net/: the only door to libsodium (key types as fixed-size arrays, secrets
// wiped on destruction, hashing, signatures, X25519, and the two AEADs the channel can run).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace gossiptrain::net::crypto {

inline constexpr std::size_t kPublicKeyBytes = 32;  // Ed25519 and X25519 public keys
inline constexpr std::size_t kSignatureBytes = 64;  // Ed25519 signature
inline constexpr std::size_t kSeedBytes = 32;       // Ed25519 seed (the stored secret)
inline constexpr std::size_t kSymKeyBytes = 32;     // AEAD and MAC keys
inline constexpr std::size_t kHashBytes = 32;       // BLAKE2b-256
inline constexpr std::size_t kAeadTagBytes = 16;    // both AEADs
inline constexpr std::size_t kAeadNonceBytes = 12;  // both AEADs (IETF ChaCha20, AES-GCM)

using PublicKey = std::array<std::uint8_t, kPublicKeyBytes>;
using Signature = std::array<std::uint8_t, kSignatureBytes>;
using Hash = std::array<std::uint8_t, kHashBytes>;

// Initialises libsodium once per process; throws if it cannot. Every facade entry point calls it.
void init();
void secure_zero(void* p, std::size_t n);
bool equal_ct(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);  // constant time
void random_bytes(std::span<std::uint8_t> out);

// Fixed-size secret that wipes itself: key material never outlives its owner in memory.
template <std::size_t N>
class Secret {
 public:
  Secret() { bytes_.fill(0); }
  Secret(const Secret& o) : bytes_(o.bytes_) {}
  Secret& operator=(const Secret& o) {
    bytes_ = o.bytes_;
    return *this;
  }
  ~Secret() { secure_zero(bytes_.data(), N); }
  std::uint8_t* data() { return bytes_.data(); }
  const std::uint8_t* data() const { return bytes_.data(); }
  static constexpr std::size_t size() { return N; }
  std::span<const std::uint8_t, N> span() const { return std::span<const std::uint8_t, N>(bytes_); }
  std::span<std::uint8_t, N> span() { return std::span<std::uint8_t, N>(bytes_); }

 private:
  std::array<std::uint8_t, N> bytes_;
};

using SymKey = Secret<kSymKeyBytes>;
using Seed = Secret<kSeedBytes>;
using SignSecretKey = Secret<64>;  // libsodium's expanded Ed25519 secret key (seed || pk)
using X25519Secret = Secret<32>;

std::string to_hex(std::span<const std::uint8_t> b);
// Decodes exactly out.size() bytes from hex (no separators); false on any malformed input.
bool from_hex(std::string_view hex, std::span<std::uint8_t> out);

// BLAKE2b-256, optionally keyed (key of 16..64 bytes), over the concatenation of parts.
Hash hash(std::initializer_list<std::span<const std::uint8_t>> parts,
          std::span<const std::uint8_t> key = {});
// Domain-separated key derivation: BLAKE2b-256 keyed with `key` over label || data.
SymKey kdf(const SymKey& key, std::string_view label, std::span<const std::uint8_t> data = {});

// Ed25519.
void sign_keypair_from_seed(const Seed& seed, PublicKey& pk, SignSecretKey& sk);
Signature sign(const SignSecretKey& sk, std::span<const std::uint8_t> msg);
bool verify(const PublicKey& pk, std::span<const std::uint8_t> msg, const Signature& sig);

// X25519: fresh ephemeral pair; shared secret (false for low-order points / all-zero result).
void x25519_keypair(PublicKey& pk, X25519Secret& sk);
bool x25519(const X25519Secret& sk, const PublicKey& remote_pk, SymKey& shared);

// The channel's AEADs. Both take 12-byte nonces and 16-byte tags, so frames look the same.
enum class Aead : std::uint8_t { Aes256Gcm = 1, ChaCha20Poly1305 = 2 };
const char* aead_name(Aead a);
bool aes256gcm_available();  // AES-NI + PCLMUL present (libsodium's requirement)

class AeadCipher {
 public:
  AeadCipher(Aead aead, const SymKey& key);
  ~AeadCipher();
  AeadCipher(const AeadCipher&) = delete;
  AeadCipher& operator=(const AeadCipher&) = delete;
  Aead aead() const { return aead_; }
  // Replaces the key (rekeying keeps the algorithm).
  void set_key(const SymKey& key);
  // out: len bytes of ciphertext (may alias in), tag: 16 bytes.
  void seal(std::uint8_t* out, std::uint8_t* tag, const std::uint8_t* in, std::size_t len,
            std::span<const std::uint8_t> ad, std::uint64_t nonce) const;
  // Verifies then decrypts; false (and out unspecified) when authentication fails.
  bool open(std::uint8_t* out, const std::uint8_t* in, std::size_t len, const std::uint8_t* tag,
            std::span<const std::uint8_t> ad, std::uint64_t nonce) const;

 private:
  struct State;
  Aead aead_;
  SymKey key_;
  std::unique_ptr<State> aes_;  // precomputed AES-GCM key schedule
};

}  // namespace gossiptrain::net::crypto
