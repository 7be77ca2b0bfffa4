// step_collectives.cpp: loss, gradient norm, bubble and gathers of a step.
#include "pipetrain/runtime/step_collectives.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

StepCollectives::StepCollectives(MPI_Comm pipeline, MPI_Comm replicas, int replica_count,
                                 const Schedule& schedule)
    : comm_(pipeline), replicas_comm_(replicas), replicas_(replica_count), schedule_(schedule) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

double StepCollectives::mean_loss(const StepOutcome& outcome, const std::vector<StageModel>& stages,
                                  int64_t batch_size) const {
  double mean = 0.0;
  for (const StageModel& st : stages) {
    if (!st.is_last()) continue;
    double sum = outcome.loss_sum;
    if (replicas_ > 1) {
      const std::vector<double>& mine = outcome.micro_batch_losses;
      std::vector<double> all(mine.size() * static_cast<size_t>(replicas_));
      timed_allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                      replicas_comm_, "the loss all-gather across the last stage's replicas");
      sum = 0.0;  // global micro-batch order: as one pipeline would add them
      for (double l : all) sum += l;
    }
    mean = sum / static_cast<double>(batch_size * st.loss_terms_per_sample);
  }
  timed_bcast(&mean, 1, MPI_DOUBLE, stage_rank(schedule_, schedule_.num_stages - 1), comm_,
              "the loss broadcast from the last stage");
  return mean;
}

// Per-parameter sums of squares are gathered in global parameter order and
// added in that order, so the norm is bitwise the same at any stage count.
double StepCollectives::global_grad_norm(std::vector<StageModel>& stages, Backend& be,
                                         int64_t step) const {
  std::vector<double> local;
  std::vector<int> per_stage;
  if (nonfinite_gradient_requested(step)) {
    Param* last = nullptr;
    for (StageModel& st : stages)
      for (Param* p : st.params()) last = p;
    be.fill(last->grad, INFINITY);
  }
  // Every parameter's sum of squares is left on the device and all of them
  // come back in one read (a GPU waits once, not once per parameter).
  std::vector<std::pair<Param*, int>> params;  // with its stage
  for (StageModel& st : stages) {
    per_stage.push_back(0);
    for (Param* p : st.params()) {
      params.emplace_back(p, st.stage);
      ++per_stage.back();
    }
  }
  const int64_t n = static_cast<int64_t>(params.size());
  if (!norm_slots_ || norm_slots_->size() != n) norm_slots_ = be.make_scalar_batch(n);
  for (int64_t i = 0; i < n; ++i) {
    settle_grad(be, *params[static_cast<size_t>(i)].first);
    be.sum_squares_to(params[static_cast<size_t>(i)].first->grad, *norm_slots_, i);
  }
  local = norm_slots_->read();
  for (size_t i = 0; i < params.size(); ++i)
    // A double sum of squared floats cannot overflow, so it is finite exactly
    // when every element is: this is the step's non-finite gradient check.
    if (!std::isfinite(local[i]))
      throw Error("non-finite gradient of " + params[i].first->name + " at step " +
                  std::to_string(step) + ", stage " + std::to_string(params[i].second) +
                  " (accumulated over micro-batches 0-" +
                  std::to_string(schedule_.num_micro_batches - 1) + ")");
  const std::vector<int> stage_counts =
      per_stage_counts(stages, per_stage, "the gradient-norm counts all-gather");
  const int count = static_cast<int>(local.size());
  std::vector<int> counts = rank_counts(stage_counts), offsets(size_, 0);
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<double> all(static_cast<size_t>(offsets.back() + counts.back()));
  timed_allgatherv(local.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                   comm_, "the gradient-norm all-gather");
  // Added in global parameter order, whatever the placement of the stages.
  double sum = 0.0;
  for (double v : in_stage_order(all, stage_counts)) sum += v;
  return std::sqrt(sum);
}

float StepCollectives::clip_scale(double grad_norm, double clip) {
  if (clip > 0.0 && grad_norm > clip) return static_cast<float>(clip / (grad_norm + 1e-6));
  return 1.f;
}

// 1 - (this rank's F + B time without waits) / (the longest rank's span of
// the schedule), averaged over ranks: the share of the step a stage idles.
double StepCollectives::measured_bubble(const StepOutcome& outcome,
                                        std::vector<double>& compute_s) const {
  double mine[2] = {outcome.compute_us, outcome.span_us};
  std::vector<double> all(2 * size_);
  timed_allgather(mine, 2, MPI_DOUBLE, all.data(), comm_, "the measured-bubble all-gather");
  compute_s.clear();
  std::vector<double> busy_us, span_us;
  for (int r = 0; r < size_; ++r) {
    compute_s.push_back(all[2 * r] * 1e-6);
    busy_us.push_back(all[2 * r]);
    span_us.push_back(all[2 * r + 1]);
  }
  return bubble_of(busy_us, span_us);  // the schedule layer's one definition
}

std::vector<std::vector<double>> StepCollectives::gather_memory_peaks(const MemoryStats& stats) const {
  const int cats = static_cast<int>(MemCategory::Count);
  std::vector<double> mine(stats.peak, stats.peak + cats);
  mine.push_back(static_cast<double>(stats.peak_total));
  std::vector<double> all(rank_ == 0 ? mine.size() * size_ : 0);
  timed_gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), 0, comm_,
               "the per-stage memory peaks gather");
  std::vector<std::vector<double>> per_stage;
  for (int r = 0; rank_ == 0 && r < size_; ++r)
    per_stage.emplace_back(all.begin() + r * mine.size(), all.begin() + (r + 1) * mine.size());
  return per_stage;
}

std::vector<float> StepCollectives::gather_parameters(std::vector<StageModel>& stages) const {
  std::vector<float> local;
  std::vector<int> per_stage;
  for (StageModel& st : stages) {
    per_stage.push_back(0);
    for (Param* p : st.params()) {
      const Tensor host = p->value.to(Device::CPU);
      local.insert(local.end(), host.f32(), host.f32() + host.numel());
      per_stage.back() += static_cast<int>(host.numel());
    }
  }
  const std::vector<int> stage_counts =
      per_stage_counts(stages, per_stage, "the parameter counts gather");
  const int count = static_cast<int>(local.size());
  std::vector<int> counts = rank_counts(stage_counts), offsets(size_, 0);
  std::vector<float> all;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    all.resize(static_cast<size_t>(offsets.back() + counts.back()));
  }
  timed_gatherv(local.data(), count, MPI_FLOAT, all.data(), counts.data(), offsets.data(), 0,
                comm_, "the parameter gather");
  return rank_ == 0 ? in_stage_order(all, stage_counts) : all;
}

std::vector<int> StepCollectives::per_stage_counts(const std::vector<StageModel>& stages,
                                                   const std::vector<int>& mine,
                                                   const char* what) const {
  const int n = schedule_.num_stages;
  std::vector<int> padded(n, 0), all(static_cast<size_t>(n) * size_);
  for (size_t i = 0; i < stages.size(); ++i) padded[stages[i].stage] = mine[i];
  timed_allgather(padded.data(), n, MPI_INT, all.data(), comm_, what);
  std::vector<int> counts(n);
  for (int st = 0; st < n; ++st) counts[st] = all[stage_rank(schedule_, st) * n + st];
  return counts;
}

std::vector<int> StepCollectives::rank_counts(const std::vector<int>& stage_counts) const {
  std::vector<int> counts(size_, 0);
  for (int st = 0; st < schedule_.num_stages; ++st)
    counts[stage_rank(schedule_, st)] += stage_counts[st];
  return counts;
}

// by_rank holds rank 0's stages' blocks (ascending), then rank 1's, ...;
// the result holds stage 0's block, then stage 1's, ...
template <typename T>
std::vector<T> StepCollectives::in_stage_order(const std::vector<T>& by_rank,
                                               const std::vector<int>& counts) const {
  std::vector<size_t> offset(counts.size());
  size_t at = 0;
  for (int r = 0; r < size_; ++r)
    for (int st : rank_stages(schedule_, r)) {
      offset[st] = at;
      at += static_cast<size_t>(counts[st]);
    }
  PT_CHECK(at == by_rank.size(), "per-stage blocks cover the gathered values");
  std::vector<T> ordered;
  ordered.reserve(by_rank.size());
  for (size_t st = 0; st < counts.size(); ++st)
    ordered.insert(ordered.end(), by_rank.begin() + offset[st],
                   by_rank.begin() + offset[st] + counts[st]);
  return ordered;
}

}  // namespace pt
