// rebalance.cpp: the Rebalancer's window of measurements and its collective
// decision (runtime/rebalance.hpp).
#include "pipetrain/runtime/rebalance.hpp"

#include <cstdio>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

RebalanceConfig rebalance_config_for(const Deck& deck) {
  RebalanceConfig c;
  c.every = deck.rebalance.every;
  c.micro_batches = static_cast<int>(deck.pipeline.micro_batches);
  c.settings.threshold = deck.rebalance.threshold;
  c.settings.margin = deck.rebalance.margin;
  c.settings.objective = deck.pipeline.partition_strategy == PartitionStrategy::Balanced
                             ? PartitionObjective::Balanced
                             : PartitionObjective::Time;
  c.memory_budget_bytes = deck.pipeline.memory_budget_mb * 1048576.0;
  return c;
}

namespace {

// Rank 0's decision as numbers: move, the ratios and gain, then per stage the
// measured, predicted and speed values and the new counts.
std::vector<double> pack(const RebalanceDecision& d, size_t stages) {
  std::vector<double> v{d.move ? 1.0 : 0.0, d.measured_ratio, d.predicted_ratio, d.predicted_gain};
  for (const auto* list : {&d.measured_s, &d.predicted_s, &d.speed})
    for (size_t s = 0; s < stages; ++s) v.push_back(s < list->size() ? (*list)[s] : 0.0);
  for (size_t s = 0; s < stages; ++s) v.push_back(static_cast<double>(d.to[s]));
  return v;
}

void unpack(const std::vector<double>& v, size_t stages, RebalanceDecision& d) {
  d.move = v[0] != 0.0;
  d.measured_ratio = v[1];
  d.predicted_ratio = v[2];
  d.predicted_gain = v[3];
  size_t i = 4;
  for (auto* list : {&d.measured_s, &d.predicted_s, &d.speed}) {
    list->assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                 v.begin() + static_cast<std::ptrdiff_t>(i + stages));
    i += stages;
  }
  d.to.clear();
  for (size_t s = 0; s < stages; ++s) d.to.push_back(static_cast<int64_t>(v[i + s]));
}

}  // namespace

Rebalancer::Rebalancer(const RebalanceConfig& config, ModelProfile profile, PartitionSetup setup)
    : every_(config.every), micro_batches_(config.micro_batches), settings_(config.settings),
      profile_(std::move(profile)), setup_(std::move(setup)) {}

void Rebalancer::observe(const std::vector<double>& rank_compute_s) {
  window_.push_back(rank_compute_s);
}

bool Rebalancer::due(int64_t step) const {
  return (step + 1) % every_ == 0 && !window_.empty();
}

RebalanceDecision Rebalancer::decide_here(const std::vector<int64_t>& current) const {
  std::vector<double> medians;
  for (size_t s = 0; s < current.size(); ++s) {
    std::vector<double> times;
    for (const auto& step : window_) times.push_back(step[s]);
    medians.push_back(median_of(times));
  }
  try {
    return decide_rebalance(profile_, setup_, current, medians, micro_batches_, settings_, history_);
  } catch (const InputError& e) {  // e.g. a memory budget no partition meets
    RebalanceDecision d;
    d.from = d.to = current;
    d.measured_s = medians;
    d.reason = std::string("no partition found: ") + e.what();
    return d;
  }
}

RebalanceDecision Rebalancer::decide(const std::vector<int64_t>& current, MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  RebalanceDecision d;
  d.from = d.to = current;
  if (rank == 0) d = decide_here(current);
  std::vector<double> numbers = pack(d, current.size());
  timed_bcast(numbers.data(), static_cast<int>(numbers.size()), MPI_DOUBLE, 0, comm,
              "the rebalancing decision from rank 0");
  unpack(numbers, current.size(), d);
  d.from = current;
  window_.clear();
  return d;
}

void Rebalancer::record_move(const RebalanceDecision& d) {
  history_.push_back({d.from, d.speed});
  window_.clear();
}

std::vector<int64_t> forced_rebalance(int64_t step) {
  const auto request = fault_request(FaultHook::Rebalance);
  return request && request->step == step ? request->counts : std::vector<int64_t>{};
}

}  // namespace pt
