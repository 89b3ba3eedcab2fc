// safetensors writer/reader and the arena -> PyTorch layout (see safetensors.hpp).
#include "core/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace gossiptrain::core {

std::vector<NamedTensor> model_tensors(const std::vector<Layer>& layers, const float* params,
                                       std::size_t n_params) {
  std::vector<NamedTensor> out;
  int n_fc = 0, n_conv = 0;
  // The map the previous layer made: a dense layer records its input flattened, so the geometry
  // to permute by is the one before it.
  int prev_h = 1, prev_w = 1, prev_c = 0;
  for (const Layer& l : layers) {
    const int ph = prev_h, pw = prev_w, pc = prev_c;
    prev_h = l.out_h;
    prev_w = l.out_w;
    prev_c = l.out_c;
    if (!l.has_params()) continue;
    if (l.w_offset + std::size_t(l.out) * l.in > n_params || l.b_offset + l.out > n_params)
      throw SafetensorsError("model_tensors: the layer layout does not fit the parameters");
    const float* w = params + l.w_offset;
    NamedTensor wt, bt;
    bt.shape = {l.out};
    bt.data.assign(params + l.b_offset, params + l.b_offset + l.out);
    if (l.kind == LayerKind::Conv) {
      const std::string name = "conv" + std::to_string(n_conv++);
      wt.name = name + ".weight";
      bt.name = name + ".bias";
      const int k = l.k, c = l.in_c;
      wt.shape = {l.out, c, k, k};
      wt.data.resize(std::size_t(l.out) * l.in);
      for (int o = 0; o < l.out; ++o)
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx)
            for (int ci = 0; ci < c; ++ci)
              wt.data[((std::size_t(o) * c + ci) * k + ky) * k + kx] =
                  w[std::size_t(o) * l.in + (std::size_t(ky) * k + kx) * c + ci];
    } else {
      const std::string name = "fc" + std::to_string(n_fc++);
      wt.name = name + ".weight";
      bt.name = name + ".bias";
      wt.shape = {l.out, l.in};
      wt.data.resize(std::size_t(l.out) * l.in);
      const int h = ph, wd = pw, c = pc;
      if (c > 1 && std::size_t(h) * wd > 1 && std::size_t(h) * wd * c == std::size_t(l.in)) {
        // NHWC flattening (y, x, c) -> NCHW flattening (c, y, x).
        for (int o = 0; o < l.out; ++o)
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < wd; ++x)
              for (int ci = 0; ci < c; ++ci)
                wt.data[std::size_t(o) * l.in + (std::size_t(ci) * h + y) * wd + x] =
                    w[std::size_t(o) * l.in + (std::size_t(y) * wd + x) * c + ci];
      } else {
        wt.data.assign(w, w + std::size_t(l.out) * l.in);
      }
    }
    out.push_back(std::move(wt));
    out.push_back(std::move(bt));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    std::size_t n = 1;
    for (auto d : t.shape) n *= std::size_t(d);
    if (n != t.data.size())
      throw SafetensorsError("safetensors: tensor " + t.name + " has a shape that is not its size");
    const std::uint64_t bytes = std::uint64_t(n) * 4;
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  // The data starts 8-byte aligned, as the reference writer pads it.
  while ((8 + h.size()) % 8 != 0) h += ' ';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw SafetensorsError("cannot write " + tmp + ": " + std::strerror(errno));
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = std::uint8_t(std::uint64_t(h.size()) >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), std::streamsize(h.size()));
    // The host is little-endian (x86-64, aarch64), as the format is.
    for (const NamedTensor& t : tensors)
      f.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * 4));
    f.flush();
    if (!f) throw SafetensorsError("cannot write " + tmp + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw SafetensorsError("cannot move " + tmp + " to " + path + ": " + ec.message());
}

std::vector<NamedTensor> read_safetensors(const std::string& path,
                                          std::map<std::string, std::string>* metadata) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SafetensorsError("cannot open " + path);
  f.seekg(0, std::ios::end);
  const std::uint64_t size = std::uint64_t(f.tellg());
  f.seekg(0);
  std::uint8_t len[8];
  if (size < 8 || !f.read(reinterpret_cast<char*>(len), 8))
    throw SafetensorsError(path + ": shorter than its header length");
  std::uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= std::uint64_t(len[i]) << (8 * i);
  if (hlen > size - 8 || hlen > (std::uint64_t(100) << 20))
    throw SafetensorsError(path + ": header length out of bounds");
  std::string h(hlen, '\0');
  f.read(h.data(), std::streamsize(hlen));
  const auto header = nlohmann::json::parse(h, nullptr, false);
  if (!header.is_object()) throw SafetensorsError(path + ": header is not a JSON object");
  const std::uint64_t data_size = size - 8 - hlen;
  std::vector<std::pair<std::uint64_t, NamedTensor>> found;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (metadata) *metadata = it.value().get<std::map<std::string, std::string>>();
      continue;
    }
    const auto& v = it.value();
    if (v.value("dtype", "") != "F32")
      throw SafetensorsError(path + ": " + it.key() + " is not F32");
    NamedTensor t;
    t.name = it.key();
    t.shape = v.at("shape").get<std::vector<std::int64_t>>();
    const auto off = v.at("data_offsets").get<std::vector<std::uint64_t>>();
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= std::uint64_t(d);
    if (off.size() != 2 || off[0] > off[1] || off[1] > data_size || off[1] - off[0] != n * 4)
      throw SafetensorsError(path + ": " + t.name + " has bad data_offsets");
    t.data.resize(n);
    f.seekg(std::streamoff(8 + hlen + off[0]));
    f.read(reinterpret_cast<char*>(t.data.data()), std::streamsize(n * 4));
    if (!f) throw SafetensorsError(path + ": truncated");
    found.emplace_back(off[0], std::move(t));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<NamedTensor> out;
  for (auto& [o, t] : found) out.push_back(std::move(t));
  return out;
}

}  // namespace gossiptrain::core
