// optimizer.hpp: SGD with momentum, AdamW, and the learning-rate schedule.
//
// The update is elementwise per parameter, so it is the same whatever the
// partition. Gradient clipping uses the global norm, whose partial sums the
// runtime combines in global parameter order (see runtime/trainer.cpp).
#pragma once

#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/layers.hpp"

namespace pt {

// Learning rate at 0-based `step`: linear warm-up to lr over warmup_steps,
// then constant or cosine decay to min_lr at the last step.
double learning_rate(const TrainingConfig& cfg, int64_t step);

class Optimizer {
 public:
  Optimizer(const TrainingConfig& cfg, std::vector<Param*> params);
  // One update of every parameter with gradients already scaled by `grad_scale`
  // (the clip factor, 1 when not clipping). `step` is 0-based.
  void step(Backend& be, int64_t step, float lr, float grad_scale);
  void zero_grad(Backend& be);

 private:
  TrainingConfig cfg_;
  std::vector<Param*> params_;
};

}  // namespace pt
