// Identity key file, network key file and allowlist tests.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "net/secure/identity.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::net;
namespace fs = std::filesystem;
using gt_test::TempDir;
using gt_test::WhatContains;

namespace {

void write_file(const fs::path& p, const std::string& s, mode_t mode = 0600) {
  std::ofstream(p, std::ios::binary) << s;
  ::chmod(p.c_str(), mode);
}

}  // namespace

TEST_CASE("identity file is created 0600 and reloads to the same key", "[net]") {
  TempDir d("gt_net_id");
  auto p = d.path / "id.key";
  Identity a = Identity::load_or_create(p);
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(a.peer_id().size() == 16);
  CHECK(a.peer_id() == peer_id_of(a.public_key()));
  Identity b = Identity::load_or_create(p);
  CHECK(b.public_key() == a.public_key());
  CHECK(b.peer_id() == a.peer_id());
  Identity c = Identity::generate();
  CHECK(c.public_key() != a.public_key());
}

TEST_CASE("identity file readable by group or others is refused", "[net]") {
  TempDir d("gt_net_id");
  auto p = d.path / "id.key";
  Identity::load_or_create(p);
  for (mode_t m : {0644, 0640, 0604, 0660}) {
    ::chmod(p.c_str(), m);
    CHECK_THROWS_MATCHES(Identity::load(p), ConfigError, WhatContains("chmod 600"));
  }
  ::chmod(p.c_str(), 0400);
  CHECK_NOTHROW(Identity::load(p));
}

TEST_CASE("malformed or unreadable identity files are refused", "[net]") {
  TempDir d("gt_net_id");
  auto p = d.path / "bad.key";
  for (std::string content :
       {std::string(""), std::string("hello\n"), std::string(63, 'a'), std::string(65, 'a'),
        std::string(64, 'g'), std::string(64, 'a') + "\n" + std::string(64, 'b') + "\n",
        std::string(32, '\0')}) {
    fs::remove(p);
    write_file(p, content);
    CHECK_THROWS_MATCHES(Identity::load_or_create(p), ConfigError, WhatContains("malformed"));
  }
  // A directory where the file should be, and a missing file for load().
  CHECK_THROWS_MATCHES(Identity::load(d.path), ConfigError, WhatContains(""));
  CHECK_THROWS_MATCHES(Identity::load(d.path / "missing.key"), ConfigError, WhatContains(""));
  // Comments and surrounding whitespace are fine.
  fs::remove(p);
  write_file(p, "# comment\n  " + std::string(64, 'a') + "  \n");
  CHECK_NOTHROW(Identity::load(p));
}

TEST_CASE("network key file: 32 raw bytes or 64 hex chars", "[net]") {
  TempDir d("gt_net_id");
  auto raw = d.path / "raw";
  std::string bytes(32, '\0');
  for (int i = 0; i < 32; ++i) bytes[i] = char(i * 7 + 1);
  write_file(raw, bytes);
  auto k1 = load_network_key(raw);
  CHECK(std::memcmp(k1.data(), bytes.data(), 32) == 0);
  auto hex = d.path / "hex";
  write_file(hex, crypto::to_hex(k1.span()) + "\n");
  auto k2 = load_network_key(hex);
  CHECK(std::memcmp(k1.data(), k2.data(), 32) == 0);
  auto bad = d.path / "bad";
  write_file(bad, std::string(31, 'x'));
  CHECK_THROWS_MATCHES(load_network_key(bad), ConfigError, WhatContains(""));
  write_file(bad, std::string(64, 'z'));
  CHECK_THROWS_MATCHES(load_network_key(bad), ConfigError, WhatContains(""));
}

TEST_CASE("allowlist file: hex keys per line, errors name the line", "[net]") {
  TempDir d("gt_net_id");
  auto p = d.path / "allow";
  Identity a = Identity::generate(), b = Identity::generate(), c = Identity::generate();
  write_file(p, "# peers\n" + a.public_key_hex() + "\n\n  " + b.public_key_hex() + "\n");
  Allowlist l = Allowlist::load(p);
  CHECK(l.size() == 2);
  CHECK(l.contains(a.public_key()));
  CHECK(l.contains(b.public_key()));
  CHECK_FALSE(l.contains(c.public_key()));
  write_file(p, a.public_key_hex() + "\nnot-a-key\n");
  CHECK_THROWS_MATCHES(Allowlist::load(p), ConfigError, WhatContains(":2:"));
}
