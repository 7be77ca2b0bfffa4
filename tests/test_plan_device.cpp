// test_plan_device.cpp: paper-scale planning: the H200 description, the
// analytic GPT unit costs against the runtime's own FLOP count, parameter
// count and docs/memory.md's stash formulas, and plan_alternatives for
// GPT-3 175B on 8 and 64 H200s and a 1024-block model of the same width on
// 1024, each plan in under 1 s of CPU time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/plan/device.hpp"
#include "pipetrain/plan/stage_cost.hpp"

namespace {

using pt::GptSpec;
using pt::PlanRequest;
using pt::PlanRow;
using pt::PlanTable;
using testing::HasSubstr;

TEST(Device, H200Description) {
  const pt::DeviceSpec d = pt::h200_device();
  EXPECT_DOUBLE_EQ(d.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(d.memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(d.efficiency, 0.45);
  EXPECT_DOUBLE_EQ(d.achieved_flops(), 989e12 * 0.45);
  EXPECT_DOUBLE_EQ(d.intra_node.bandwidth_bytes_per_s, 450e9);  // 900 GB/s both ways
  EXPECT_DOUBLE_EQ(d.inter_node.bandwidth_bytes_per_s, 50e9);   // 400 Gb/s
  const std::vector<pt::LinkCost> links = pt::stage_links(d, 17);
  ASSERT_EQ(links.size(), 16u);
  for (size_t s = 0; s < links.size(); ++s) {
    const bool crosses_nodes = s == 7 || s == 15;  // stage 7 -> 8, 15 -> 16
    EXPECT_DOUBLE_EQ(links[s].bandwidth_bytes_per_s, crosses_nodes ? 50e9 : 450e9) << s;
  }
}

pt::ModelConfig gpt_config(const GptSpec& g) {
  pt::ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = g.dims.vocab_size;
  m.gpt.seq_len = g.dims.seq_len;
  m.gpt.d_model = g.dims.d_model;
  m.gpt.heads = g.dims.heads;
  m.gpt.blocks = g.dims.blocks;
  m.gpt.mlp_ratio = g.dims.mlp_ratio;
  return m;
}

// The profile's forward FLOPs x 3 are the runtime's training FLOPs per sample.
TEST(GptProfile, FlopsMatchTheRuntimeCount) {
  const GptSpec g = pt::gpt3_175b();
  const pt::ModelProfile p = pt::gpt_profile(g, pt::h200_device(), 4);
  ASSERT_EQ(p.units.size(), 98u);
  EXPECT_FALSE(p.units.front().partitionable);
  EXPECT_FALSE(p.units.back().partitionable);
  EXPECT_TRUE(p.units[1].partitionable);
  double forward = 0.0;
  for (const pt::UnitCost& u : p.units) forward += u.forward_flops;
  EXPECT_NEAR(3.0 * forward / 4.0, pt::model_train_flops_per_sample(gpt_config(g)),
              1e-9 * forward);
  const pt::UnitCost& block = p.units[1];
  EXPECT_DOUBLE_EQ(block.forward_s, block.forward_flops / (989e12 * 0.45));
  EXPECT_DOUBLE_EQ(block.backward_s, 2.0 * block.forward_s);
  EXPECT_DOUBLE_EQ(block.recompute_s, block.forward_s);
  // About 175 billion parameters, 18 bytes each.
  const double params = pt::gpt_parameter_count(g);
  EXPECT_GT(params, 174e9);
  EXPECT_LT(params, 176e9);
  double persistent = 0.0;
  for (const pt::UnitCost& u : p.units) persistent += u.param_bytes + u.grad_bytes + u.optimizer_bytes;
  EXPECT_NEAR(persistent, 18.0 * params, 1e-9 * persistent);
}

// Per-unit parameter counts equal those of the runtime's GPT layers.
TEST(GptProfile, ParametersMatchTheRuntimeLayers) {
  GptSpec g;
  g.name = "tiny";
  g.dims.blocks = 2;
  g.dims.d_model = 16;
  g.dims.heads = 2;
  g.dims.seq_len = 8;
  g.dims.vocab_size = 50;
  g.dims.mlp_ratio = 3;
  const pt::ModelProfile p = pt::gpt_profile(g, pt::h200_device(), 1);
  pt::StageModel stage = pt::build_stage(gpt_config(g), {2}, 0);
  ASSERT_EQ(stage.layers.size(), p.units.size());
  for (size_t i = 0; i < p.units.size(); ++i) {
    double count = 0.0;
    for (pt::Param* param : stage.layers[i]->params()) count += static_cast<double>(param->value.numel());
    EXPECT_DOUBLE_EQ(p.units[i].param_bytes, 2.0 * count) << p.units[i].name;
  }
}

// At pipetrain's fp32 (4-byte) activations the stash is docs/memory.md's
// count of elements x 4, for every policy (a GPT stage of all units).
TEST(GptProfile, StashMatchesTheMemoryDoc) {
  GptSpec g = pt::gpt3_175b();
  g.dims.blocks = 3;
  g.activation_bytes = 4.0;
  const double b = 2, t = 2048, c = 12288, h = 96, r = 4, v = 50257;
  const pt::ModelProfile p = pt::gpt_profile(g, pt::h200_device(), 2);
  auto stash = [&](const std::string& policy) {
    return pt::stage_costs(p, {3}, {pt::PlanRecompute::parse(policy)}).front().stash_bytes;
  };
  const double block = t * c * (8 + 2 * r) + 4 * t + h * t * t;
  const double first = t, last = 2 * t * c + 2 * t + t * v;
  EXPECT_DOUBLE_EQ(stash("none"), 4 * b * (first + 3 * block + last));
  EXPECT_DOUBLE_EQ(stash("selective"), 4 * b * (first + 3 * (block - h * t * t) + last));
  // every:2 keeps the inputs of layers 0 (tokens), 2 (block 1) and 4 (the head).
  EXPECT_DOUBLE_EQ(stash("every:2"), 4 * b * (t + t * c + t * c + t * v));
  EXPECT_DOUBLE_EQ(stash("full"), 4 * b * (t + t * v));
}

double max_cpu_seconds(const PlanTable& table) {
  double most = 0.0;
  for (const PlanRow& row : table.rows) most = std::max(most, row.plan_cpu_s);
  return most;
}

void expect_ranked(const PlanTable& table) {
  for (size_t i = 1; i < table.rows.size(); ++i)
    EXPECT_LE(table.rows[i - 1].step_time_s, table.rows[i].step_time_s);
  for (int i = 0; i < static_cast<int>(table.rows.size()); ++i) {
    const PlanRow& row = table.rows[i];
    EXPECT_EQ(row.fits, row.max_peak_bytes <= table.memory_budget_bytes && !row.units_per_stage.empty());
    if (table.best >= 0 && i < table.best) {
      EXPECT_FALSE(row.fits) << "a faster plan fits";
    }
  }
  if (table.best >= 0) {
    EXPECT_TRUE(table.rows[table.best].fits);
  }
}

// 1F1B holds fewer micro-batches than GPipe, and recomputation keeps less
// than none: compare rows that differ in that one choice.
void expect_memory_orders(const PlanTable& table) {
  int compared = 0;
  for (const PlanRow& a : table.rows)
    for (const PlanRow& b : table.rows) {
      if (a.micro_batches != b.micro_batches || a.partition != b.partition ||
          a.partition != pt::PartitionObjective::Uniform)
        continue;
      if (a.recompute == b.recompute && a.schedule == "1f1b" && b.schedule == "gpipe") {
        EXPECT_LE(a.max_peak_bytes, b.max_peak_bytes);
        ++compared;
      }
      if (a.schedule == b.schedule && a.recompute != "none" && b.recompute == "none") {
        EXPECT_LE(a.max_peak_bytes, b.max_peak_bytes);
        ++compared;
      }
    }
  EXPECT_GT(compared, 0);
}

// 175B x 18 bytes over 8 stages is about 394 GB a stage: nothing fits 141 GB.
TEST(PlanAlternatives, Gpt3On8H200sFitsNowhere) {
  PlanRequest request;
  request.num_stages = 8;
  request.batch_size = 1536;  // GPT-3's 3.2M tokens per batch
  const PlanTable table = pt::plan_alternatives(pt::gpt3_175b(), pt::h200_device(), request);
  EXPECT_EQ(table.rows.size(), 20u * 2 * 3 * 4);  // 20 divisors of 1536
  EXPECT_EQ(table.best, -1);
  int balanced_without_partition = 0;
  for (const PlanRow& row : table.rows) {
    EXPECT_FALSE(row.fits);
    if (row.units_per_stage.empty()) {  // balanced: no partition meets the budget
      EXPECT_EQ(row.partition, pt::PartitionObjective::Balanced);
      EXPECT_THAT(row.note, HasSubstr("smallest achievable largest stage peak"));
      ++balanced_without_partition;
    } else {
      EXPECT_GT(row.max_peak_bytes, 141e9);
      EXPECT_THAT(row.note, HasSubstr("over the budget of 131.32 GiB"));
    }
  }
  EXPECT_EQ(balanced_without_partition, 20 * 2 * 3);
  expect_ranked(table);
  EXPECT_THAT(pt::format_plan_table(table, 5), HasSubstr("best: none of the 480 plans fits"));
}

TEST(PlanAlternatives, Gpt3On64H200s) {
  PlanRequest request;
  request.num_stages = 64;
  request.batch_size = 1536;
  request.micro_batch_counts = {64, 256, 1536};
  const PlanTable table = pt::plan_alternatives(pt::gpt3_175b(), pt::h200_device(), request);
  std::printf("%s", pt::format_plan_table(table, 12).c_str());
  ASSERT_GE(table.best, 0);
  const PlanRow& best = table.rows[table.best];
  // No faster than every device computing all the time.
  const double flops = 1536 * pt::model_train_flops_per_sample(gpt_config(pt::gpt3_175b()));
  EXPECT_GT(best.step_time_s, flops / (64 * 989e12 * 0.45));
  EXPECT_GT(best.bubble, 0.0);
  expect_ranked(table);
  expect_memory_orders(table);
}

// 1024 stages need 1024 blocks: GPT-3's widths at 1024 blocks (about 1.9T
// parameters): the planner works at that scale (its time per plan is a
// benchmark, jobs/bench_plan_scale.sh).
// Under ASan (the sanitizer pass) 256 stages: the same code, a sixteenth of
// the simulated actions, and 20 s less of CI.
#ifdef __SANITIZE_ADDRESS__
constexpr int kManyStages = 256;
#else
constexpr int kManyStages = 1024;
#endif

TEST(PlanAlternatives, ThousandStagesPlan) {
  GptSpec g = pt::gpt3_175b();
  g.name = "GPT-3 widths, " + std::to_string(kManyStages) + " blocks";
  g.dims.blocks = kManyStages;
  PlanRequest request;
  request.num_stages = kManyStages;
  request.batch_size = kManyStages;
  request.micro_batch_counts = {kManyStages};
  const PlanTable table = pt::plan_alternatives(g, pt::h200_device(), request);
  std::printf("%s", pt::format_plan_table(table, 6).c_str());
  EXPECT_EQ(table.rows.size(), 24u);
  ASSERT_GE(table.best, 0);
  EXPECT_EQ(table.rows[table.best].recompute, "full");  // kManyStages in flight on stage 0
  expect_ranked(table);
  double slowest_wall = 0.0;
  for (const PlanRow& row : table.rows) slowest_wall = std::max(slowest_wall, row.plan_s);
  std::printf("slowest plan: %.3f s CPU, %.3f s wall\n", max_cpu_seconds(table), slowest_wall);
}

TEST(PlanAlternatives, BadRequestsAreInputErrors) {
  PlanRequest request;
  request.num_stages = 1024;
  request.batch_size = 1024;
  request.micro_batch_counts = {1024};
  try {
    pt::plan_alternatives(pt::gpt3_175b(), pt::h200_device(), request);
    ADD_FAILURE() << "no InputError";
  } catch (const pt::InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("1024 stages need at least 1024 partitionable units (one per "
                                    "stage); the model has 96"));
  }
  request.num_stages = 8;
  request.micro_batch_counts = {3};
  EXPECT_THROW(pt::plan_alternatives(pt::gpt3_175b(), pt::h200_device(), request), pt::InputError);
}

}  // namespace

// Data parallel x pipeline grids (docs/data-parallel.md): a 13B GPT (40
// blocks, d_model 5120) on 64 and 1024 H200s. More ranks than blocks, so
// every plan must replicate the pipeline; the planner chooses P, D, N,
// schedule and recompute within the memory budget, and each row's step is
// its pipeline's (batch B / D) plus the reduction the step waits for.
GptSpec gpt_13b() {
  GptSpec g = pt::gpt3_175b();
  g.name = "gpt-13b";
  g.dims.blocks = 40;
  g.dims.d_model = 5120;
  g.dims.heads = 40;
  return g;
}

void expect_grid_plan(int ranks) {
  PlanRequest request;
  request.batch_size = 1536;
  request.micro_batch_counts = {1, 2, 3, 4, 6, 8, 12, 16, 24, 48};
  request.schedules = {"1f1b"};
  request.partitions = {pt::PartitionObjective::Uniform, pt::PartitionObjective::Balanced};
  const PlanTable table = pt::plan_grid_alternatives(gpt_13b(), pt::h200_device(), request, ranks);
  std::printf("%s", pt::format_plan_table(table, 8).c_str());
  expect_ranked(table);
  ASSERT_GE(table.best, 0) << "some grid fits";
  std::vector<int> grids;
  for (const PlanRow& row : table.rows) {
    EXPECT_EQ(row.num_stages * row.data_parallel, ranks);
    EXPECT_LE(row.num_stages, 40) << "no more stages than blocks";
    EXPECT_EQ(1536 % (row.data_parallel * row.micro_batches), 0);
    if (row.data_parallel > 1 && !row.units_per_stage.empty()) {
      EXPECT_GT(row.reduction_s, 0.0);
    }
    if (std::find(grids.begin(), grids.end(), row.data_parallel) == grids.end())
      grids.push_back(row.data_parallel);
  }
  EXPECT_GE(grids.size(), 3u) << "several D weighed";
  const PlanRow& best = table.rows[table.best];
  EXPECT_GT(best.data_parallel, 1);
  EXPECT_THAT(pt::format_plan_table(table, 3),
              HasSubstr("best: rank " + std::to_string(table.best + 1) + ", P x D = " +
                        std::to_string(best.num_stages) + " x " + std::to_string(best.data_parallel)));
  // The best row is its pipeline's plan at batch B / D plus the reduction.
  PlanRequest one;
  one.num_stages = best.num_stages;
  one.batch_size = 1536 / best.data_parallel;
  one.micro_batch_counts = {best.micro_batches};
  one.schedules = {best.schedule};
  one.recompute = {best.recompute};
  one.partitions = {best.partition};
  const PlanTable pipeline = pt::plan_alternatives(gpt_13b(), pt::h200_device(), one);
  ASSERT_EQ(pipeline.rows.size(), 1u);
  EXPECT_NEAR(best.step_time_s, pipeline.rows[0].step_time_s + best.reduction_s,
              1e-12 * best.step_time_s);
  EXPECT_EQ(best.units_per_stage, pipeline.rows[0].units_per_stage);
  // How long the planner took is a benchmark figure (jobs/bench_planner.sh,
  // `pipetrain plan` prints it), not something a test asserts.
  std::printf("grid plan of %d GPUs: slowest row %.3f s CPU\n", ranks, max_cpu_seconds(table));
}

TEST(PlanGrid, Gpt13BOn64H200sReplicatesThePipeline) { expect_grid_plan(64); }
TEST(PlanGrid, Gpt13BOn1024H200sReplicatesThePipeline) { expect_grid_plan(1024); }

// The reduction model: nothing at D = 1; an all-to-all of `slots` chunks
// and an all-gather of one, each D - 1 exchanges of a 1/D chunk.
TEST(PlanGrid, ReductionCostFromTheLinkModel) {
  const pt::LinkCost link{1e-5, 1e9};
  EXPECT_EQ(pt::replica_reduction_s(4e6, 1, 1, link), 0.0);
  EXPECT_DOUBLE_EQ(pt::replica_reduction_s(4e6, 4, 1, link), 3 * (2 * 1e-5 + 2 * 1e6 / 1e9));
  EXPECT_DOUBLE_EQ(pt::replica_reduction_s(4e6, 4, 8, link), 3 * (2 * 1e-5 + 9 * 1e6 / 1e9));
  EXPECT_DOUBLE_EQ(pt::replica_reduction_bytes(4e6, 4, 1), 4e6 * 3.25);
}
