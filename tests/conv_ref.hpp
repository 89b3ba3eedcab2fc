// Naive references of the convolution and pooling ops (NHWC), shared by the CPU and CUDA tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"

namespace gossiptrain::kernels::test {

struct ConvGeom {
  int n, h, w, c, k, stride, pad;
  int oh() const { return conv_out(h, k, stride, pad); }
  int ow() const { return conv_out(w, k, stride, pad); }
  std::size_t image() const { return std::size_t(n) * h * w * c; }
  std::size_t cols() const { return std::size_t(n) * oh() * ow() * k * k * c; }
};

// Walks the im2col layout, col[(b, oy, ox), (ky, kx, ch)] in order, calling fn(i, p) for every
// col entry i that reads a pixel inside the image, p being that pixel's NHWC index (padding
// entries are skipped).
template <class Fn>
void for_each_col_pixel(const ConvGeom& g, Fn fn) {
  std::size_t i = 0;
  for (int b = 0; b < g.n; ++b)
    for (int oy = 0; oy < g.oh(); ++oy)
      for (int ox = 0; ox < g.ow(); ++ox)
        for (int ky = 0; ky < g.k; ++ky)
          for (int kx = 0; kx < g.k; ++kx)
            for (int ch = 0; ch < g.c; ++ch, ++i) {
              const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
              if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                fn(i, ((std::size_t(b) * g.h + iy) * g.w + ix) * g.c + ch);
            }
}

// The value im2col puts at col[(b, oy, ox), (ky, kx, ch)], straight from the definition.
inline std::vector<float> im2col_ref(const std::vector<float>& x, const ConvGeom& g) {
  std::vector<float> col(g.cols(), 0.0f);
  for_each_col_pixel(g, [&](std::size_t i, std::size_t p) { col[i] = x[p]; });
  return col;
}

// The adjoint: every col entry added back onto the pixel it came from (double accumulation).
inline std::vector<float> col2im_ref(const std::vector<float>& col, const ConvGeom& g) {
  std::vector<double> acc(g.image(), 0.0);
  for_each_col_pixel(g, [&](std::size_t i, std::size_t p) { acc[p] += col[i]; });
  return std::vector<float>(acc.begin(), acc.end());
}

// Direct convolution y[b, oy, ox, o] = sum W[o, (ky, kx, ch)] * x[...] (no bias), in double.
inline std::vector<float> conv_ref(const std::vector<float>& x, const std::vector<float>& W, int oc,
                                   const ConvGeom& g) {
  std::vector<float> y(std::size_t(g.n) * g.oh() * g.ow() * oc);
  std::size_t i = 0;
  for (int b = 0; b < g.n; ++b)
    for (int oy = 0; oy < g.oh(); ++oy)
      for (int ox = 0; ox < g.ow(); ++ox)
        for (int o = 0; o < oc; ++o, ++i) {
          double s = 0.0;
          for (int ky = 0; ky < g.k; ++ky)
            for (int kx = 0; kx < g.k; ++kx)
              for (int ch = 0; ch < g.c; ++ch) {
                const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                s += double(W[((std::size_t(o) * g.k + ky) * g.k + kx) * g.c + ch]) *
                     x[((std::size_t(b) * g.h + iy) * g.w + ix) * g.c + ch];
              }
          y[i] = float(s);
        }
  return y;
}

// Max-pool k x k, stride k: the max and where it came from (first wins ties).
inline void maxpool_ref(const std::vector<float>& x, int n, int h, int w, int c, int k,
                        std::vector<float>& y, std::vector<std::int32_t>& idx) {
  const int oh = h / k, ow = w / k;
  y.assign(std::size_t(n) * oh * ow * c, 0.0f);
  idx.assign(y.size(), -1);
  std::size_t o = 0;
  for (int b = 0; b < n; ++b)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox)
        for (int ch = 0; ch < c; ++ch, ++o)
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) {
              const int i = ((oy * k + ky) * w + ox * k + kx) * c + ch;
              const float v = x[std::size_t(b) * h * w * c + i];
              if (idx[o] < 0 || v > y[o]) {
                y[o] = v;
                idx[o] = i;
              }
            }
}

}  // namespace gossiptrain::kernels::test
