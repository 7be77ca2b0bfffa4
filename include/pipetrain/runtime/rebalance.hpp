// rebalance.hpp: dynamic rebalancing inside a run (docs/rebalance.md).
//
// The Rebalancer keeps every stage's measured compute time (F + B without
// waits) of the steps since the last check. Every rebalance.every
// steps, rank 0 takes each stage's median over those steps, asks
// decide_rebalance (plan/rebalance.hpp) for a partition and broadcasts the
// decision, so every rank agrees at the same step boundary; the Trainer then
// moves the units (Trainer::repartition) and training continues.
#pragma once

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/plan/cost.hpp"
#include "pipetrain/plan/rebalance.hpp"

namespace pt {

// What one move did on this rank and, in the totals, on all of them.
struct MoveReport {
  std::vector<int64_t> from, to;  // units per stage
  int64_t tensors_sent = 0;       // all ranks: value and optimizer-state tensors sent
  double bytes_sent = 0.0;        // all ranks
  double seconds = 0.0;           // this rank's wall time of the move
};

// A check after a step: the decision (every rank has its numbers; the reason
// only rank 0) and, when it moved, the move.
struct RebalanceCheck {
  bool checked = false;
  bool forced = false;  // PIPETRAIN_TEST_REBALANCE asked for this move
  int64_t window_steps = 0;  // steps whose medians the decision used
  RebalanceDecision decision;
  MoveReport move;
};

// What the Rebalancer reads of the deck (rebalance_config_for).
struct RebalanceConfig {
  int64_t every = 0;               // rebalance.every: steps between checks
  int micro_batches = 1;           // pipeline.micro_batches
  RebalanceSettings settings;      // threshold, margin, objective (partition strategy)
  double memory_budget_bytes = 0;  // pipeline.memory_budget_mb, for the solver's setup
};
RebalanceConfig rebalance_config_for(const Deck& deck);

class Rebalancer {
 public:
  // `setup`: the partition solver's setup of the run (its schedule's in-flight
  // counts, recompute policies, memory budget).
  Rebalancer(const RebalanceConfig& config, ModelProfile profile, PartitionSetup setup);
  // One step's compute seconds per rank (one stage each when rebalancing), the same on every rank.
  void observe(const std::vector<double>& rank_compute_s);
  bool due(int64_t step) const;
  // Collective: rank 0 decides from the medians of the window, every rank
  // receives the decision; the window starts again.
  RebalanceDecision decide(const std::vector<int64_t>& current, MPI_Comm comm);
  // A move was made: remembered for the hysteresis rule.
  void record_move(const RebalanceDecision& d);
  int64_t window_steps() const { return static_cast<int64_t>(window_.size()); }

 private:
  RebalanceDecision decide_here(const std::vector<int64_t>& current) const;

  int64_t every_;
  int micro_batches_;
  RebalanceSettings settings_;
  ModelProfile profile_;
  PartitionSetup setup_;
  std::vector<std::vector<double>> window_;  // (steps, stages) compute seconds
  std::vector<RebalanceMoveRecord> history_;
};

// Fault hook PIPETRAIN_TEST_REBALANCE="STEP:C0,C1,..." (base/fault_injection.hpp): after 0-based step
// STEP, move to those counts whatever the measurements say. Empty otherwise.
std::vector<int64_t> forced_rebalance(int64_t step);

}  // namespace pt
