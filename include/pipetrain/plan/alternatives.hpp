// alternatives.hpp: ranking whole training plans. A plan is one point
// (P x D grid, schedule, micro-batch count N, recompute policy, partition
// objective); for
// each, the schedule is generated (gpipe or 1f1b), the partition solved for
// its in-flight counts, and one step simulated. Plans are ranked by step
// time; those whose largest stage peak exceeds the memory budget are marked
// infeasible, and the best plan is the simplest feasible one among those
// tied with the fastest feasible one (kPlanTieMargin, plan_choice_order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/plan/cost.hpp"
#include "pipetrain/plan/device.hpp"
#include "pipetrain/plan/partition.hpp"
#include "pipetrain/plan/simulate.hpp"

namespace pt {

struct PlanRequest {
  int num_stages = 1;
  int64_t batch_size = 0;  // samples (sequences) per step
  // Empty: every divisor of batch_size. Each must divide batch_size.
  std::vector<int> micro_batch_counts;
  // Generated schedules to weigh (schedule.hpp); interleaved with
  // virtual_stages stages per rank, and only at N that are multiples of P.
  // With several stages per rank a row's peak is its rank's (the sum of its
  // stages' peaks).
  std::vector<std::string> schedules{"gpipe", "1f1b"};
  int virtual_stages = 2;
  std::vector<std::string> recompute{"none", "selective", "full"};
  std::vector<PartitionObjective> partitions{PartitionObjective::Uniform, PartitionObjective::Time,
                                             PartitionObjective::Memory,
                                             PartitionObjective::Balanced};
  // Units per stage to evaluate as given instead of solving an objective
  // (a deck's explicit partition); a schedule with another stage count is
  // not weighed. Empty: solve each of `partitions`.
  std::vector<int64_t> fixed_partition;
  double memory_budget_bytes = 0.0;  // > 0 (plan_alternatives: 0 = the device's memory)
  // Data parallelism (docs/data-parallel.md): D replicas of the num_stages
  // pipeline; batch_size stays the global batch, each replica runs N
  // micro-batches of batch_size / (D x N). Each stage's gradient is gathered
  // from its D replicas over replica_link once its last backward is done.
  int data_parallel = 1;
  LinkCost replica_link;
  DpReductionKind dp_reduction = DpReductionKind::Replica;  // ordered: N slots per replica
  double weight_grad_share = 0.5;  // SimulationInput::weight_grad_share (zero-bubble schedules)
  // pipeline.weight_grad: "step" runs the weight gradients of the schedules
  // without W (gpipe, 1f1b, interleaved) once per step (with_step_weight_grads),
  // each stage's pass timed from the profile at a whole replica batch's rows.
  WeightGradKind weight_grad = WeightGradKind::MicroBatch;
  // Per pipeline rank, a factor on the compute time of whatever stages it
  // holds (re-planning at measured speeds, plan/replan.hpp): each stage's F,
  // B, W and optimizer times are multiplied by its rank's factor, for the
  // partition solver and the simulation alike. Empty = 1 on every rank.
  std::vector<double> rank_time_scale;
  // pipeline.schedule_times = "measured" (or "auto" without rebalancing):
  // the run places zb-h1 and zb-v again at each stage's measured F, B and W
  // times after its first steps (runtime/schedule_placement.hpp). The plan
  // then predicts such a row at the placement generate_at_times makes at
  // the row's predicted times (PlanRow::timed_placement), for every row
  // that could still win: its PlanRow::placement_floor_s shorter than the
  // fastest feasible prediction so far, of any grid (the others keep their
  // unit-time prediction). false: the unit-time placement, as the run keeps it.
  bool timed_placement = false;
};

struct PlanRow {
  int data_parallel = 1;       // D (num_stages x D ranks)
  int num_stages = 0;          // P
  double reduction_s = 0.0;    // data-parallel reduction time beyond the pipeline's span
  std::string schedule;
  int micro_batches = 0;
  int64_t micro_batch_size = 0;
  std::string recompute;
  PartitionObjective partition = PartitionObjective::Uniform;
  bool fixed_partition = false;          // the request's fixed_partition, not an objective's
  WeightGradKind weight_grad = WeightGradKind::MicroBatch;  // the request's
  std::vector<int64_t> units_per_stage;  // empty when no partition was found
  double step_time_s = 0.0;              // +infinity when no partition was found
  double throughput_samples_per_s = 0.0;
  double bubble = 0.0;
  // Predicted at the placement the run makes at measured F, B and W times
  // (PlanRequest::timed_placement), which generate_at_times preferred at
  // the row's predicted times to the unit-time one.
  bool timed_placement = false;
  std::vector<double> rank_busy_s;  // (ranks) simulated F + B (+ W) seconds per step
  // The step no placement of this schedule can beat at these costs
  // (PlanRequest::timed_placement): the busiest rank's compute, or one
  // micro-batch's way through every F and B when longer, plus the overheads.
  double placement_floor_s = 0.0;
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
  int num_stages = 0;        // one P, or 0 when the rows hold several grids
  int total_ranks = 0;       // P x D of every row
  double memory_budget_bytes = 0.0;
  std::vector<PlanRow> rows;  // by step time, fastest first
  int best = -1;              // index of the chosen row (plan_choice_order), -1 if none fits
};

// Predicted step times within this fraction of the fastest feasible row's
// are a tie: the planner's published median error is 1.4% (docs/planner.md),
// so a smaller difference says nothing about which plan runs faster. A tied
// row other than the fastest feasible one is a candidate only when its
// predicted peak also leaves this fraction of the budget free: a simpler
// plan is not worth a peak the memory model may underestimate (zb-h1 N=2
// with full recomputation, predicted 12.8 MiB, measured 13.07 MiB against a
// 13 MiB budget: results/bench_auto.md).
constexpr double kPlanTieMargin = 0.02;
// Among tied candidates, the chosen one is the simplest: no recomputation
// (a whole forward more per micro-batch), then the fewest micro-batches
// (fewer actions, messages and per-micro-batch overheads, larger GEMMs),
// then the schedule with the fewest passes (GPipe and 1F1B, then
// interleaved, then the zero-bubble schedules, which split the backward),
// then the fastest. True when a is chosen before b.
bool plan_choice_order(const PlanRow& a, const PlanRow& b);

// The profile for micro-batches of the given size (samples), e.g. gpt_profile.
using ProfileForMicroBatch = std::function<ModelProfile(int64_t micro_batch_size)>;

// Ranks every point of the request. links: one per neighbouring stage pair,
// or one for all; empty: each point's profile's own measured link (the
// profile of its micro-batch size). InputError for a bad request (no budget, an N that does not
// divide the batch, more stages than partitionable units, ...).
PlanTable rank_plans(const ProfileForMicroBatch& profile_for, const std::vector<LinkCost>& links,
                     const PlanRequest& request);

// The rows of several tables of the same grid (e.g. one per
// pipeline.weight_grad), ranked together as rank_plans ranks its own.
PlanTable merge_plan_tables(std::vector<PlanTable> tables);

// The data-parallel reduction of one stage's gradient (grad_bytes, fp32) as
// pipetrain runs it (grad_reducer.hpp): an all-to-all of `slots` chunks of
// grad_bytes / D per replica, then an all-gather of one chunk, each D - 1
// exchanges over `link`; 0 at D = 1. Its buffers: send and all-to-all
// receive of `slots` gradients, the summed chunk and the gathered sum.
double replica_reduction_s(double grad_bytes, int replicas, int slots, const LinkCost& link);
double replica_reduction_bytes(double grad_bytes, int replicas, int slots);
// The link with which replica_reduction_s (slots = 1) reproduces reductions
// measured at `replicas` (grad_bytes[i] in seconds[i]): a least-squares line
// through them, latency and bandwidth both positive; through the origin
// (latency 0) where one size was timed or the line's latency or slope comes
// out negative. Throws InputError on a non-positive time or size.
LinkCost fit_reduction_link(int replicas, const std::vector<double>& grad_bytes,
                            const std::vector<double>& seconds);
// Data parallelism after a simulated step: stage s's reduction of its
// gradient (stage_grad_bytes of the partition) starts at the end of its span
// and the step waits for the last one; each stage's peak gains the
// reduction's buffers. Returns the time the step waits beyond the pipeline's
// span (0 at D = 1 and slots = 1); adds it to result.step_time_s.
double add_replica_reductions(SimulationResult& result, const ModelProfile& profile,
                              const std::vector<int64_t>& units_per_stage, int replicas, int slots,
                              const LinkCost& link);

// Every P x D grid of total_ranks ranks (D dividing total_ranks and the
// batch, P = total_ranks / D no more than the partitionable units): the
// request's points for each, merged and ranked. links_for(P) gives a
// pipeline's links (empty: the profiles' own, as rank_plans), replica_link_for(P, D) the link between replicas.
using LinksForStages = std::function<std::vector<LinkCost>(int stages)>;
using ReplicaLinkFor = std::function<LinkCost(int stages, int replicas)>;
PlanTable rank_grid_plans(const ProfileForMicroBatch& profile_for, const LinksForStages& links_for,
                          const ReplicaLinkFor& replica_link_for, const PlanRequest& request,
                          int total_ranks);
// rank_grid_plans on a device description: pipelines placed on consecutive
// devices, replicas on the intra-node link when the whole grid fits one node,
// else the inter-node link.
PlanTable plan_grid_alternatives(const GptSpec& gpt, const DeviceSpec& device, PlanRequest request,
                                 int total_ranks);

// rank_plans for an analytic GPT on a device (stages one per device, links
// from stage_links; budget 0 = device.memory_bytes).
PlanTable plan_alternatives(const GptSpec& gpt, const DeviceSpec& device, PlanRequest request);

// A text table of the first max_rows rows (and the best plan).
std::string format_plan_table(const PlanTable& table, size_t max_rows = 20);

}  // namespace pt
