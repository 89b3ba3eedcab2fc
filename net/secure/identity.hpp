// Long-term peer identity (Ed25519 key file), the optional network key (pre-shared secret) and the
// optional allowlist of peer public keys. Bad files are configuration errors: ConfigError.
#pragma once

#include <filesystem>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "net/secure/crypto.hpp"

namespace gossiptrain::net {

// Bad user input or configuration (unreadable/malformed key files, bad limits). Apps turn it into a
// message and exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Peer id shown in logs and metrics: first 16 hex chars of BLAKE2b-256(public key).
std::string peer_id_of(const crypto::PublicKey& pk);

class Identity {
 public:
  // A fresh random identity (tests, or before saving).
  static Identity generate();
  static Identity from_seed(const crypto::Seed& seed);
  // Loads the key file; creates it (mode 0600) with a fresh key when it does not exist. Throws
  // ConfigError when it is unreadable, malformed, or has any group/other permission bit.
  static Identity load_or_create(const std::filesystem::path& path);
  static Identity load(const std::filesystem::path& path);
  // Writes the seed to a new file with mode 0600; refuses to overwrite.
  void save(const std::filesystem::path& path) const;

  const crypto::PublicKey& public_key() const { return pk_; }
  const std::string& peer_id() const { return peer_id_; }
  std::string public_key_hex() const { return crypto::to_hex(pk_); }
  crypto::Signature sign(std::span<const std::uint8_t> msg) const;

 private:
  crypto::Seed seed_;
  crypto::SignSecretKey sk_;
  crypto::PublicKey pk_{};
  std::string peer_id_;
};

// Pre-shared network key: a file of exactly 32 raw bytes, or 64 hex chars (surrounding whitespace
// allowed).
crypto::SymKey load_network_key(const std::filesystem::path& path);

// Public keys admitted as remotes. File: one hex public key per line, '#' comments, blank lines.
class Allowlist {
 public:
  static Allowlist load(const std::filesystem::path& path);
  void add(const crypto::PublicKey& pk) { keys_.insert(pk); }
  bool contains(const crypto::PublicKey& pk) const { return keys_.count(pk) != 0; }
  std::size_t size() const { return keys_.size(); }

 private:
  std::set<crypto::PublicKey> keys_;
};

}  // namespace gossiptrain::net
