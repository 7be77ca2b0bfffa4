// compute_regions.hpp: the backend's clock of a pass's F, B and W.
//
// Each F, B and W is one region of the backend's ComputeTimer (its kernels,
// without the waits for peers: on a GPU, CUDA events on the compute stream),
// and the timer is read once, at the end of the pass, so timing never
// synchronises per action.
#pragma once

#include <memory>
#include <vector>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

// One F, B or W of a pass and its compute time without the waits inside it.
struct ActionTime {
  int stage = 0;
  int kind = 0;  // 0 F, 1 B, 2 W
  double seconds = 0.0;
};

// What one region timed.
struct TimedRegion {
  int stage = 0;
  int kind = -1;  // 0 F, 1 B, 2 W, -1 another compute (an evaluation's F, a probe)
  int count = 1;  // micro-batches it covers (a W pass of per-step weight gradients: all)
};

class ComputeRegions {
 public:
  explicit ComputeRegions(Backend& backend);
  // A new pass. A pass that threw may have left regions unread or open: the
  // timer is then replaced.
  void restart();
  void begin();
  void end(TimedRegion what);
  // The pass's one read: each region's seconds in order. Every F, B and W
  // region also becomes an entry of action_times().
  std::vector<double> read();
  // Every F, B and W of the pass read last, in the order they ran.
  const std::vector<ActionTime>& action_times() const { return action_times_; }

 private:
  Backend& backend_;
  std::unique_ptr<ComputeTimer> timer_;
  std::vector<TimedRegion> regions_;  // of the pass so far
  bool open_ = false;                 // a region is open
  size_t unread_ = 0;                 // regions begun since the last read
  std::vector<ActionTime> action_times_;
};

}  // namespace pt
