// NumPy .npy reader: a small parser for the header's Python dict literal, size checks against the
// file, and row-by-row reading of inputs (float32, uint8) and whole reading of integer labels.
#include "core/dataset_npy.hpp"

#include "base/bytes.hpp"
#include "core/dataset.hpp"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

namespace gossiptrain::core::npy {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes little-endian");

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// numpy writes headers of a few hundred bytes; anything near this bound is not a real file.
constexpr std::uint64_t kMaxHeaderBytes = 1 << 20;
constexpr std::uint64_t kMaxDataBytes = std::uint64_t{1} << 36;
constexpr int kMaxDims = 8;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

using File = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

File open(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  return f;
}

void read_exact(std::FILE* f, const std::string& path, void* dst, std::size_t n, const char* what) {
  const std::size_t got = std::fread(dst, 1, n, f);
  if (got != n) {
    if (std::ferror(f)) fail(path, std::string("read error: ") + std::strerror(errno));
    fail(path, std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, only " +
                   std::to_string(got) + " present");
  }
}

// The header's dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class DictParser {
 public:
  DictParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!eat('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        h.descr = quoted(), have_descr = true;
      } else if (key == "fortran_order") {
        if (boolean()) fail(path_, "fortran_order is True: only C-order arrays are read");
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple(), have_shape = true;
      } else {
        bad("unexpected key '" + key + "'");
      }
      if (!eat(',')) {
        expect('}');
        break;
      }
    }
    skip_ws();
    if (i_ < s_.size()) bad("text after the closing '}'");
    if (!have_descr || !have_order || !have_shape)
      bad("missing key '" +
          std::string(!have_descr   ? "descr"
                      : !have_order ? "fortran_order"
                                    : "shape") +
          "'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(path_, "malformed .npy header (" + what + "): " + s_.substr(0, 200));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad(std::string("expected '") + c + "'");
  }
  std::string quoted() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a quoted string");
    const char q = s_[i_++];
    const std::size_t end = s_.find(q, i_);
    if (end == std::string::npos) bad("unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_ws();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (s_.compare(i_, std::strlen(word), word) == 0) return i_ += std::strlen(word), value;
    }
    bad("expected True or False");
  }
  std::uint64_t integer() {
    skip_ws();
    std::uint64_t v = 0;
    const std::size_t start = i_;
    for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_) {
      v = v * 10 + std::uint64_t(s_[i_] - '0');
      if (v > kMaxDataBytes) fail(path_, "a dimension of the shape is too large; refusing to read");
    }
    if (i_ == start) bad("expected a dimension");
    return v;
  }
  std::vector<std::uint64_t> tuple() {
    std::vector<std::uint64_t> dims;
    expect('(');
    while (!eat(')')) {
      dims.push_back(integer());
      if (dims.size() > kMaxDims) bad("more than " + std::to_string(kMaxDims) + " dimensions");
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }

  const std::string& s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

// Splits descr ("<f4", "|u1", ...) into kind and size; refuses byte orders other than little.
void parse_descr(const std::string& path, Header& h) {
  const std::string& d = h.descr;
  if (d.size() < 3 || std::string("<>|=").find(d[0]) == std::string::npos)
    fail(path, "unsupported dtype '" + d + "'");
  int size = 0;
  for (std::size_t i = 2; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9' || size > 64) fail(path, "unsupported dtype '" + d + "'");
    size = size * 10 + (d[i] - '0');
  }
  if (d[0] == '>' && size > 1)
    fail(path, "big-endian dtype '" + d + "' is not read; save it as little-endian");
  if (d[0] == '=') fail(path, "dtype '" + d + "' has no explicit byte order");
  if (std::string("fiu").find(d[1]) == std::string::npos || size < 1 || size > 8)
    fail(path, "unsupported dtype '" + d + "'");
  h.kind = d[1];
  h.item_size = size;
}

// The element count, bounded one factor at a time, then the file size against offset + bytes.
void check_size(const std::string& path, Header& h) {
  std::uint64_t count = 1;
  for (auto dim : h.shape) {
    if (dim != 0 && count > kMaxDataBytes / h.item_size / dim)
      fail(path, "the shape describes more than " + std::to_string(kMaxDataBytes) +
                     " bytes; refusing to read");
    count *= dim;
  }
  h.count = count;
  std::error_code ec;
  const std::uint64_t file = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot stat: " + ec.message());
  const std::uint64_t need = count * std::uint64_t(h.item_size);
  const std::uint64_t have = file - h.data_offset;
  if (have < need)
    fail(path, "truncated: the shape needs " + std::to_string(need) + " data bytes, only " +
                   std::to_string(have) + " present");
  if (have > need)
    fail(path, "trailing bytes: " + std::to_string(have - need) + " bytes after the " +
                   std::to_string(need) + " data bytes the shape describes");
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

}  // namespace

Header read_header(const std::string& path) {
  File f = open(path);
  unsigned char pre[10];
  read_exact(f.get(), path, pre, sizeof pre, "the .npy preamble");
  if (std::memcmp(pre, kMagic, sizeof kMagic) != 0)
    fail(path, "not a .npy file (the magic string \\x93NUMPY is missing)");
  const int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(path, "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
  std::uint64_t hlen = base::get_u16(pre + 8);
  std::uint64_t offset = 10;
  if (major >= 2) {
    unsigned char more[2];
    read_exact(f.get(), path, more, sizeof more, "the .npy header length");
    hlen |= std::uint64_t{base::get_u16(more)} << 16;
    offset = 12;
  }
  if (hlen > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(hlen) + " is implausible; refusing to read");
  std::string text(hlen, '\0');
  read_exact(f.get(), path, text.data(), text.size(), "the .npy header");
  Header h = DictParser(text, path).parse();
  h.data_offset = offset + hlen;
  parse_descr(path, h);
  check_size(path, h);
  return h;
}

std::uint64_t row_features(const std::string& path, const Header& h) {
  if (!((h.kind == 'f' && h.item_size == 4) || (h.kind == 'u' && h.item_size == 1)))
    fail(path, "inputs of dtype '" + h.descr + "' are not read (float32 '<f4' or uint8 '|u1')");
  if (h.shape.size() < 2)
    fail(path, "inputs must have at least 2 dimensions (N x features), found shape " +
                   shape_text(h.shape));
  std::uint64_t f = 1;
  for (std::size_t i = 1; i < h.shape.size(); ++i) f *= h.shape[i];
  if (f == 0 || f > std::uint64_t(std::numeric_limits<int>::max()))
    fail(path,
         "shape " + shape_text(h.shape) + " gives " + std::to_string(f) + " features per row");
  return f;
}

namespace {

std::int64_t decode_int(const unsigned char* p, const Header& h) {
  const std::uint64_t u = base::get_le(p, h.item_size);
  if (h.kind == 'u' || h.item_size == 8) return static_cast<std::int64_t>(u);
  const std::uint64_t sign = std::uint64_t{1} << (8 * h.item_size - 1);
  return static_cast<std::int64_t>((u ^ sign) - sign);  // sign-extends
}

}  // namespace

std::vector<std::int32_t> read_labels(const std::string& path, int max_classes) {
  const Header h = read_header(path);
  if (h.kind == 'f') fail(path, "labels must be integers, found dtype '" + h.descr + "'");
  if (!(h.shape.size() == 1 || (h.shape.size() == 2 && h.shape[1] == 1)))
    fail(path, "labels must have shape (N,) or (N, 1), found " + shape_text(h.shape));
  std::vector<unsigned char> raw(static_cast<std::size_t>(h.count * h.item_size));
  File f = open(path);
  if (std::fseek(f.get(), static_cast<long>(h.data_offset), SEEK_SET) != 0)
    fail(path, std::string("cannot seek: ") + std::strerror(errno));
  read_exact(f.get(), path, raw.data(), raw.size(), "the labels");
  std::vector<std::int32_t> y(static_cast<std::size_t>(h.count));
  for (std::size_t i = 0; i < y.size(); ++i) {
    const std::int64_t v = decode_int(&raw[i * h.item_size], h);
    if (v < 0 || v >= max_classes)
      fail(path, "label " + std::to_string(v) + " at index " + std::to_string(i) +
                     " is out of range 0.." + std::to_string(max_classes - 1));
    y[i] = static_cast<std::int32_t>(v);
  }
  return y;
}

void stream_rows(const std::string& path, const ShapeFn& on_shape,
                 const std::function<void(std::size_t, const float*)>& on_row) {
  const Header h = read_header(path);
  const std::uint64_t features = row_features(path, h);
  on_shape(h.shape[0], features, std::vector<std::uint64_t>(h.shape.begin() + 1, h.shape.end()));
  const bool bytes = h.kind == 'u';
  std::vector<unsigned char> raw(static_cast<std::size_t>(features * h.item_size));
  std::vector<float> row(static_cast<std::size_t>(features));
  File f = open(path);
  if (std::fseek(f.get(), static_cast<long>(h.data_offset), SEEK_SET) != 0)
    fail(path, std::string("cannot seek: ") + std::strerror(errno));
  for (std::uint64_t r = 0; r < h.shape[0]; ++r) {
    read_exact(f.get(), path, raw.data(), raw.size(), "a row");
    if (bytes) {
      for (std::size_t j = 0; j < row.size(); ++j) row[j] = static_cast<float>(raw[j]) / 255.0f;
    } else {
      std::memcpy(row.data(), raw.data(), raw.size());
      for (std::size_t j = 0; j < row.size(); ++j)
        if (!std::isfinite(row[j]))
          fail(path,
               "non-finite value at row " + std::to_string(r) + ", column " + std::to_string(j));
    }
    on_row(static_cast<std::size_t>(r), row.data());
  }
}

}  // namespace gossiptrain::core::npy
