// loss_scaler.cpp: dynamic loss scaling (see include/pipetrain/model/loss_scaler.hpp).
#include "pipetrain/model/loss_scaler.hpp"

#include <algorithm>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

LossScaler::LossScaler(const LossScalerConfig& cfg) : cfg_(cfg), scale_(cfg.initial_scale) {
  PT_CHECK(cfg.initial_scale > 0 && cfg.min_scale > 0 && cfg.min_scale <= cfg.max_scale,
           "loss scale bounds");
  PT_CHECK(cfg.growth_factor >= 1 && cfg.backoff_factor > 0 && cfg.backoff_factor < 1,
           "loss scale factors");
  PT_CHECK(cfg.growth_interval >= 1, "loss scale growth interval");
  scale_ = std::min(std::max(scale_, cfg.min_scale), cfg.max_scale);
}

// Every gradient's non-finite count stays on the device; one read for all.
// Every slot is written before the read, so the kept batch holds nothing of
// the step before.
bool LossScaler::grads_finite(Backend& be, const std::vector<Param*>& params) {
  const int64_t n = static_cast<int64_t>(params.size());
  if (!nonfinite_counts_ || nonfinite_counts_->size() != n || counts_backend_ != &be) {
    nonfinite_counts_ = be.make_scalar_batch(n);
    counts_backend_ = &be;
  }
  for (int64_t i = 0; i < n; ++i) {
    settle_grad(be, *params[static_cast<size_t>(i)]);
    be.nonfinite_to(params[static_cast<size_t>(i)]->grad, *nonfinite_counts_, i);
  }
  for (double c : nonfinite_counts_->read())
    if (c != 0.0) return false;
  return true;
}

bool LossScaler::all_ranks_finite(bool local_finite, MPI_Comm comm) {
  int mine = local_finite ? 1 : 0, all = 0;
  timed_allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm, "the fp16 overflow agreement");
  return all == 1;
}

void LossScaler::unscale(Backend& be, const std::vector<Param*>& params) const {
  const float inv = static_cast<float>(1.0 / scale_);
  for (Param* p : params) be.scale(p->grad, inv);
}

void LossScaler::restore(double scale, int64_t finite_run, int64_t skipped) {
  PT_CHECK(scale > 0.0 && finite_run >= 0 && skipped >= 0, "loss scaler state");
  scale_ = scale;
  run_ = finite_run;
  skipped_ = skipped;
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(scale_ * cfg_.backoff_factor, cfg_.min_scale);
    run_ = 0;
    ++skipped_;
    return false;
  }
  if (++run_ >= cfg_.growth_interval) {
    scale_ = std::min(scale_ * cfg_.growth_factor, cfg_.max_scale);
    run_ = 0;
  }
  return true;
}

bool LossScaler::finish_backward(Backend& be, const std::vector<Param*>& params,
                                 MPI_Comm comm) {
  const bool finite = all_ranks_finite(grads_finite(be, params), comm);
  if (finite) unscale(be, params);
  return update(finite);
}

}  // namespace pt
