// optimizer.hpp: SGD with momentum, AdamW, and the learning-rate schedule.
//
// The update is elementwise per parameter, so it is the same whatever the
// partition. Gradient clipping uses the global norm, whose partial sums the
// runtime combines in global parameter order (see runtime/step_collectives.cpp).
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
  // Gives every parameter zeroed state (momentum; AdamW's two moments) on
  // the parameter's device.
  Optimizer(const TrainingConfig& cfg, std::vector<Param*> params);
  // A rebalancing move changed the stage's parameters to `params`: those
  // that stayed keep their state; those without state (the arriving layers')
  // get state of their shape on their device, left unfilled for the
  // move to receive from the stage that held them.
  void replace_params(std::vector<Param*> params);
  // One update of every parameter with gradients already scaled by `grad_scale`
  // (the clip factor, 1 when not clipping). AdamW's bias correction counts
  // the updates applied so far, not the training steps: an fp16 step skipped
  // for overflow applies no update and does not advance it. A parameter
  // that keeps a low-precision weight copy has it rounded again right after
  // its update (model/weight_copies.hpp): one cast per weight per applied step.
  void step(Backend& be, float lr, float grad_scale);
  void zero_grad(Backend& be);

  // Updates applied since initialisation (saved in checkpoints).
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

 private:
  void allocate_state(Param& p, bool zeroed) const;

  TrainingConfig cfg_;
  std::vector<Param*> params_;
  int64_t updates_ = 0;
};

}  // namespace pt
