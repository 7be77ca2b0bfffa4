// optimizer.cpp: SGD with momentum, AdamW, warm-up + cosine learning rate.
#include "pipetrain/model/optimizer.hpp"

#include <cmath>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

double learning_rate(const TrainingConfig& cfg, int64_t step) {
  if (cfg.warmup_steps > 0 && step < cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  if (cfg.lr_schedule == LrScheduleKind::Constant) return cfg.lr;
  const int64_t decay_steps = cfg.steps - cfg.warmup_steps;
  if (decay_steps <= 1) return cfg.lr;
  const double progress =
      static_cast<double>(step - cfg.warmup_steps) / static_cast<double>(decay_steps - 1);
  return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + std::cos(M_PI * progress));
}

Optimizer::Optimizer(const TrainingConfig& cfg, std::vector<Param*> params)
    : cfg_(cfg), params_(std::move(params)) {
  for (Param* p : params_) allocate_state(*p, true);
}

void Optimizer::replace_params(std::vector<Param*> params) {
  params_ = std::move(params);
  for (Param* p : params_)
    if (!p->state1.defined() && !p->running_statistic) allocate_state(*p, false);
}

void Optimizer::allocate_state(Param& p, bool zeroed) const {
  if (p.running_statistic) return;  // its layer's to update: no state
  const auto make = zeroed ? Tensor::zeros : Tensor::empty;
  const Device dev = p.value.device();  // the state lives with the parameter
  p.state1 = make(p.value.shape(), DType::F32, MemCategory::OptimizerState, dev);
  if (cfg_.optimizer == OptimizerKind::AdamW)
    p.state2 = make(p.value.shape(), DType::F32, MemCategory::OptimizerState, dev);
}

// A gradient its layer zeroes by overwriting is only marked; the others are
// filled. Every parameter of a stage gets its first accumulation in every
// step's backward, so nothing reads a marked gradient's stale values
// (readers outside the layers settle_grad first all the same).
void Optimizer::zero_grad(Backend& be) {
  for (Param* p : params_) {
    if (p->zero_by_overwrite) p->grad_zero_pending = true;
    else be.fill(p->grad, 0.f);
  }
}

void Optimizer::step(Backend& be, float lr, float grad_scale) {
  ++updates_;
  for (Param* p : params_) {
    if (p->running_statistic) continue;  // the layer's end_step updates it
    settle_grad(be, *p);
    if (grad_scale != 1.f) be.scale(p->grad, grad_scale);
    if (cfg_.optimizer == OptimizerKind::Sgd) {
      be.sgd_step(p->value, p->grad, p->state1, lr, static_cast<float>(cfg_.momentum),
                  static_cast<float>(cfg_.weight_decay));
    } else {
      be.adamw_step(p->value, p->grad, p->state1, p->state2, lr,
                    static_cast<float>(cfg_.beta1), static_cast<float>(cfg_.beta2),
                    static_cast<float>(cfg_.eps), static_cast<float>(cfg_.weight_decay),
                    static_cast<long>(updates_));
    }
    note_value_written(*p);
    refresh_weight_copy(be, *p);  // a GEMM weight's low-precision copy, if it keeps one
  }
}

}  // namespace pt
