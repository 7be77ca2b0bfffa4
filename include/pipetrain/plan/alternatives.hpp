// alternatives.hpp: ranking whole training plans. A plan is one point
// (schedule, micro-batch count N, recompute policy, partition objective); for
// each, the schedule is generated (gpipe or 1f1b), the partition solved for
// its in-flight counts, and one step simulated. Plans are ranked by step
// time; those whose largest stage peak exceeds the memory budget are marked
// infeasible, and the best plan is the fastest feasible one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/plan/cost.hpp"
#include "pipetrain/plan/device.hpp"
#include "pipetrain/plan/partition.hpp"

namespace pt {

struct PlanRequest {
  int num_stages = 1;
  int64_t batch_size = 0;  // samples (sequences) per step
  // Empty: every divisor of batch_size. Each must divide batch_size.
  std::vector<int> micro_batch_counts;
  std::vector<std::string> schedules{"gpipe", "1f1b"};
  std::vector<std::string> recompute{"none", "selective", "full"};
  std::vector<PartitionObjective> partitions{PartitionObjective::Uniform, PartitionObjective::Time,
                                             PartitionObjective::Memory,
                                             PartitionObjective::Balanced};
  double memory_budget_bytes = 0.0;  // > 0 (plan_alternatives: 0 = the device's memory)
};

struct PlanRow {
  std::string schedule;
  int micro_batches = 0;
  int64_t micro_batch_size = 0;
  std::string recompute;
  PartitionObjective partition = PartitionObjective::Uniform;
  std::vector<int64_t> units_per_stage;  // empty when no partition was found
  double step_time_s = 0.0;              // +infinity when no partition was found
  double throughput_samples_per_s = 0.0;
  double bubble = 0.0;
  double max_peak_bytes = 0.0;
  int largest_stage = 0;
  bool fits = false;   // every stage peak within the budget
  std::string note;    // why it does not fit, or why no partition was found
  double plan_s = 0.0;      // wall time to plan this point (schedule generation included)
  double plan_cpu_s = 0.0;  // the same in process CPU time (what a loaded machine does not inflate)
};

struct PlanTable {
  std::string model;
  std::string device;
  int num_stages = 0;
  double memory_budget_bytes = 0.0;
  std::vector<PlanRow> rows;  // by step time, fastest first
  int best = -1;              // index of the fastest feasible row, -1 if none
};

// The profile for micro-batches of the given size (samples), e.g. gpt_profile.
using ProfileForMicroBatch = std::function<ModelProfile(int64_t micro_batch_size)>;

// Ranks every point of the request. links: one per neighbouring stage pair,
// or one for all. InputError for a bad request (no budget, an N that does not
// divide the batch, more stages than partitionable units, ...).
PlanTable rank_plans(const ProfileForMicroBatch& profile_for, const std::vector<LinkCost>& links,
                     const PlanRequest& request);

// rank_plans for an analytic GPT on a device (stages one per device, links
// from stage_links; budget 0 = device.memory_bytes).
PlanTable plan_alternatives(const GptSpec& gpt, const DeviceSpec& device, PlanRequest request);

// A text table of the first max_rows rows (and the best plan).
std::string format_plan_table(const PlanTable& table, size_t max_rows = 20);

}  // namespace pt
