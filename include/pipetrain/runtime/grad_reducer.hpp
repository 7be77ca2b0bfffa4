// grad_reducer.hpp: the data-parallel gradient reduction of one rank's stages
// across their D replicas (docs/data-parallel.md).
//
// Each stage's parameters are split into buckets of about
// data_parallel.bucket_mb, in backward order (last layer first). The executor
// reports each layer whose weight gradients of a micro-batch are complete
// (the end of its B, or of its W with a split backward); a bucket's
// reduction starts as soon as all its layers have done so for the step's last
// micro-batch, so it overlaps the rest of the backward and the pipeline's
// cool-down, and completes under the wait limit (a replica that never joins
// ends the job with a message naming the bucket and stage).
//
// A bucket is reduced as a reduce-scatter then an all-gather (the traffic of
// a ring all-reduce): an all-to-all hands replica r the r-th chunk of every
// replica's bucket, r adds the pieces in a fixed order, and an all-gather
// returns every summed chunk to every replica. Results are deterministic and
// never depend on a collective's algorithm:
//   replica: each replica's accumulated gradient, added in replica order
//            (bitwise the same across P for a given D);
//   ordered: each micro-batch's gradient, copied apart at the end of its
//            backward, added in global micro-batch order (bitwise the same
//            across every P x D with the same micro-batch size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/replica_group.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

// What a reducer reads of the deck (data_parallel.reduction, micro_batches,
// dp_bucket_mb, timeout_s).
struct ReductionConfig {
  bool ordered = false;        // dp_reduction = "ordered": micro-batch gradients kept apart
  int micro_batches = 1;       // per pipeline and step
  double bucket_bytes = 4.0 * 1048576.0;  // gradient bytes per bucket
  double timeout_s = 120.0;    // the longest wait for a bucket's peers
  bool fault_points = true;    // test faults ("reduction") may fire; off for the profiler's reductions
};
ReductionConfig reduction_config_for(const Deck& deck);

struct ReductionBucket {
  int stage = 0;            // global stage number
  int index = 0;            // bucket number within the stage (0 = last layers)
  size_t first_layer = 0;   // layers [first_layer, last_layer] of the stage
  size_t last_layer = 0;
  std::vector<Param*> params;
  std::vector<int64_t> offsets;  // (params) element offset in the bucket
  int64_t count = 0;             // gradient floats of the bucket
  int64_t chunk = 0;             // ceil(count / replicas): each replica's share of the sum
  int slots = 1;                 // per replica: 1, or micro-batches ("ordered")
  Tensor send;                   // (slots, replicas x chunk) this replica's gradients, zero-padded
  Tensor pieces;                 // (slots, replicas, chunk) every replica's piece of this one's chunk
  Tensor sum;                    // (chunk) this replica's chunk of the sum
  Tensor total;                  // (replicas x chunk) every chunk of the sum
  int remaining = 0;             // layer completions still to come this step
  int phase = 0;                 // 0 waiting for layers, 1 all-to-all, 2 all-gather, 3 done
  std::vector<std::unique_ptr<PendingTransfer>> pending;
  double start_us = 0.0;
};

class GradientReducer {
 public:
  // `stages`: this rank's stages (ascending); `group`: its replica group;
  // `group_text` names the group's ranks in messages ("world ranks 1, 3").
  GradientReducer(std::vector<StageModel*> stages, ReplicaGroup& group, const ReductionConfig& config,
                  Backend& backend, Tracer* tracer, std::string group_text);
  // Whether gradients are reduced at all: D > 1, or "ordered" (which keeps
  // micro-batch gradients apart, and adds them in order, even at D = 1).
  bool active() const { return active_; }
  const std::vector<std::unique_ptr<ReductionBucket>>& buckets() const { return buckets_; }

  void begin_step(int64_t step);
  // Layer `layer` of stage `stage` holds all of micro-batch `mb`'s weight gradients.
  void layer_done(int stage, int mb, size_t layer);
  // Progress: records the buckets that completed.
  void poll();
  // Waits for every bucket (timed) and writes the sums into the gradients.
  void finish();

 private:
  void launch(ReductionBucket& b);
  bool advance(ReductionBucket& b);  // true once the bucket's sum is in the gradients
  std::string describe(const ReductionBucket& b) const;

  std::vector<StageModel*> stages_;
  ReplicaGroup& group_;
  const ReductionConfig config_;
  Backend& be_;
  Tracer* tracer_;
  std::string group_text_;
  bool active_ = false, ordered_ = false;
  int micro_batches_ = 1;
  int64_t step_ = 0;
  bool launched_any_ = false;
  std::vector<std::unique_ptr<ReductionBucket>> buckets_;
  std::vector<ReductionBucket*> launched_;  // this step's, in launch order
  // (stages_) (layers) the bucket holding the layer's parameters, or null
  std::vector<std::vector<ReductionBucket*>> layer_bucket_;
};

}  // namespace pt
