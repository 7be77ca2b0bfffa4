// forward_context.hpp: what the forward pass now running is for, for the
// few layers whose forward depends on it (deferred batch normalisation,
// conv_layers.hpp): a training forward of micro-batch m, a recomputation of
// one (which must reproduce it and record nothing), or an evaluation
// forward. The stage runner (runtime/stage_runner.cpp) sets it around each
// forward with a ForwardScope; outside any scope (tests, benchmarks calling
// layers directly) it is a training forward of micro-batch 0. One per thread.
#pragma once

namespace pt {

// Recompute: as Train, keeping nothing (also a profiler's probe forward).
enum class ForwardPurpose { Train, Recompute, Eval };

struct ForwardContext {
  ForwardPurpose purpose = ForwardPurpose::Train;
  int micro_batch = 0;  // within the step (or evaluation batch)
};

const ForwardContext& forward_context();

// Sets the context of this thread for its lifetime, then restores the one before.
class ForwardScope {
 public:
  explicit ForwardScope(ForwardContext context);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  ForwardContext previous_;
};

}  // namespace pt
