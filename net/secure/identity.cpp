// Identity key file, network key file and allowlist loading (see identity.hpp).
#include "net/secure/identity.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

namespace gossiptrain::net {
namespace {

constexpr const char* kIdentityHeader = "# gossiptrain identity: Ed25519 seed (hex). Keep secret.";
constexpr std::size_t kMaxKeyFileBytes = 64 * 1024;

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Reads a small file; ConfigError with the OS reason when it cannot.
std::string read_small_file(const std::filesystem::path& path, const char* what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ConfigError(std::string(what) + " " + path.string() +
                      ": cannot open: " + std::strerror(errno));
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw ConfigError(std::string(what) + " " + path.string() +
                        ": cannot read: " + std::strerror(e));
    }
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > kMaxKeyFileBytes) {
      ::close(fd);
      throw ConfigError(std::string(what) + " " + path.string() + ": file too large");
    }
  }
  ::close(fd);
  return data;
}

}  // namespace

std::string peer_id_of(const crypto::PublicKey& pk) {
  return crypto::to_hex(crypto::hash({pk})).substr(0, 16);
}

Identity Identity::from_seed(const crypto::Seed& seed) {
  Identity id;
  id.seed_ = seed;
  crypto::sign_keypair_from_seed(id.seed_, id.pk_, id.sk_);
  id.peer_id_ = peer_id_of(id.pk_);
  return id;
}

Identity Identity::generate() {
  crypto::Seed seed;
  crypto::random_bytes(seed.span());
  return from_seed(seed);
}

Identity Identity::load(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError("identity file " + path.string() + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw ConfigError("identity file " + path.string() + ": not a regular file");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw ConfigError("identity file " + path.string() + " has mode " + mode +
                      " (readable or writable by group/others); run: chmod 600 " + path.string());
  }
  std::string text = read_small_file(path, "identity file");
  std::istringstream in(text);
  std::string line, hex;
  int data_lines = 0;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    hex = line;
    ++data_lines;
  }
  crypto::Seed seed;
  bool ok = data_lines == 1 && crypto::from_hex(hex, seed.span());
  crypto::secure_zero(hex.data(), hex.size());
  crypto::secure_zero(text.data(), text.size());
  if (!ok)
    throw ConfigError("identity file " + path.string() +
                      ": malformed (expected one line of 64 hex chars, the Ed25519 seed)");
  return from_seed(seed);
}

void Identity::save(const std::filesystem::path& path) const {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw ConfigError("identity file " + path.string() +
                      ": cannot create: " + std::strerror(errno));
  ::fchmod(fd, 0600);  // the umask could only have removed bits, but be explicit
  std::string text = std::string(kIdentityHeader) + "\n" + crypto::to_hex(seed_.span()) + "\n";
  std::size_t off = 0;
  bool ok = true;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    off += static_cast<std::size_t>(n);
  }
  int err = errno;
  if (ok && ::fsync(fd) != 0) ok = false;
  ::close(fd);
  crypto::secure_zero(text.data(), text.size());
  if (!ok) {
    ::unlink(path.c_str());
    throw ConfigError("identity file " + path.string() + ": cannot write: " + std::strerror(err));
  }
}

Identity Identity::load_or_create(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    Identity id = generate();
    id.save(path);
    spdlog::info("created identity {} in {}", id.peer_id(), path.string());
    return id;
  }
  return load(path);
}

crypto::Signature Identity::sign(std::span<const std::uint8_t> msg) const {
  return crypto::sign(sk_, msg);
}

crypto::SymKey load_network_key(const std::filesystem::path& path) {
  std::string text = read_small_file(path, "network key file");
  crypto::SymKey key;
  bool ok = false;
  if (text.size() == key.size()) {
    std::memcpy(key.data(), text.data(), key.size());
    ok = true;
  } else {
    std::string t = trim(text);
    ok = crypto::from_hex(t, key.span());
    crypto::secure_zero(t.data(), t.size());
  }
  crypto::secure_zero(text.data(), text.size());
  if (!ok)
    throw ConfigError("network key file " + path.string() +
                      ": expected exactly 32 raw bytes or 64 hex chars");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    spdlog::warn("network key file {} is accessible by group/others; chmod 600 recommended",
                 path.string());
  return key;
}

Allowlist Allowlist::load(const std::filesystem::path& path) {
  std::string text = read_small_file(path, "allowlist file");
  std::istringstream in(text);
  std::string line;
  Allowlist list;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    crypto::PublicKey pk;
    if (!crypto::from_hex(line, pk))
      throw ConfigError("allowlist file " + path.string() + ":" + std::to_string(lineno) +
                        ": expected a 64-hex-char public key");
    list.add(pk);
  }
  return list;
}

}  // namespace gossiptrain::net
