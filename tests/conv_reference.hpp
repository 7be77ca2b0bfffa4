// conv_reference.hpp: plain float64 references of the convolution kernel
// group (conv_kernels.hpp), written as the definitions read: nested loops,
// double accumulation, no library. Besides each value, a reference keeps
// what the tests need to bound a float kernel's rounding error: the sum of
// the absolute values of the terms that make it ("magnitude") and how many
// terms there were.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "pipetrain/tensor/conv_kernels.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::test {

// The cases the CPU kernel tests (test_conv_layers) and the GPU ones
// (test_cuda_conv) share: a convolution's shapes and geometry (each file
// lists its own), and the normalisations, with their eps.
struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dGeometry g;
  bool bias;
};

struct NormCase {
  const char* name;
  Shape x;
  int64_t groups;  // 0: batch normalisation
};

inline const NormCase kNormCases[] = {
    {"group norm, 2 groups", {2, 4, 3, 5}, 2},
    {"layer norm over (C, H, W)", {2, 4, 3, 5}, 1},
    {"batch norm", {3, 4, 3, 5}, 0},
};

inline constexpr float kEps = 1e-5f;

// Values of an (N, C, H, W) or any-shaped result, element by element.
struct Ref {
  Shape shape;
  std::vector<double> value;      // the exact (double) result
  std::vector<double> magnitude;  // sum of |term| over the terms that make it
  std::vector<int64_t> terms;     // how many terms
  explicit Ref(const Shape& s)
      : shape(s), value(static_cast<size_t>(shape_numel(s)), 0.0), magnitude(value),
        terms(value.size(), 0) {}
  void add(int64_t i, double term) {
    value[static_cast<size_t>(i)] += term;
    magnitude[static_cast<size_t>(i)] += std::fabs(term);
    terms[static_cast<size_t>(i)] += 1;
  }
};

inline std::vector<double> to_double(const Tensor& t) {
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}

struct Geometry4 {
  int64_t N, C, H, W;
};
inline Geometry4 dims4(const Shape& s) { return {s[0], s[1], s[2], s[3]}; }
inline int64_t at4(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * s[1] + c) * s[2] + h) * s[3] + w;
}

// Visits every (n, co, oh, ow, ci, kh, kw) of a convolution whose input
// pixel (ih, iw) lies inside the image: f(y index, x index, w index).
template <class F>
void for_each_tap(const Shape& x, const Shape& w, const Shape& y, int64_t stride, int64_t pad,
                  F&& f) {
  const int64_t K = w[2];
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t co = 0; co < y[1]; ++co)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow)
          for (int64_t ci = 0; ci < x[1]; ++ci)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
                f(at4(y, n, co, oh, ow), at4(x, n, ci, ih, iw), at4(w, co, ci, kh, kw));
              }
}

inline Ref conv_forward_ref(const Tensor& x, const Tensor& w, const Tensor* bias,
                            const Shape& y_shape, int64_t stride, int64_t pad) {
  Ref y(y_shape);
  for_each_tap(x.shape(), w.shape(), y_shape, stride, pad, [&](int64_t yi, int64_t xi, int64_t wi) {
    y.add(yi, static_cast<double>(x.f32()[xi]) * w.f32()[wi]);
  });
  if (bias)
    for (int64_t i = 0; i < shape_numel(y_shape); ++i)
      y.add(i, bias->f32()[(i / (y_shape[2] * y_shape[3])) % y_shape[1]]);
  return y;
}

inline Ref conv_backward_data_ref(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                  int64_t stride, int64_t pad) {
  Ref dx(x_shape);
  for_each_tap(x_shape, w.shape(), dy.shape(), stride, pad, [&](int64_t yi, int64_t xi, int64_t wi) {
    dx.add(xi, static_cast<double>(dy.f32()[yi]) * w.f32()[wi]);
  });
  return dx;
}

// The weight gradient (Cout, Cin, K, K) and, in `dbias`, the bias gradient (Cout).
inline Ref conv_backward_weights_ref(const Tensor& x, const Tensor& dy, const Shape& w_shape,
                                     int64_t stride, int64_t pad, Ref* dbias) {
  Ref dw(w_shape);
  for_each_tap(x.shape(), w_shape, dy.shape(), stride, pad, [&](int64_t yi, int64_t xi, int64_t wi) {
    dw.add(wi, static_cast<double>(dy.f32()[yi]) * x.f32()[xi]);
  });
  if (dbias) {
    const Shape& s = dy.shape();
    for (int64_t i = 0; i < dy.numel(); ++i) dbias->add((i / (s[2] * s[3])) % s[1], dy.f32()[i]);
  }
  return dw;
}

// Pooling windows: f(y index, x index) for every in-image element of each
// window, in window order.
template <class F>
void for_each_window_element(const Shape& x, const Shape& y, int64_t K, int64_t stride,
                             int64_t pad, F&& f) {
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t c = 0; c < y[1]; ++c)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow)
          for (int64_t kh = 0; kh < K; ++kh)
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
              if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
              f(at4(y, n, c, oh, ow), at4(x, n, c, ih, iw));
            }
}

// Max pooling: the maxima, and `argmax` (y's size): where each one is in x.
inline std::vector<double> max_pool_ref(const Tensor& x, const Shape& y_shape, int64_t K,
                                        int64_t stride, int64_t pad,
                                        std::vector<int64_t>& argmax) {
  std::vector<double> y(static_cast<size_t>(shape_numel(y_shape)), -INFINITY);
  argmax.assign(y.size(), -1);
  for_each_window_element(x.shape(), y_shape, K, stride, pad, [&](int64_t yi, int64_t xi) {
    if (x.f32()[xi] > y[static_cast<size_t>(yi)]) {
      y[static_cast<size_t>(yi)] = x.f32()[xi];
      argmax[static_cast<size_t>(yi)] = xi;
    }
  });
  return y;
}

// Average pooling over the in-image elements of each window.
inline Ref avg_pool_ref(const Tensor& x, const Shape& y_shape, int64_t K, int64_t stride,
                        int64_t pad) {
  Ref sum(y_shape);
  for_each_window_element(x.shape(), y_shape, K, stride, pad,
                          [&](int64_t yi, int64_t xi) { sum.add(yi, x.f32()[xi]); });
  for (size_t i = 0; i < sum.value.size(); ++i) {
    sum.value[i] /= static_cast<double>(sum.terms[i]);
    sum.magnitude[i] /= static_cast<double>(sum.terms[i]);
  }
  return sum;
}

inline Ref avg_pool_backward_ref(const Tensor& dy, const Shape& x_shape, int64_t K,
                                 int64_t stride, int64_t pad) {
  std::vector<int64_t> count(static_cast<size_t>(dy.numel()), 0);
  for_each_window_element(x_shape, dy.shape(), K, stride, pad,
                          [&](int64_t yi, int64_t) { ++count[static_cast<size_t>(yi)]; });
  Ref dx(x_shape);
  for_each_window_element(x_shape, dy.shape(), K, stride, pad, [&](int64_t yi, int64_t xi) {
    dx.add(xi, dy.f32()[yi] / static_cast<double>(count[static_cast<size_t>(yi)]));
  });
  return dx;
}

// ---- normalisation: written per definition, not as the kernel's sets ----

// Which statistic an element of x (N, C, H, W) uses: group normalisation
// (groups > 0): (n, c / (C / groups)) as n * groups + group; batch
// normalisation (groups == 0): the channel c.
inline int64_t stat_of(const Shape& s, int64_t i, int64_t groups) {
  const int64_t c = (i / (s[2] * s[3])) % s[1], n = i / (s[1] * s[2] * s[3]);
  return groups > 0 ? n * groups + c / (s[1] / groups) : c;
}
inline int64_t channel_of(const Shape& s, int64_t i) { return (i / (s[2] * s[3])) % s[1]; }
inline int64_t stat_count(const Shape& s, int64_t groups) {
  return groups > 0 ? s[0] * groups : s[1];
}

struct NormForwardRef {
  std::vector<double> y, y_magnitude, mean, rstd, var;
};

inline NormForwardRef norm_forward_ref(const std::vector<double>& x, const Shape& s,
                                       const std::vector<double>& gamma,
                                       const std::vector<double>& beta, double eps,
                                       int64_t groups) {
  const size_t stats = static_cast<size_t>(stat_count(s, groups));
  std::vector<double> sum(stats, 0.0), count(stats, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    sum[static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups))] += x[i];
    count[static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups))] += 1.0;
  }
  NormForwardRef r;
  r.mean.resize(stats);
  for (size_t k = 0; k < stats; ++k) r.mean[k] = sum[k] / count[k];
  std::vector<double> sq(stats, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t k = static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups));
    sq[k] += (x[i] - r.mean[k]) * (x[i] - r.mean[k]);
  }
  r.var.resize(stats);
  r.rstd.resize(stats);
  for (size_t k = 0; k < stats; ++k) {
    r.var[k] = sq[k] / count[k];
    r.rstd[k] = 1.0 / std::sqrt(r.var[k] + eps);
  }
  r.y.resize(x.size());
  r.y_magnitude.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t k = static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups));
    const size_t c = static_cast<size_t>(channel_of(s, static_cast<int64_t>(i)));
    r.y[i] = (x[i] - r.mean[k]) * r.rstd[k] * gamma[c] + beta[c];
    r.y_magnitude[i] =
        (std::fabs(x[i]) + std::fabs(r.mean[k])) * r.rstd[k] * std::fabs(gamma[c]) +
        std::fabs(beta[c]);
  }
  return r;
}

struct NormBackwardRef {
  std::vector<double> dx, dx_magnitude, dgamma, dgamma_magnitude, dbeta, dbeta_magnitude;
};

// The gradient of sum(dy * y) through norm_forward_ref, at the statistics
// given (the kernel's own, or the reference's).
inline NormBackwardRef norm_backward_ref(const std::vector<double>& x, const Shape& s,
                                         const std::vector<double>& gamma,
                                         const std::vector<double>& mean,
                                         const std::vector<double>& rstd,
                                         const std::vector<double>& dy, int64_t groups) {
  const size_t stats = static_cast<size_t>(stat_count(s, groups));
  std::vector<double> count(stats, 0.0), g_sum(stats, 0.0), gx_sum(stats, 0.0),
      g_abs(stats, 0.0), gx_abs(stats, 0.0);
  NormBackwardRef r;
  r.dgamma.assign(static_cast<size_t>(s[1]), 0.0);
  r.dgamma_magnitude = r.dbeta = r.dbeta_magnitude = r.dgamma;
  auto xhat = [&](size_t i, size_t k) { return (x[i] - mean[k]) * rstd[k]; };
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t k = static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups));
    const size_t c = static_cast<size_t>(channel_of(s, static_cast<int64_t>(i)));
    const double g = dy[i] * gamma[c];
    count[k] += 1.0;
    g_sum[k] += g;
    gx_sum[k] += g * xhat(i, k);
    g_abs[k] += std::fabs(g);
    gx_abs[k] += std::fabs(g * xhat(i, k));
    r.dgamma[c] += dy[i] * xhat(i, k);
    r.dgamma_magnitude[c] += std::fabs(dy[i] * xhat(i, k));
    r.dbeta[c] += dy[i];
    r.dbeta_magnitude[c] += std::fabs(dy[i]);
  }
  r.dx.resize(x.size());
  r.dx_magnitude.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t k = static_cast<size_t>(stat_of(s, static_cast<int64_t>(i), groups));
    const size_t c = static_cast<size_t>(channel_of(s, static_cast<int64_t>(i)));
    const double g = dy[i] * gamma[c];
    r.dx[i] = rstd[k] * (g - g_sum[k] / count[k] - xhat(i, k) * gx_sum[k] / count[k]);
    r.dx_magnitude[i] = rstd[k] * (std::fabs(g) + g_abs[k] / count[k] +
                                   std::fabs(xhat(i, k)) * gx_abs[k] / count[k]);
  }
  return r;
}

}  // namespace pt::test
