// rebalance.hpp: whether and where to move units between running stages,
// from the stage times measured in this run (docs/rebalance.md).
//
// Pure arithmetic on a profile and measurements, so every decision can be
// tested without timing anything. Each stage s has a measured compute time
// per step m_s (a median over the recent steps) and a predicted one p_s (the
// profile's F + B + recompute of its units, times the micro-batches). Its
// speed factor k_s = m_s / p_s says how much slower than the profile its
// rank computes; the partition solver (plan/partition.hpp) then finds the
// best partition with every stage's time scaled by its k_s. A move is
// proposed only when
//   1. the measured ratio max m / min m reaches the threshold,
//   2. the solver's partition differs from the current one,
//   3. its predicted slowest stage is faster than the measured slowest by at
//      least the margin (predicted gain = 1 - new slowest / measured slowest),
//   4. it is not a partition an earlier move left while every rank's speed
//      factor is still within a factor `threshold` of its value at that move
//      (hysteresis: no move back and forth on noise or profile error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/plan/partition.hpp"

namespace pt {

struct RebalanceSettings {
  double threshold = 1.5;  // measured slowest / fastest stage that triggers a decision
  double margin = 0.05;    // smallest predicted gain (fraction of the slowest stage) worth a move
  PartitionObjective objective = PartitionObjective::Time;  // time, or balanced under a budget
};

// A move made earlier in the run: the partition it left and the speed
// factors measured when it was made.
struct RebalanceMoveRecord {
  std::vector<int64_t> left;
  std::vector<double> speed;
};

struct RebalanceDecision {
  bool move = false;
  std::vector<int64_t> from, to;     // counts per stage (to = from when no move)
  std::vector<double> measured_s;    // per stage: measured compute per step
  std::vector<double> predicted_s;   // per stage: the profile's, current partition
  std::vector<double> speed;         // per stage: measured / predicted
  double measured_ratio = 1.0;       // max / min of measured_s
  double predicted_ratio = 1.0;      // max / min of the proposed partition's scaled stage times
  double predicted_gain = 0.0;       // 1 - proposed slowest / measured slowest
  std::string reason;                // one line: why it moves or why not
};

// `measured_s`: per stage, compute seconds per step; `micro_batches`: per
// step. InputError from the solver (e.g. a budget no partition meets).
RebalanceDecision decide_rebalance(const ModelProfile& profile, const PartitionSetup& setup,
                                   const std::vector<int64_t>& current,
                                   const std::vector<double>& measured_s, int micro_batches,
                                   const RebalanceSettings& settings,
                                   const std::vector<RebalanceMoveRecord>& history);

// The median of `values` (the lower middle one for an even count); 0 when empty.
double median_of(std::vector<double> values);

}  // namespace pt
