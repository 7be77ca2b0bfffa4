// recompute_choice.hpp: each stage's activation recomputation policy for a
// run (the policies themselves: schedule/recompute.hpp).
//
// A fixed setting ("none", "selective", "every:K", "full") is parsed.
// "auto" (one stage per rank) is decided by measurement: the stage runs one
// micro-batch alone under each candidate through a StageProbe, and the first
// candidate whose estimated peak fits pipeline.memory_budget_mb is kept.
// Every rank then learns every stage's choice. The run's factory
// (run_builder.hpp) decides once at the start and a rebalancing move decides
// again for the new stage; both read the same RecomputeSettings.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/executor_config.hpp"
#include "pipetrain/runtime/recompute.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

// What "auto" recomputation measured and chose on one stage.
struct RecomputeChoice {
  std::string policy;          // chosen policy name
  std::string requested;       // the deck's setting for this stage
  double needed_bytes = 0.0;   // estimated peak with the chosen policy (auto only)
  double budget_bytes = 0.0;   // pipeline.memory_budget_mb in bytes (auto only)
};

// What the choice reads of the deck (pipeline.recompute, recompute_stages,
// memory_budget_mb and the keys' origins for messages), read once.
struct RecomputeSettings {
  std::string recompute;                     // pipeline.recompute
  std::vector<std::string> recompute_stages;  // (stages) per-stage override; empty = recompute
  std::string recompute_key;                 // "file:line: pipeline.recompute"
  std::string stages_key;                    // "file:line: pipeline.recompute_stages"
  double budget_mb = 0.0;                    // pipeline.memory_budget_mb
  std::string budget_key;                    // "file:line: pipeline.memory_budget_mb"
  bool any_auto = false;  // some stage's setting is "auto" (any_auto_recompute)
  ExecutorConfig probe;   // the micro-batch a probe runs (executor_config_for(deck))

  // The setting of stage `stage`: its entry of recompute_stages, else recompute.
  const std::string& setting(int stage) const;
  // The key that names stage `stage`'s setting in a message (one stage per rank).
  std::string key_of(int stage) const;
};
RecomputeSettings recompute_settings_for(const Deck& deck);

// Where "auto" measures, on one rank with one stage: the stage on its
// backend with the training data, and the run's memory statistics.
struct RecomputeProbeSite {
  StageModel& stage;
  Backend& backend;
  const Dataset& data;
  double in_flight = 0.0;  // the stage's peak micro-batches in flight (ScheduleReport)
  std::function<MemoryStats()> memory_stats;  // host or device statistics
  std::function<void()> reset_peaks;          // may be empty
};

struct RecomputeDecision {
  std::vector<RecomputePolicy> mine;     // this rank's stages' policies, ascending
  std::vector<RecomputeChoice> choices;  // every stage's, in stage order, on every rank
};

// Several stages per rank: the fixed settings ("auto" is refused by the deck
// check, docs/schedules.md), the same on every rank. Not collective.
RecomputeDecision fixed_recompute(const RecomputeSettings& settings, const Schedule& schedule,
                                  int rank);

// One stage per rank, collective over `pipeline` (the rank is the stage):
// this rank's setting, "auto" measured at `site`; every stage's choice is
// then all-gathered. If a stage fits with no candidate, every rank throws
// the same InputError naming pipeline.memory_budget_mb.
RecomputeDecision choose_recompute(const RecomputeSettings& settings,
                                   const RecomputeProbeSite& site, MPI_Comm pipeline);

}  // namespace pt
