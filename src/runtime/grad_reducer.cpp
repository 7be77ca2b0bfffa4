// grad_reducer.cpp: bucketed, fixed-order data-parallel gradient reduction
// (see grad_reducer.hpp).
#include "pipetrain/runtime/grad_reducer.hpp"

#include <cstdio>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {
std::string format_mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
}
std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

ReductionConfig reduction_config_for(const Deck& deck) {
  ReductionConfig config;
  config.ordered = deck.data_parallel.reduction == DpReductionKind::Ordered;
  config.micro_batches = static_cast<int>(deck.pipeline.micro_batches);
  config.bucket_bytes = deck.data_parallel.bucket_mb * 1048576.0;
  config.timeout_s = deck.pipeline.timeout_s;
  return config;
}

GradientReducer::GradientReducer(std::vector<StageModel*> stages, ReplicaGroup& group,
                                 const ReductionConfig& config, Backend& backend, Tracer* tracer,
                                 std::string group_text)
    : stages_(std::move(stages)), group_(group), config_(config), be_(backend), tracer_(tracer),
      group_text_(std::move(group_text)) {
  ordered_ = config.ordered;
  active_ = group_.replicas() > 1 || ordered_;
  micro_batches_ = config.micro_batches;
  if (!active_) return;
  const int slots = ordered_ ? micro_batches_ : 1;
  const double limit = config.bucket_bytes;
  for (StageModel* st : stages_) {
    layer_bucket_.emplace_back(st->layers.size(), nullptr);
    std::unique_ptr<ReductionBucket> cur;
    int index = 0;
    const int replicas = group_.replicas();
    auto close = [&] {
      if (!cur || cur->params.empty()) return;
      ReductionBucket& b = *cur;
      b.chunk = (b.count + replicas - 1) / replicas;
      const int64_t padded = b.chunk * replicas;
      b.send = group_.buffer(padded * slots);
      b.pieces = group_.buffer(padded * slots);
      b.sum = group_.buffer(b.chunk);
      b.total = group_.buffer(padded);
      if (padded > b.count) {  // the padding is sent as zeros and never read back
        const Tensor zeros = Tensor::zeros({padded - b.count}, DType::F32, MemCategory::Workspace,
                                           Device::CPU);
        for (int k = 0; k < slots; ++k) group_.pack(zeros, b.send, k * padded + b.count);
      }
      buckets_.push_back(std::move(cur));
    };
    for (size_t i = st->layers.size(); i-- > 0;) {
      const std::vector<Param*> params = st->layers[i]->params();
      if (params.empty()) continue;
      if (!cur) {
        cur = std::make_unique<ReductionBucket>();
        cur->stage = st->stage;
        cur->index = index++;
        cur->last_layer = i;
        cur->slots = slots;
      }
      cur->first_layer = i;
      for (Param* p : params) {
        cur->params.push_back(p);
        cur->offsets.push_back(cur->count);
        cur->count += p->grad.numel();
      }
      layer_bucket_.back()[i] = cur.get();
      if (static_cast<double>(cur->count) * 4.0 >= limit) close();
    }
    close();
  }
}

void GradientReducer::begin_step(int64_t step) {
  step_ = step;
  launched_any_ = false;
  launched_.clear();
  if (!active_) return;
  for (size_t s = 0; s < stages_.size(); ++s)
    for (ReductionBucket* b : layer_bucket_[s])
      if (b) b->remaining = 0;
  for (size_t s = 0; s < stages_.size(); ++s)
    for (ReductionBucket* b : layer_bucket_[s])
      if (b) b->remaining += micro_batches_;
  for (auto& b : buckets_) {
    PT_CHECK(b->phase == 0 || b->phase == 3, "a reduction bucket is still running at the start of a step");
    b->pending.clear();
    b->phase = 0;
  }
}

void GradientReducer::layer_done(int stage, int mb, size_t layer) {
  if (!active_) return;
  size_t s = 0;
  while (s < stages_.size() && stages_[s]->stage != stage) ++s;
  PT_CHECK(s < stages_.size() && layer < layer_bucket_[s].size(), "layer_done for a stage not here");
  ReductionBucket* b = layer_bucket_[s][layer];
  if (b == nullptr) return;  // no parameters
  PT_CHECK(mb >= 0 && mb < micro_batches_, "layer_done for micro-batch " + std::to_string(mb));
  if (ordered_) {
    // This micro-batch's gradient goes to its own slot; the next one starts from zero.
    const std::vector<Param*> params = stages_[s]->layers[layer]->params();
    for (Param* p : params) {
      size_t j = 0;
      while (b->params[j] != p) ++j;
      settle_grad(be_, *p);
      group_.pack(p->grad, b->send, mb * b->chunk * group_.replicas() + b->offsets[j]);
      be_.fill(p->grad, 0.f);
    }
  }
  PT_CHECK(b->remaining > 0, "more layer completions than micro-batches in bucket " +
                                 std::to_string(b->index) + " of stage " + std::to_string(stage));
  if (--b->remaining == 0) launch(*b);
}

void GradientReducer::launch(ReductionBucket& b) {
  if (!launched_any_) {
    launched_any_ = true;
    if (config_.fault_points) fault_point("reduction", step_);
  }
  if (!ordered_) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      settle_grad(be_, *b.params[j]);
      group_.pack(b.params[j]->grad, b.send, b.offsets[j]);
    }
  }
  b.start_us = tracer_ ? tracer_->now_us() : 0.0;
  const int64_t padded = b.chunk * group_.replicas();
  for (int k = 0; k < b.slots; ++k)
    b.pending.push_back(group_.ialltoall(b.send, k * padded, b.chunk, b.pieces, k * padded));
  b.phase = 1;
  launched_.push_back(&b);
}

// Phase 1 done: this replica's chunk is summed, slot (replica r, k) in the
// order r * slots + k: global micro-batch order ("ordered"), replica order
// ("replica"); then the all-gather. Phase 2 done: the sums go to the gradients.
bool GradientReducer::advance(ReductionBucket& b) {
  if (b.phase == 3) return true;
  for (auto& p : b.pending)
    if (!p->test()) return false;
  b.pending.clear();
  if (b.phase == 1) {
    const int replicas = group_.replicas();
    std::vector<int64_t> offsets;
    for (int r = 0; r < replicas; ++r)
      for (int k = 0; k < b.slots; ++k)
        offsets.push_back((static_cast<int64_t>(k) * replicas + r) * b.chunk);
    group_.fold(b.pieces, offsets, b.sum);
    b.pending.push_back(group_.iallgather(b.sum, b.total));
    b.phase = 2;
    return false;
  }
  for (size_t j = 0; j < b.params.size(); ++j) group_.unpack(b.total, b.offsets[j], b.params[j]->grad);
  b.phase = 3;
  if (tracer_) tracer_->record(EventKind::Reduction, step_, b.stage, b.index, b.start_us, tracer_->now_us());
  return true;
}

// Every replica must start its collectives in the same order: all-to-alls
// start in launch order (the schedule's, the same in every replica), and
// all-gathers (on their own communicator) in launch order too: a bucket's
// all-gather waits for every earlier bucket's to have started.
void GradientReducer::poll() {
  if (!active_) return;
  bool blocked = false;
  for (ReductionBucket* b : launched_) {
    if (b->phase == 1 && !blocked) {
      advance(*b);
      blocked = b->phase == 1;
    } else if (b->phase == 2) {
      advance(*b);
    }
  }
}

std::string GradientReducer::describe(const ReductionBucket& b) const {
  return "stage " + std::to_string(b.stage) + " timed out after " +
         format_seconds(config_.timeout_s) + " s " +
         (wait_phase().empty() ? "in step " + std::to_string(step_) : wait_phase()) +
         " waiting for the data-parallel gradient reduction of bucket " + std::to_string(b.index) +
         " of stage " + std::to_string(b.stage) + " (layers " + std::to_string(b.first_layer) + "-" +
         std::to_string(b.last_layer) + ", " + format_mib(4.0 * static_cast<double>(b.count)) +
         ") across its " + std::to_string(group_.replicas()) + " replicas (" + group_text_ +
         "); see pipeline.timeout_s";
}

void GradientReducer::finish() {
  if (!active_) return;
  for (auto& bp : buckets_)
    PT_CHECK(bp->phase > 0, "bucket " + std::to_string(bp->index) + " of stage " +
                                std::to_string(bp->stage) + " was never started (" +
                                std::to_string(bp->remaining) + " layer completions missing)");
  for (ReductionBucket* bp : launched_) {  // in launch order (see poll)
    ReductionBucket& b = *bp;
    if (!advance(b) && !poll_until([&] { return advance(b); }, config_.timeout_s))
      throw TimeoutError(describe(b));
  }
}

}  // namespace pt
