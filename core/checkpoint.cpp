// Checkpoint file: written atomically (tmp + fsync + rename + fsync of the folder) and checked
// field by field on load. Checksum: zlib's CRC-32 over every byte before it.
//
// Layout, all integers little-endian:
//   "GTCKPT01" | u32 version (1) | u32 flags (0) | u64 fingerprint | i64 step | i64 epoch |
//   i64 samples | u64 n_params | u64 n_opt | n_opt x u64 opt_len | u64 meta_len |
//   n_params x f32 | for each opt: opt_len x f32 | meta_len bytes | u32 crc32
#include "core/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace gossiptrain::core {
namespace {

// The file is written with the host's byte order; all our targets are little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes little-endian");

constexpr char kMagic[8] = {'G', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr const char* kFileName = "checkpoint.bin";
constexpr const char* kTmpName = "checkpoint.bin.tmp";
// magic, version, flags, fingerprint, step, epoch, samples, n_params, n_opt
constexpr std::size_t kFixedHeaderBytes = 8 + 4 + 4 + 8 * 6;
constexpr std::size_t kCrcBytes = 4;
constexpr std::size_t kWriteBufferBytes = 1 << 16;

std::string path_in(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " " + path + ": " + std::strerror(errno));
}

// Owns a file descriptor so every error path closes it.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Where the writer's bytes go: a file (buffered) or a byte vector.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* p, std::size_t n) = 0;
};

class FdSink final : public Sink {
 public:
  FdSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) { buf_.reserve(kWriteBufferBytes); }
  void write(const void* p, std::size_t n) override {
    auto* b = static_cast<const char*>(p);
    if (buf_.size() + n > kWriteBufferBytes) {
      flush();
      if (n >= kWriteBufferBytes) {
        write_all(b, n);
        return;
      }
    }
    buf_.insert(buf_.end(), b, b + n);
  }
  void flush() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }

 private:
  void write_all(const char* p, std::size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_errno("cannot write checkpoint", path_);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  int fd_;
  std::string path_;
  std::vector<char> buf_;
};

class VectorSink final : public Sink {
 public:
  explicit VectorSink(std::vector<std::uint8_t>& out) : out_(out) {}
  void write(const void* p, std::size_t n) override {
    auto* b = static_cast<const std::uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  std::vector<std::uint8_t>& out_;
};

// Keeps the running CRC of everything it has written.
class Writer {
 public:
  explicit Writer(Sink& sink) : sink_(sink) {}

  void bytes(const void* p, std::size_t n) {
    crc_ = crc32_update(crc_, p, n);
    sink_.write(p, n);
  }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void floats(const std::vector<float>& v) { bytes(v.data(), v.size() * sizeof(float)); }
  void finish() {
    sink_.write(&crc_, sizeof crc_);
  }

 private:
  Sink& sink_;
  std::uint32_t crc_ = 0;
};

// The one encoder of the layout, for files and for bytes sent over the network alike.
void write_checkpoint(Sink& sink, const Checkpoint& c) {
  Writer w(sink);
  w.bytes(kMagic, sizeof kMagic);
  w.pod<std::uint32_t>(kVersion);
  w.pod<std::uint32_t>(0);  // flags, reserved
  w.pod<std::uint64_t>(c.fingerprint);
  w.pod<std::int64_t>(c.step);
  w.pod<std::int64_t>(c.epoch);
  w.pod<std::int64_t>(c.samples);
  w.pod<std::uint64_t>(c.params.size());
  w.pod<std::uint64_t>(c.opt_state.size());
  for (const auto& s : c.opt_state) w.pod<std::uint64_t>(s.size());
  w.pod<std::uint64_t>(c.meta.size());
  w.floats(c.params);
  for (const auto& s : c.opt_state) w.floats(s);
  w.bytes(c.meta.data(), c.meta.size());
  w.finish();
}

// Where the reader's bytes come from: a file or a byte buffer. read() delivers exactly n bytes
// (the Reader has checked they are there).
class Source {
 public:
  virtual ~Source() = default;
  virtual void read(void* p, std::size_t n) = 0;
};

class FdSource final : public Source {
 public:
  FdSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void read(void* p, std::size_t n) override {
    auto* b = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = ::read(fd_, b, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        fail_errno("cannot read checkpoint", path_);
      }
      if (r == 0) throw CheckpointError("bad checkpoint " + path_ + ": file shrank while being read");
      b += r;
      n -= static_cast<std::size_t>(r);
    }
  }

 private:
  int fd_;
  std::string path_;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(const std::uint8_t* data) : p_(data) {}
  void read(void* p, std::size_t n) override {
    if (n) std::memcpy(p, p_, n);
    p_ += n;
  }

 private:
  const std::uint8_t* p_;
};

// Reads a checkpoint already known to be exactly `size` bytes, checking each size field against
// the bytes left before allocating anything for it.
class Reader {
 public:
  Reader(Source& src, std::string what, std::uint64_t size)
      : src_(src), what_(std::move(what)), left_(size) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw CheckpointError("bad checkpoint " + what_ + ": " + why);
  }
  void bytes(void* p, std::size_t n, const char* field) {
    if (n > left_) {
      fail(std::string("truncated (") + field + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(left_) + " left)");
    }
    src_.read(p, n);
    crc_ = crc32_update(crc_, p, n);
    left_ -= n;
  }
  template <typename T>
  T pod(const char* field) {
    T v;
    bytes(&v, sizeof v, field);
    return v;
  }
  // A count of elements of elem_bytes each that must fit in what is left after `reserve` bytes.
  std::size_t count(const char* field, std::size_t elem_bytes, std::uint64_t reserve) {
    auto n = pod<std::uint64_t>(field);
    std::uint64_t room = left_ > reserve ? left_ - reserve : 0;
    if (n > room / elem_bytes) {
      fail(std::string(field) + " is " + std::to_string(n) + ", more than the " +
           std::to_string(room) + " bytes left hold (truncated or corrupted)");
    }
    return static_cast<std::size_t>(n);
  }
  std::uint64_t left() const { return left_; }
  std::uint32_t crc() const { return crc_; }

 private:
  Source& src_;
  std::string what_;
  std::uint64_t left_;
  std::uint32_t crc_ = 0;
};

// Magic, version and flags; then the counters and sizes, each checked before its allocation.
void read_header(Reader& r, Checkpoint& c) {
  if (r.left() < kFixedHeaderBytes + 8 + kCrcBytes) {
    r.fail("truncated (" + std::to_string(r.left()) + " bytes, shorter than the " +
           std::to_string(kFixedHeaderBytes + 8 + kCrcBytes) + "-byte minimum)");
  }
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) r.fail("bad magic (not a GTCKPT01 file)");
  auto version = r.pod<std::uint32_t>("version");
  if (version != kVersion) {
    r.fail("unsupported version " + std::to_string(version) + " (this build reads " +
           std::to_string(kVersion) + ")");
  }
  auto flags = r.pod<std::uint32_t>("flags");
  if (flags != 0) r.fail("unknown flags " + std::to_string(flags));
  c.fingerprint = r.pod<std::uint64_t>("fingerprint");
  c.step = r.pod<std::int64_t>("step");
  c.epoch = r.pod<std::int64_t>("epoch");
  c.samples = r.pod<std::int64_t>("samples");
}

// The one decoder of the layout, for files and received bytes alike.
Checkpoint read_checkpoint(Reader& r) {
  Checkpoint c;
  read_header(r, c);
  // Every count is checked against the bytes still unread (less the size fields and checksum
  // that must follow), so a corrupt count can never trigger a huge allocation.
  std::size_t n_params = r.count("parameter count", sizeof(float), 8 + kCrcBytes);
  std::size_t n_opt = r.count("optimizer state count", 8, 8 + kCrcBytes);
  std::vector<std::uint64_t> opt_len(n_opt);
  std::uint64_t payload = std::uint64_t{n_params} * sizeof(float);
  for (std::size_t i = 0; i < n_opt; ++i) {
    std::uint64_t reserve = (n_opt - 1 - i) * 8 + 8 + kCrcBytes;
    opt_len[i] = r.count("optimizer state length", sizeof(float), reserve);
    payload += opt_len[i] * sizeof(float);  // each <= the total size, so no overflow
  }
  std::size_t meta_len = r.count("meta length", 1, kCrcBytes);
  payload += meta_len;
  std::uint64_t expected = payload + kCrcBytes;
  if (r.left() != expected) {
    r.fail(std::string(r.left() < expected ? "truncated" : "trailing bytes") +
           ": the size fields need " + std::to_string(expected) + " more bytes, there are " +
           std::to_string(r.left()));
  }
  c.params.resize(n_params);
  r.bytes(c.params.data(), n_params * sizeof(float), "parameters");
  c.opt_state.resize(n_opt);
  for (std::size_t i = 0; i < n_opt; ++i) {
    c.opt_state[i].resize(static_cast<std::size_t>(opt_len[i]));
    r.bytes(c.opt_state[i].data(), c.opt_state[i].size() * sizeof(float), "optimizer state");
  }
  c.meta.resize(meta_len);
  r.bytes(c.meta.data(), meta_len, "meta");
  std::uint32_t computed = r.crc();
  auto stored = r.pod<std::uint32_t>("checksum");
  if (stored != computed) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "stored %08x, computed %08x", stored, computed);
    r.fail(std::string("checksum mismatch (") + buf + "): corrupted");
  }
  return c;
}

}  // namespace

void save_checkpoint(const std::string& dir, const Checkpoint& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CheckpointError("cannot create checkpoint folder " + dir + ": " + ec.message());
  std::string tmp = path_in(dir, kTmpName);
  std::string final_path = path_in(dir, kFileName);
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_errno("cannot create", tmp);
    try {
      FdSink sink(fd.get(), tmp);
      write_checkpoint(sink, c);
      sink.flush();
      if (::fsync(fd.get()) != 0) fail_errno("cannot fsync", tmp);
      if (::close(fd.release()) != 0) fail_errno("cannot close", tmp);
    } catch (...) {
      ::unlink(tmp.c_str());  // best effort: a partial tmp is never read, but do not leave it
      throw;
    }
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_errno("cannot rename " + tmp + " to", final_path);
  }
  // Without this the rename itself may be lost on a crash, leaving the previous checkpoint.
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) fail_errno("cannot open checkpoint folder", dir);
  if (::fsync(dfd.get()) != 0) fail_errno("cannot fsync checkpoint folder", dir);
}

Checkpoint load_checkpoint(const std::string& dir) {
  std::string path = path_in(dir, kFileName);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      throw CheckpointError("no checkpoint at " + path + ": " + std::strerror(errno));
    }
    fail_errno("cannot open checkpoint", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno("cannot stat checkpoint", path);
  if (!S_ISREG(st.st_mode)) throw CheckpointError("bad checkpoint " + path + ": not a regular file");
  FdSource src(fd.get(), path);
  Reader r(src, path, static_cast<std::uint64_t>(st.st_size));
  return read_checkpoint(r);
}

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t n) {
  auto* b = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {  // crc32 takes a uInt length
    const uInt part = static_cast<uInt>(std::min<std::size_t>(n, std::numeric_limits<uInt>::max()));
    c = crc32(c, b, part);
    b += part;
    n -= part;
  }
  return static_cast<std::uint32_t>(c);
}

std::uint64_t encoded_checkpoint_bytes(std::uint64_t n_params, std::uint64_t n_opt,
                                       std::uint64_t opt_values, std::uint64_t meta_bytes) {
  return kFixedHeaderBytes + 8 * n_opt + 8 + 4 * (n_params + opt_values) + meta_bytes + kCrcBytes;
}

std::vector<std::uint8_t> encode_checkpoint(const Checkpoint& c) {
  std::uint64_t opt_values = 0;
  for (const auto& s : c.opt_state) opt_values += s.size();
  std::vector<std::uint8_t> out;
  out.reserve(encoded_checkpoint_bytes(c.params.size(), c.opt_state.size(), opt_values,
                                       c.meta.size()));
  VectorSink sink(out);
  write_checkpoint(sink, c);
  return out;
}

Checkpoint decode_checkpoint(const std::uint8_t* data, std::size_t size, const std::string& what) {
  MemorySource src(data);
  Reader r(src, what, size);
  return read_checkpoint(r);
}

bool checkpoint_exists(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path_in(dir, kFileName), ec);
}

std::string checkpoint_run_id(const nlohmann::json& meta) {
  if (meta.is_object() && meta.contains("run_id") && meta["run_id"].is_string())
    return meta["run_id"].get<std::string>();
  return "";
}

std::string resumed_run_id(const std::string& where, const std::string& theirs,
                           const std::string& ours, const std::string& id_option,
                           const std::string& dir_option) {
  if (!theirs.empty() && !ours.empty() && theirs != ours)
    throw CheckpointRunError(where + " belongs to run '" + theirs + "', not to this run '" + ours +
                             "': to continue run '" + theirs + "' pass " + id_option + theirs +
                             "; to start run '" + ours + "' fresh use an empty " + dir_option +
                             " (or remove that folder)");
  return ours.empty() ? theirs : ours;
}

}  // namespace gossiptrain::core
