// fd_check.hpp: helpers shared by the layer tests: seeded random tensors and
// central finite differences of a scalar loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include "pipetrain/base/rng.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::test {

// (shape) f32 with N(0, std^2) entries from the counter-based generator.
inline Tensor random_tensor(const Shape& shape, uint64_t stream, float std = 1.f) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std * normal01(99, stream, i);
  return t;
}

inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.f32()[i]) * b.f32()[i];
  return s;
}

// Max of |numeric - analytic| / max(1, |numeric|) over the elements of
// `value`, the numeric derivative being (L(v + h) - L(v - h)) / 2h.
inline double max_fd_error(Tensor& value, const Tensor& grad, const std::function<double()>& loss) {
  const float h = 1e-2f;
  double worst = 0.0;
  for (int64_t i = 0; i < value.numel(); ++i) {
    const float keep = value.f32()[i];
    value.f32()[i] = keep + h;
    const double up = loss();
    value.f32()[i] = keep - h;
    const double down = loss();
    value.f32()[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    worst = std::max(worst, std::fabs(numeric - grad.f32()[i]) / std::max(1.0, std::fabs(numeric)));
  }
  return worst;
}

}  // namespace pt::test
