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
  // (the clip factor, 1 when not clipping). AdamW's bias correction counts
  // the updates applied so far, not the training steps: an fp16 step skipped
  // for overflow applies no update and does not advance it.
  void step(Backend& be, float lr, float grad_scale);
  void zero_grad(Backend& be);

  // Updates applied since initialisation (saved in checkpoints).
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

 private:
  TrainingConfig cfg_;
  std::vector<Param*> params_;
  int64_t updates_ = 0;
};

}  // namespace pt
