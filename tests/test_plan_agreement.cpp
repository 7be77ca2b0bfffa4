// test_plan_agreement.cpp: the planner's prediction of a stage's memory
// against what the runtime measures, under every recompute policy (none,
// selective, every:1..4, full) on both model families, with 1F1B and GPipe
// on all the ranks of the world (run at 1 and 2 ranks).
//
// The planner reads a memory profile of the units (runtime/profiler) and
// composes stages with plan/stage_cost; the runtime trains the deck.
//   stash   in flight (the validator's peak_in_flight) x StageCost::stash_bytes
//           equals the measured peak of category `activations`, exactly: the
//           kept inputs are the same tensors, and every:K counts the same
//           layers (UnitCost::layers maps an MLP unit onto its two layers;
//           before it did, the planner's every:2 kept every other MLP unit)
//   total   the simulated peak (plan/simulate) equals the measured total
//           under none, selective and full; under every:K it bounds it from
//           above by at most the slack of every_slack (below)
// and, in bf16 with weight copies, that both sides count the copies, with
// the activation copies (the stash of the activations kept only as GEMM
// operands in bf16: the profile's kept_input_bytes under full) and without.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

Deck small_deck(const std::string& model, const std::string& schedule) {
  Deck d;
  d.model.mlp.input_dim = 6;
  d.model.mlp.hidden_dim = 10;
  d.model.mlp.output_dim = 3;
  d.model.mlp.depth = 6;
  d.data.samples = 64;
  d.training.steps = 2;
  d.training.batch_size = 8;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.timeout_s = 60;
  return model == "gpt" ? pt_test::tiny_gpt(d, 4) : d;
}

struct Measured {
  std::vector<double> stash, total;  // per stage: peaks of the last step
  std::vector<int> in_flight;
};

// On `be` (null: the CPU backend, fp32).
Measured train(const Deck& d, Backend* be = nullptr) {
  ComputeSetup setup;
  setup.backend = be;
  Trainer trainer(d, MPI_COMM_WORLD, setup);
  StepRecord rec;
  for (int64_t s = 0; s < d.training.steps; ++s) rec = trainer.train_step(s);
  Measured m;
  for (const std::vector<double>& stage : rec.rank_peak_bytes) {
    m.stash.push_back(stage[static_cast<int>(MemCategory::Activations)]);
    m.total.push_back(stage.back());
  }
  m.in_flight = trainer.schedule_report().peak_in_flight;
  return m;
}

struct Planned {
  std::vector<StageCost> costs;
  std::vector<double> peak;  // simulated, per stage
};

Planned plan(const Deck& d, const ModelProfile& p) {
  const int stages = world_size();
  const int64_t units = d.model.type == "gpt" ? d.model.gpt.blocks : d.model.mlp.depth;
  Planned out;
  out.costs = stage_costs(p, partition_units(units, stages, {}),
                          {PlanRecompute::parse(d.pipeline.recompute)});
  SimulationInput in;
  in.stages = out.costs;
  in.links = {p.link};
  in.record_events = false;
  in.receiver_progress = true;
  out.peak = simulate_schedule(generate_schedule(d.pipeline.schedule, stages, d.pipeline.micro_batches),
                               in).peak_bytes;
  return out;
}

const char* const kPolicies[] = {"none", "selective", "every:1", "every:2", "every:3", "every:4", "full"};

// The slack of the total under every:K: the planner's transients are upper
// bounds there (F: the largest workspace of any unit, without the layered
// release of outputs and later stashes; B: that plus the largest stash of the
// units one K-layer segment touches, though at run time the recomputed
// segment and the workspace peak do not coincide in full and a segment may
// cover part of a unit). So the measured total lies between the exact part
// (fixed bytes + in flight x stash) and the planned peak: the slack is the
// planned transient. Under the other policies the total is exact.
double every_slack(const StageCost& c, const std::string& policy) {
  if (policy.rfind("every:", 0) != 0) return 0.0;
  return std::max(c.forward_transient_bytes, c.backward_transient_bytes);
}

TEST(PlanAgreement, PlannedPeaksAreTheMeasuredOnesUnderEveryPolicy) {
  for (const char* model : {"mlp", "gpt"})
    for (const char* schedule : {"1f1b", "gpipe"}) {
      Deck d = small_deck(model, schedule);
      const ModelProfile p = profile_memory(d, cpu_backend());
      for (const char* policy : kPolicies) {
        d.pipeline.recompute = policy;
        const Measured m = train(d);
        const Planned planned = plan(d, p);
        if (world_rank() != 0) continue;
        ASSERT_EQ(m.stash.size(), planned.costs.size());
        for (size_t s = 0; s < m.stash.size(); ++s) {
          const std::string label = std::string(model) + " " + schedule + " " + policy +
                                    " stage " + std::to_string(s) + " of " +
                                    std::to_string(m.stash.size());
          EXPECT_EQ(m.in_flight[s] * planned.costs[s].stash_bytes, m.stash[s]) << label;
          EXPECT_GE(planned.peak[s], m.total[s]) << label;
          EXPECT_LE(planned.peak[s] - m.total[s], every_slack(planned.costs[s], policy)) << label;
        }
      }
    }
}

// bf16 with weight copies (training.weight_copies): the copies are
// parameters to the profiler and to the run alike, so the planned peaks
// are still the measured ones; with activation copies
// (training.activation_copies, the default) and without, the stash too.
TEST(PlanAgreement, Bf16WeightCopiesCountOnBothSides) {
  const auto bf16 = make_cpu_backend(Precision::Bf16);
  for (const char* model : {"mlp", "gpt"})
    for (bool activation_copies : {true, false}) {
      Deck d = small_deck(model, "1f1b");
      d.training.precision = Precision::Bf16;
      d.training.activation_copies = activation_copies;
      const ModelProfile p = profile_memory(d, *bf16);
      Deck without = d;
      without.training.weight_copies = false;
      const ModelProfile p_without = profile_memory(without, *bf16);
      double copies = 0.0;  // the bytes the copies add, planned
      for (size_t u = 0; u < p.units.size(); ++u)
        copies += p.units[u].param_bytes - p_without.units[u].param_bytes;
      for (const char* policy : {"none", "full"}) {
        d.pipeline.recompute = policy;
        const Measured m = train(d, bf16.get());
        const Planned planned = plan(d, p);
        if (world_rank() != 0) continue;
        EXPECT_GT(copies, 0.0) << model;
        for (size_t s = 0; s < m.total.size(); ++s) {
          const std::string label = std::string(model) + " bf16 " + policy + " stage " + std::to_string(s) +
                                    (activation_copies ? " activation copies" : "");
          EXPECT_EQ(m.in_flight[s] * planned.costs[s].stash_bytes, m.stash[s]) << label;
          EXPECT_EQ(planned.peak[s], m.total[s]) << label;
        }
      }
    }
}

}  // namespace
}  // namespace pt
