// Model specs, the flat parameter arena, and forward/backward of dense, convolution (im2col +
// gemm) and max-pool layers; every numeric step goes through the Backend.
#include "core/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "base/rng.hpp"

namespace gossiptrain::core {

using kernels::Act;

namespace {

constexpr std::size_t kMaxParams = std::size_t(1) << 30;        // floats in the arena
constexpr std::size_t kMaxActPerSample = std::size_t(1) << 24;  // floats of one layer's output
constexpr std::size_t kColBudget = kIm2colBudget;

// A decimal in [lo, hi] (at most 6 digits); nullopt-like -1 for anything else.
int parse_int(std::string_view tok, int lo, int hi) {
  if (tok.empty() || tok.size() > 6) return -1;
  int v = 0;
  for (char c : tok) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v >= lo && v <= hi ? v : -1;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const auto p = s.find(sep);
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s = s.substr(p + 1);
  }
}

Layer dense_layer(int in, int out, Act act) {
  Layer l;
  l.kind = LayerKind::Dense;
  l.in = in;
  l.out = out;
  l.in_c = in;
  l.out_c = out;
  l.act = act;
  return l;
}

std::vector<Layer> parse_mlp(std::string_view rest, const std::string& bad) {
  std::vector<int> dims;
  for (auto tok : split(rest, '-')) {
    const int v = parse_int(tok, 0, 999999);
    if (v < 0) throw std::invalid_argument(bad);
    if (v < 1 || v > 65536) throw std::invalid_argument(bad + " (sizes must be 1..65536)");
    dims.push_back(v);
  }
  if (dims.size() < 2) throw std::invalid_argument(bad);
  std::vector<Layer> layers;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i)
    layers.push_back(
        dense_layer(dims[i], dims[i + 1], i + 2 == dims.size() ? Act::None : Act::Relu));
  return layers;
}

// "HxWxC" -> the geometry of the input.
void parse_input(std::string_view tok, int& h, int& w, int& c, const std::string& bad) {
  const auto parts = split(tok, 'x');
  if (parts.size() != 3) throw std::invalid_argument(bad + " (the input is HxWxC, e.g. 28x28x1)");
  h = parse_int(parts[0], 1, 4096);
  w = parse_int(parts[1], 1, 4096);
  c = parse_int(parts[2], 1, 4096);
  if (h < 0 || w < 0 || c < 0) throw std::invalid_argument(bad + " (input sizes must be 1..4096)");
}

// One cnn layer token applied to the current geometry (h, w, c; flat once a dense layer came).
Layer parse_cnn_layer(std::string_view tok, int h, int w, int c, bool flat, bool last,
                      const std::string& bad) {
  const std::string what = bad + " (layer '" + std::string(tok) + "'";
  if (last) {
    const int classes = parse_int(tok, 1, 65536);
    if (classes < 0) throw std::invalid_argument(what + ": the last is the number of classes)");
    return dense_layer(h * w * c, classes, Act::None);
  }
  if (tok.empty()) throw std::invalid_argument(bad + " (empty layer)");
  Layer l;
  l.in_h = h, l.in_w = w, l.in_c = c;
  if (tok[0] == 'f') {
    const int units = parse_int(tok.substr(1), 1, 65536);
    if (units < 0) throw std::invalid_argument(what + ": fUNITS with UNITS 1..65536)");
    Layer d = dense_layer(h * w * c, units, Act::Relu);
    return d;
  }
  if (flat) throw std::invalid_argument(what + ": no convolution or pooling after a dense layer)");
  if (tok[0] == 'p') {
    const int k = parse_int(tok.substr(1), 2, 16);
    if (k < 0) throw std::invalid_argument(what + ": pP with P 2..16)");
    if (k > h || k > w)
      throw std::invalid_argument(what + ": pooling window larger than its input)");
    l.kind = LayerKind::Pool;
    l.k = l.stride = k;
    l.out_h = h / k, l.out_w = w / k, l.out_c = c;
    return l;
  }
  const auto kpos = tok.find('k');
  if (tok[0] != 'c' || kpos == std::string_view::npos)
    throw std::invalid_argument(what + ": expected cOUTkK, pP or fUNITS)");
  const int oc = parse_int(tok.substr(1, kpos - 1), 1, 4096);
  const int k = parse_int(tok.substr(kpos + 1), 1, 15);
  if (oc < 0 || k < 0) throw std::invalid_argument(what + ": cOUTkK with OUT 1..4096 and K 1..15)");
  l.kind = LayerKind::Conv;
  l.k = k, l.stride = 1, l.pad = (k - 1) / 2;
  l.out_h = kernels::conv_out(h, k, 1, l.pad);
  l.out_w = kernels::conv_out(w, k, 1, l.pad);
  l.out_c = oc;
  if (l.out_h < 1 || l.out_w < 1)
    throw std::invalid_argument(what + ": kernel larger than its input)");
  l.in = k * k * c;
  l.out = oc;
  return l;
}

std::vector<Layer> parse_cnn(std::string_view rest, const std::string& bad) {
  const auto toks = split(rest, '-');
  if (toks.size() < 2) throw std::invalid_argument(bad);
  int h = 0, w = 0, c = 0;
  parse_input(toks[0], h, w, c, bad);
  if (std::size_t(h) * w * c > kMaxActPerSample)
    throw std::invalid_argument(bad + " (input larger than 2^24 values)");
  std::vector<Layer> layers;
  bool flat = false;
  for (std::size_t i = 1; i < toks.size(); ++i) {
    Layer l = parse_cnn_layer(toks[i], h, w, c, flat, i + 1 == toks.size(), bad);
    if (l.kind == LayerKind::Dense) flat = true;
    if (l.out_size() > kMaxActPerSample)
      throw std::invalid_argument(bad + " (layer '" + std::string(toks[i]) +
                                  "' outputs more than 2^24 values per sample)");
    h = l.out_h, w = l.out_w, c = l.out_c;
    layers.push_back(l);
  }
  return layers;
}

}  // namespace

std::vector<Layer> parse_model_layers(std::string_view spec) {
  const std::string bad = "bad model '" + std::string(spec) + "': expected " + kModelSpecHelp;
  std::vector<Layer> layers;
  if (spec.substr(0, 4) == "mlp:") layers = parse_mlp(spec.substr(4), bad);
  else if (spec.substr(0, 4) == "cnn:") layers = parse_cnn(spec.substr(4), bad);
  else throw std::invalid_argument(bad);
  std::size_t n = 0;
  for (auto& l : layers) {
    if (!l.has_params()) continue;
    l.w_offset = n;
    n += std::size_t(l.in) * l.out;
    l.b_offset = n;
    n += l.out;
    if (n > kMaxParams) throw std::invalid_argument(bad + " (more than 2^30 parameters)");
  }
  return layers;
}

std::vector<int> parse_model_spec(std::string_view spec) {
  const auto layers = parse_model_layers(spec);
  std::vector<int> dims{int(layers.front().in_size())};
  for (const auto& l : layers) dims.push_back(int(l.out_size()));
  return dims;
}

std::size_t param_count(const std::vector<Layer>& layers) {
  std::size_t n = 0;
  for (const auto& l : layers)
    if (l.has_params()) n = std::max(n, l.b_offset + std::size_t(l.out));
  return n;
}

std::size_t model_param_count(std::string_view spec) {
  return param_count(parse_model_layers(spec));
}

Model::Model(kernels::Backend& be, std::string_view spec, int max_batch)
    : be_(be), spec_(spec), max_batch_(max_batch) {
  if (max_batch < 1) throw std::invalid_argument("max_batch must be >= 1");
  layers_ = parse_model_layers(spec);
  conv_ = spec.substr(0, 4) == "cnn:";
  std::uint64_t h = base::kFnvOffset;
  if (!conv_) {
    // The MLP's fingerprint is unchanged from builds before convolutions.
    h = base::fnv1a(h, "mlp", 3);
    for (const auto& l : layers_) {
      std::int32_t shape[3] = {l.in, l.out, l.act == Act::Relu ? 1 : 0};
      h = base::fnv1a(h, shape, sizeof shape);
    }
  } else {
    h = base::fnv1a(h, "cnn", 3);
    const auto& f = layers_.front();
    std::int32_t input[3] = {f.in_h, f.in_w, f.in_c};
    h = base::fnv1a(h, input, sizeof input);
    for (const auto& l : layers_) {
      std::int32_t shape[8] = {
          std::int32_t(l.kind),      l.in, l.out, l.k, l.out_h, l.out_w, l.out_c,
          l.act == Act::Relu ? 1 : 0};
      h = base::fnv1a(h, shape, sizeof shape);
    }
  }
  fingerprint_ = h;
  num_params_ = param_count(layers_);
  params_ = kernels::DeviceBuffer<float>(be, num_params_);
  grads_ = kernels::DeviceBuffer<float>(be, num_params_);
  std::size_t col = 0;
  for (const auto& l : layers_) {
    acts_.emplace_back(be, std::size_t(max_batch) * l.out_size());
    pool_idx_.emplace_back();
    if (l.kind == LayerKind::Pool)
      pool_idx_.back() =
          kernels::DeviceBuffer<std::int32_t>(be, std::size_t(max_batch) * l.out_size());
    if (l.kind == LayerKind::Conv)
      col = std::max(col, std::size_t(conv_chunk(l, max_batch)) * l.positions() * l.in);
  }
  if (col) col_ = kernels::DeviceBuffer<float>(be, col);
}

int Model::conv_chunk(const Layer& l, int batch) const {
  const std::size_t per_image = std::size_t(l.positions()) * l.in;
  std::size_t most = std::size_t(batch);
  if (chunk_limit_ > 0) most = std::min(most, std::size_t(chunk_limit_));
  return int(std::clamp<std::size_t>(kColBudget / per_image, 1, most));
}

void Model::init(std::uint64_t seed) {
  std::vector<float> host(num_params_, 0.0f);
  base::SplitMix64 rng(seed);
  for (const auto& l : layers_) {
    if (!l.has_params()) continue;
    // He-uniform for ReLU layers; 1/sqrt(in) for the output layer (as PyTorch's Linear default).
    // A convolution's fan-in is its im2col row, k * k * in_c.
    const double bound = l.act == Act::Relu ? std::sqrt(6.0 / l.in) : 1.0 / std::sqrt(double(l.in));
    for (std::size_t i = 0; i < std::size_t(l.in) * l.out; ++i)
      host[l.w_offset + i] = float((2.0 * rng.uniform() - 1.0) * bound);
  }
  be_.upload(params_.data(), host.data(), host.size() * sizeof(float));
}

void Model::conv_forward(const Layer& l, const float* in, float* out, int batch) {
  const int chunk = conv_chunk(l, batch);
  for (int b0 = 0; b0 < batch; b0 += chunk) {
    const int nb = std::min(chunk, batch - b0);
    be_.im2col(in + std::size_t(b0) * l.in_size(), nb, l.in_h, l.in_w, l.in_c, l.k, l.stride, l.pad,
               col_.data());
    // out[nb * positions, oc] = col[nb * positions, k*k*c] * W[oc, k*k*c]^T
    be_.gemm(false, true, nb * l.positions(), l.out, l.in, 1.0f, col_.data(),
             params_.data() + l.w_offset, 0.0f, out + std::size_t(b0) * l.out_size());
  }
}

const float* Model::forward(const float* x, int batch) {
  if (batch < 1 || batch > max_batch_) throw std::invalid_argument("batch out of range");
  const float* in = x;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    float* out = acts_[i].data();
    switch (l.kind) {
      case LayerKind::Dense:
        // out[B, out] = in[B, in] * W[out, in]^T
        be_.gemm(false, true, batch, l.out, l.in, 1.0f, in, params_.data() + l.w_offset, 0.0f, out);
        be_.bias_act_forward(out, params_.data() + l.b_offset, batch, l.out, l.act);
        break;
      case LayerKind::Conv:
        conv_forward(l, in, out, batch);
        be_.bias_act_forward(out, params_.data() + l.b_offset, batch * l.positions(), l.out, l.act);
        break;
      case LayerKind::Pool:
        be_.maxpool_forward(in, batch, l.in_h, l.in_w, l.in_c, l.k, out, pool_idx_[i].data());
        break;
    }
    in = out;
  }
  return in;
}

void Model::dense_backward(const Layer& l, const float* in, const float* dout, float* din,
                           int batch) {
  // dW[out, in] = delta[B, out]^T * in[B, in]
  be_.gemm(true, false, l.out, l.in, batch, 1.0f, dout, in, 0.0f, grads_.data() + l.w_offset);
  // dIn[B, in] = delta[B, out] * W[out, in]
  if (din)
    be_.gemm(false, false, batch, l.in, l.out, 1.0f, dout, params_.data() + l.w_offset, 0.0f, din);
}

void Model::conv_backward(const Layer& l, const float* in, const float* dout, float* din,
                          int batch) {
  const int chunk = conv_chunk(l, batch);
  float* dw = grads_.data() + l.w_offset;
  for (int b0 = 0; b0 < batch; b0 += chunk) {
    const int nb = std::min(chunk, batch - b0), rows = nb * l.positions();
    const float* d = dout + std::size_t(b0) * l.out_size();
    be_.im2col(in + std::size_t(b0) * l.in_size(), nb, l.in_h, l.in_w, l.in_c, l.k, l.stride, l.pad,
               col_.data());
    // dW[oc, k*k*c] (+)= delta[rows, oc]^T * col[rows, k*k*c]
    be_.gemm(true, false, l.out, l.in, rows, 1.0f, d, col_.data(), b0 == 0 ? 0.0f : 1.0f, dw);
    if (!din) continue;
    // dcol[rows, k*k*c] = delta[rows, oc] * W[oc, k*k*c], then back onto the image.
    be_.gemm(false, false, rows, l.in, l.out, 1.0f, d, params_.data() + l.w_offset, 0.0f,
             col_.data());
    be_.col2im(col_.data(), nb, l.in_h, l.in_w, l.in_c, l.k, l.stride, l.pad,
               din + std::size_t(b0) * l.in_size());
  }
}

void Model::ensure_deltas(int batch) {
  if (batch <= delta_batch_) return;
  deltas_.clear();
  for (std::size_t i = 0; i + 1 < layers_.size(); ++i)
    deltas_.emplace_back(be_, std::size_t(batch) * layers_[i].out_size());
  delta_batch_ = batch;
}

void Model::set_train_logit_offset(const std::vector<float>& offset) {
  if (offset.empty()) {
    logit_offset_ = kernels::DeviceBuffer<float>();
    return;
  }
  if (offset.size() != std::size_t(num_classes()))
    throw std::invalid_argument("logit offset: " + std::to_string(offset.size()) +
                                " values for " + std::to_string(num_classes()) + " classes");
  logit_offset_ = kernels::DeviceBuffer<float>(be_, offset.size());
  be_.upload(logit_offset_.data(), offset.data(), offset.size() * sizeof(float));
}

const float* Model::train_logits(const float* x, int batch) {
  const float* logits = forward(x, batch);
  if (logit_offset_.size() != 0)  // the last layer's output buffer: z += offset, row by row
    be_.bias_act_forward(acts_.back().data(), logit_offset_.data(), batch, num_classes(),
                         kernels::Act::None);
  return logits;
}

float Model::forward_backward(const float* x, const std::int32_t* y, int batch) {
  const float* logits = train_logits(x, batch);
  // dlogits overwrite the logits in place: the last layer's activation is no longer needed.
  const float loss = be_.softmax_xent(logits, y, acts_.back().data(), batch, num_classes());
  backward(x, batch);
  return loss;
}

void Model::forward_backward_acc(const float* x, const std::int32_t* y, int batch,
                                 double* loss_acc) {
  const float* logits = train_logits(x, batch);
  be_.softmax_xent_acc(logits, y, acts_.back().data(), batch, num_classes(), loss_acc);
  backward(x, batch);
}

void Model::backward(const float* x, int batch) {
  ensure_deltas(batch);
  const std::size_t L = layers_.size();
  float* delta = acts_[L - 1].data();  // dlogits
  for (std::size_t i = L; i-- > 0;) {
    const auto& l = layers_[i];
    const float* in = i == 0 ? x : acts_[i - 1].data();
    float* din = i == 0 ? nullptr : deltas_[i - 1].data();
    // delta: the gradient w.r.t. this layer's (activated) output.
    if (l.kind == LayerKind::Pool) {
      if (din)
        be_.maxpool_backward(delta, pool_idx_[i].data(), batch, l.in_h, l.in_w, l.in_c, l.k, din);
    } else {
      const int rows = batch * l.positions();
      // Through the activation, in place, and the bias gradient.
      be_.bias_act_backward(delta, acts_[i].data(), grads_.data() + l.b_offset, rows, l.out, l.act);
      if (l.kind == LayerKind::Dense) dense_backward(l, in, delta, din, batch);
      else conv_backward(l, in, delta, din, batch);
    }
    if (i == 0) break;
    delta = din;
  }
}

}  // namespace gossiptrain::core
