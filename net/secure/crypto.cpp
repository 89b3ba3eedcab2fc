// libsodium behind the crypto facade (crypto.hpp). The only file of the project that includes
// <sodium.h>.
#include "net/secure/crypto.hpp"
#include "base/bytes.hpp"

#include <sodium.h>

#include "base/assert.hpp"
#include <cctype>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace gossiptrain::net::crypto {

static_assert(crypto_aead_aes256gcm_NPUBBYTES == kAeadNonceBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_NPUBBYTES == kAeadNonceBytes);
static_assert(crypto_aead_aes256gcm_ABYTES == kAeadTagBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == kAeadTagBytes);
static_assert(crypto_sign_PUBLICKEYBYTES == kPublicKeyBytes);
static_assert(crypto_sign_SECRETKEYBYTES == SignSecretKey::size());
static_assert(crypto_sign_SEEDBYTES == kSeedBytes);
static_assert(crypto_scalarmult_BYTES == 32);

// Release builds keep this check: a failed libsodium primitive that cannot fail is a broken
// invariant (docs/ARCHITECTURE.md, "Error policy"), not a network event.
#define GT_SODIUM_CHECK(expr)                                                 \
  do {                                                                        \
    if ((expr) != 0) throw std::logic_error("libsodium call failed: " #expr); \
  } while (0)

void init() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] { ok = sodium_init() >= 0; });
  if (!ok) throw std::runtime_error("libsodium initialisation failed");
}

void secure_zero(void* p, std::size_t n) { sodium_memzero(p, n); }

bool equal_ct(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

void random_bytes(std::span<std::uint8_t> out) {
  init();
  randombytes_buf(out.data(), out.size());
}

std::string to_hex(std::span<const std::uint8_t> b) {
  std::string s(b.size() * 2 + 1, '\0');
  sodium_bin2hex(s.data(), s.size(), b.data(), b.size());
  s.pop_back();
  return s;
}

bool from_hex(std::string_view hex, std::span<std::uint8_t> out) {
  if (hex.size() != out.size() * 2) return false;
  for (char c : hex)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  std::size_t n = 0;
  const char* end = nullptr;
  if (sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &n, &end) != 0)
    return false;
  return n == out.size() && end == hex.data() + hex.size();
}

Hash hash(std::initializer_list<std::span<const std::uint8_t>> parts,
          std::span<const std::uint8_t> key) {
  init();
  crypto_generichash_state st;
  GT_SODIUM_CHECK(
      crypto_generichash_init(&st, key.empty() ? nullptr : key.data(), key.size(), kHashBytes));
  for (auto p : parts) GT_SODIUM_CHECK(crypto_generichash_update(&st, p.data(), p.size()));
  Hash out;
  GT_SODIUM_CHECK(crypto_generichash_final(&st, out.data(), out.size()));
  sodium_memzero(&st, sizeof st);
  return out;
}

SymKey kdf(const SymKey& key, std::string_view label, std::span<const std::uint8_t> data) {
  auto lbl = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(label.data()),
                                           label.size());
  // The label's length goes first so label || data splits are unambiguous.
  std::uint8_t len = static_cast<std::uint8_t>(label.size());
  GT_ASSERT(label.size() < 256);
  Hash h = hash({std::span<const std::uint8_t>(&len, 1), lbl, data}, key.span());
  SymKey out;
  std::memcpy(out.data(), h.data(), h.size());
  sodium_memzero(h.data(), h.size());
  return out;
}

void sign_keypair_from_seed(const Seed& seed, PublicKey& pk, SignSecretKey& sk) {
  init();
  GT_SODIUM_CHECK(crypto_sign_seed_keypair(pk.data(), sk.data(), seed.data()));
}

Signature sign(const SignSecretKey& sk, std::span<const std::uint8_t> msg) {
  init();
  Signature sig;
  GT_SODIUM_CHECK(crypto_sign_detached(sig.data(), nullptr, msg.data(), msg.size(), sk.data()));
  return sig;
}

bool verify(const PublicKey& pk, std::span<const std::uint8_t> msg, const Signature& sig) {
  init();
  return crypto_sign_verify_detached(sig.data(), msg.data(), msg.size(), pk.data()) == 0;
}

void x25519_keypair(PublicKey& pk, X25519Secret& sk) {
  init();
  randombytes_buf(sk.data(), sk.size());
  GT_SODIUM_CHECK(crypto_scalarmult_base(pk.data(), sk.data()));
}

bool x25519(const X25519Secret& sk, const PublicKey& remote_pk, SymKey& shared) {
  init();
  return crypto_scalarmult(shared.data(), sk.data(), remote_pk.data()) == 0;
}

const char* aead_name(Aead a) {
  switch (a) {
    case Aead::Aes256Gcm: return "aes256gcm";
    case Aead::ChaCha20Poly1305: return "chacha20poly1305";
  }
  return "unknown";
}

bool aes256gcm_available() {
  init();
  return crypto_aead_aes256gcm_is_available() != 0;
}

struct AeadCipher::State {
  crypto_aead_aes256gcm_state st;
  ~State() { sodium_memzero(&st, sizeof st); }
};

static void make_nonce(std::uint8_t* n, std::uint64_t counter) {
  // 4 zero bytes then the little-endian counter: unique per key as long as the counter is.
  std::memset(n, 0, kAeadNonceBytes);
  base::put_u64(n + 4, counter);
}

AeadCipher::AeadCipher(Aead aead, const SymKey& key) : aead_(aead) {
  init();
  if (aead_ == Aead::Aes256Gcm && !aes256gcm_available())
    throw std::invalid_argument("AES-256-GCM is not available on this CPU");
  if (aead_ != Aead::Aes256Gcm && aead_ != Aead::ChaCha20Poly1305)
    throw std::invalid_argument("unknown AEAD");
  set_key(key);
}

AeadCipher::~AeadCipher() = default;

void AeadCipher::set_key(const SymKey& key) {
  key_ = key;
  if (aead_ == Aead::Aes256Gcm) {
    if (!aes_) aes_ = std::make_unique<State>();
    GT_SODIUM_CHECK(crypto_aead_aes256gcm_beforenm(&aes_->st, key_.data()));
  }
}

void AeadCipher::seal(std::uint8_t* out, std::uint8_t* tag, const std::uint8_t* in, std::size_t len,
                      std::span<const std::uint8_t> ad, std::uint64_t nonce) const {
  std::uint8_t n[kAeadNonceBytes];
  make_nonce(n, nonce);
  if (aead_ == Aead::Aes256Gcm) {
    GT_SODIUM_CHECK(crypto_aead_aes256gcm_encrypt_detached_afternm(
        out, tag, nullptr, in, len, ad.data(), ad.size(), nullptr, n, &aes_->st));
  } else {
    GT_SODIUM_CHECK(crypto_aead_chacha20poly1305_ietf_encrypt_detached(
        out, tag, nullptr, in, len, ad.data(), ad.size(), nullptr, n, key_.data()));
  }
}

bool AeadCipher::open(std::uint8_t* out, const std::uint8_t* in, std::size_t len,
                      const std::uint8_t* tag, std::span<const std::uint8_t> ad,
                      std::uint64_t nonce) const {
  std::uint8_t n[kAeadNonceBytes];
  make_nonce(n, nonce);
  if (aead_ == Aead::Aes256Gcm)
    return crypto_aead_aes256gcm_decrypt_detached_afternm(out, nullptr, in, len, tag, ad.data(),
                                                          ad.size(), n, &aes_->st) == 0;
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, nullptr, in, len, tag, ad.data(),
                                                            ad.size(), n, key_.data()) == 0;
}

}  // namespace gossiptrain::net::crypto
