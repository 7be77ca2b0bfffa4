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
using pt::kPlanTieMargin;
using pt::merge_plan_tables;
using pt::format_plan_table;
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
  m.gpt = g.dims;
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
  const double params = pt::gpt_parameter_count(g).model;
  EXPECT_EQ(pt::gpt_parameter_count(g).stored, params);  // no padding
  EXPECT_GT(params, 174e9);
  EXPECT_LT(params, 176e9);
  double persistent = 0.0;
  for (const pt::UnitCost& u : p.units) persistent += u.param_bytes + u.grad_bytes + u.optimizer_bytes;
  EXPECT_NEAR(persistent, 18.0 * params, 1e-9 * persistent);
}

GptSpec tiny_gpt(int64_t vocab_multiple = 1, pt::AttentionKind attention = pt::AttentionKind::Reference) {
  GptSpec g;
  g.name = "tiny";
  g.dims.blocks = 2;
  g.dims.d_model = 16;
  g.dims.heads = 2;
  g.dims.seq_len = 8;
  g.dims.vocab_size = 50;
  g.dims.vocab_multiple = vocab_multiple;
  g.dims.mlp_ratio = 3;
  g.dims.attention = attention;
  return g;
}

// Per-unit parameter counts equal those of the runtime's GPT layers, with a
// padded vocabulary too (the padded rows are stored).
TEST(GptProfile, ParametersMatchTheRuntimeLayers) {
  for (int64_t multiple : {1, 64}) {
    const GptSpec g = tiny_gpt(multiple);
    const pt::ModelProfile p = pt::gpt_profile(g, pt::h200_device(), 1);
    pt::StageModel stage = pt::build_stage(gpt_config(g), {2}, 0);
    ASSERT_EQ(stage.layers.size(), p.units.size());
    double total = 0.0;
    for (size_t i = 0; i < p.units.size(); ++i) {
      double count = 0.0;
      for (pt::Param* param : stage.layers[i]->params()) count += static_cast<double>(param->value.numel());
      EXPECT_DOUBLE_EQ(p.units[i].param_bytes, 2.0 * count) << p.units[i].name << " x" << multiple;
      total += count;
    }
    EXPECT_DOUBLE_EQ(pt::gpt_parameter_count(g).stored, total) << multiple;
  }
}

// A vocabulary of 50 padded to 64 (model.vocab_multiple): the hardware's
// time and memory count the 64 rows, the model FLOPs (MFU) and the model's
// parameter count the 50; the description says both.
TEST(GptProfile, PaddedVocabularyCostsTimeAndMemoryNotModelFlops) {
  const double b = 3, t = 8, c = 16, v = 50, vp = 64, e = 2;
  const GptSpec plain = tiny_gpt(1), padded = tiny_gpt(64);
  const pt::ModelProfile p = pt::gpt_profile(padded, pt::h200_device(), 3);
  const pt::ModelProfile q = pt::gpt_profile(plain, pt::h200_device(), 3);
  const pt::UnitCost& head = p.units.back();
  EXPECT_DOUBLE_EQ(head.forward_flops, b * 2 * t * c * vp);
  EXPECT_DOUBLE_EQ(head.forward_s, head.forward_flops / (989e12 * 0.45));
  EXPECT_DOUBLE_EQ(head.backward_s, 2 * head.forward_s);
  EXPECT_DOUBLE_EQ(head.stash_always_bytes, 4 * b * t * vp);  // the fp32 loss gradient
  EXPECT_DOUBLE_EQ(head.stash_none_bytes, 2 * e * b * t * c + 2 * 4 * b * t + 4 * b * t * vp);
  EXPECT_DOUBLE_EQ(head.param_bytes, 2 * (vp * c + 2 * c));
  EXPECT_DOUBLE_EQ(p.units.front().param_bytes, 2 * (vp + t) * c);
  EXPECT_DOUBLE_EQ(q.units.back().forward_flops, b * 2 * t * c * v);
  for (size_t i = 1; i + 1 < p.units.size(); ++i)
    EXPECT_DOUBLE_EQ(p.units[i].forward_s, q.units[i].forward_s) << "blocks are not padded";
  // Model FLOPs count V; the padding is counted apart.
  EXPECT_DOUBLE_EQ(pt::model_train_flops_per_sample(gpt_config(padded)),
                   pt::model_train_flops_per_sample(gpt_config(plain)));
  EXPECT_DOUBLE_EQ(pt::model_padding_flops_per_sample(gpt_config(padded)), 3 * 2 * t * c * (vp - v));
  EXPECT_DOUBLE_EQ(pt::model_padding_flops_per_sample(gpt_config(plain)), 0.0);
  double forward = 0.0;
  for (const pt::UnitCost& u : p.units) forward += u.forward_flops;
  EXPECT_NEAR(3.0 * forward / b, pt::model_train_flops_per_sample(gpt_config(padded)) +
                                     pt::model_padding_flops_per_sample(gpt_config(padded)),
              1e-9 * forward);
  const pt::GptParameterCount count = pt::gpt_parameter_count(padded);
  EXPECT_DOUBLE_EQ(count.stored - count.model, 2 * (vp - v) * c);  // embedding and LM head
  EXPECT_EQ(count.model, pt::gpt_parameter_count(plain).model);
  EXPECT_THAT(p.model, HasSubstr("vocab 50 padded to 64"));
  EXPECT_THAT(p.model, HasSubstr("parameters, 0.000448M more stored in the padded vocabulary rows"));
  EXPECT_THAT(q.model, testing::Not(HasSubstr("padded")));
}

// Fused attention, priced against hand-computed formulas for a small GPT
// (b 3 sequences, T 8, C 16, H 2, R 3, bf16 activations e = 2): the same
// forward FLOPs (the full T x T of the MFU convention); a backward that
// recomputes the scores, 2 T^2 C per sequence more; each row's fp32
// log-sum-exp kept instead of the probabilities; selective equal to none;
// a workspace without the probability gradient.
TEST(GptProfile, FusedAttentionPrices) {
  const double b = 3, t = 8, c = 16, h = 2, r = 3, e = 2;
  const double rate = 989e12 * 0.45;
  const pt::ModelProfile ref = pt::gpt_profile(tiny_gpt(), pt::h200_device(), 3);
  const pt::ModelProfile fused = pt::gpt_profile(tiny_gpt(1, pt::AttentionKind::Fused), pt::h200_device(), 3);
  const pt::UnitCost& block = fused.units[1];
  const pt::UnitCost& reference = ref.units[1];
  const double forward = b * ((8 + 4 * r) * t * c * c + 4 * t * t * c);
  EXPECT_DOUBLE_EQ(block.forward_flops, forward);
  EXPECT_DOUBLE_EQ(block.forward_s, forward / rate);
  EXPECT_DOUBLE_EQ(block.backward_s, (2 * forward + b * 2 * t * t * c) / rate);
  EXPECT_DOUBLE_EQ(reference.backward_s, 2 * forward / rate);
  EXPECT_DOUBLE_EQ(block.recompute_s, forward / rate);
  EXPECT_DOUBLE_EQ(block.recompute_selective_s, 0.0);
  EXPECT_DOUBLE_EQ(reference.recompute_selective_s, b * 2 * t * t * c / rate);
  const double kept = e * b * (8 + 2 * r) * t * c + 16 * b * t;
  EXPECT_DOUBLE_EQ(block.stash_none_bytes, kept + 4 * b * h * t);
  EXPECT_DOUBLE_EQ(block.stash_selective_bytes, block.stash_none_bytes);
  EXPECT_DOUBLE_EQ(reference.stash_none_bytes, kept + e * b * h * t * t);
  EXPECT_DOUBLE_EQ(reference.stash_selective_bytes, kept);
  EXPECT_DOUBLE_EQ(block.workspace_bytes, e * b * 4 * t * c);
  EXPECT_DOUBLE_EQ(reference.workspace_bytes, e * b * (h * t * t + 4 * t * c));
  EXPECT_DOUBLE_EQ(block.param_bytes, reference.param_bytes);
  // The head and embedding do not change; the model FLOPs neither.
  EXPECT_DOUBLE_EQ(fused.units.back().stash_none_bytes, ref.units.back().stash_none_bytes);
  EXPECT_DOUBLE_EQ(pt::model_train_flops_per_sample(gpt_config(tiny_gpt(1, pt::AttentionKind::Fused))),
                   pt::model_train_flops_per_sample(gpt_config(tiny_gpt())));
  EXPECT_THAT(fused.model, HasSubstr("fused attention"));
  // The planner's stage: selective costs and keeps what none does.
  auto stage = [&](const pt::ModelProfile& p, const std::string& policy) {
    return pt::stage_costs(p, {2}, {pt::PlanRecompute::parse(policy)}).front();
  };
  EXPECT_DOUBLE_EQ(stage(fused, "selective").stash_bytes, stage(fused, "none").stash_bytes);
  EXPECT_DOUBLE_EQ(stage(fused, "selective").backward_s, stage(fused, "none").backward_s);
  EXPECT_LT(stage(fused, "none").stash_bytes, stage(ref, "none").stash_bytes);
}

// At GPT-3's scale the stash a fused block saves under none is
// e b H T^2 - 4 b H T, the probabilities less the statistics.
TEST(GptProfile, FusedAttentionSavesTheProbabilitiesAtScale) {
  GptSpec g = pt::gpt3_175b();
  const pt::UnitCost reference = pt::gpt_profile(g, pt::h200_device(), 2).units[1];
  g.dims.attention = pt::AttentionKind::Fused;
  const pt::UnitCost fused = pt::gpt_profile(g, pt::h200_device(), 2).units[1];
  const double b = 2, t = 2048, h = 96;
  EXPECT_DOUBLE_EQ(reference.stash_none_bytes - fused.stash_none_bytes, 2 * b * h * t * t - 4 * b * h * t);
  EXPECT_DOUBLE_EQ(fused.stash_selective_bytes, reference.stash_selective_bytes + 4 * b * h * t);
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
    if (table.best >= 0 && i < table.best && row.fits) {
      EXPECT_LE(table.rows[table.best].step_time_s, row.step_time_s * (1.0 + kPlanTieMargin))
          << "a plan faster by more than the tie margin fits";
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

// A synthetic feasible row: the fields the choice reads.
PlanRow tie_row(const std::string& schedule, int micro_batches, const std::string& recompute, double step_s,
                bool fits = true, double peak_bytes = 50.0) {
  PlanRow r;
  r.max_peak_bytes = peak_bytes;
  r.schedule = schedule;
  r.micro_batches = micro_batches;
  r.recompute = recompute;
  r.step_time_s = step_s;
  r.fits = fits;
  r.num_stages = 2;
  r.units_per_stage = {1, 1};
  return r;
}

const PlanRow& chosen_of(std::vector<PlanRow> rows) {
  static PlanTable table;
  table = PlanTable{};
  table.memory_budget_bytes = 100.0;
  table.rows = std::move(rows);
  table = merge_plan_tables({table});
  EXPECT_GE(table.best, 0);
  return table.rows[static_cast<size_t>(std::max(0, table.best))];
}

// Predictions within kPlanTieMargin of the fastest feasible one are a tie,
// settled by the simpler plan; a plan outside the margin, one that does not
// fit, or one whose peak is within the margin of the budget, is never chosen
// over a faster feasible one.
TEST(PlanAlternatives, TiesWithinTheMarginGoToTheSimplestPlan) {
  ASSERT_DOUBLE_EQ(kPlanTieMargin, 0.02);
  // Fewer micro-batches win a tie; N = 1 at +3% is outside it; N = 1 at +1.5% does not fit.
  const PlanRow& n = chosen_of({tie_row("1f1b", 4, "none", 1.000), tie_row("1f1b", 2, "none", 1.015),
                                tie_row("1f1b", 1, "none", 1.030), tie_row("gpipe", 1, "none", 1.015, false)});
  EXPECT_EQ(n.micro_batches, 2);
  EXPECT_DOUBLE_EQ(n.step_time_s, 1.015);
  // No recomputation wins a tie, at the same N and before fewer micro-batches.
  EXPECT_EQ(chosen_of({tie_row("1f1b", 4, "full", 1.000), tie_row("1f1b", 4, "none", 1.019)}).recompute, "none");
  const PlanRow& none = chosen_of({tie_row("zb-h1", 4, "none", 1.000), tie_row("zb-h1", 2, "full", 1.010)});
  EXPECT_EQ(none.recompute, "none");
  EXPECT_EQ(none.micro_batches, 4);
  // A tied plan whose peak is within the margin of the budget (100 bytes here)
  // is not taken over the fastest feasible one; with 2% free, it is.
  EXPECT_EQ(chosen_of({tie_row("1f1b", 4, "none", 1.000, true, 90.0), tie_row("1f1b", 2, "none", 1.010, true, 98.5)})
                .micro_batches, 4);
  EXPECT_EQ(chosen_of({tie_row("1f1b", 4, "none", 1.000, true, 90.0), tie_row("1f1b", 2, "none", 1.010, true, 98.0)})
                .micro_batches, 2);
  // The fastest feasible plan itself stays the choice however close to the budget.
  EXPECT_EQ(chosen_of({tie_row("1f1b", 4, "none", 1.000, true, 99.9), tie_row("1f1b", 2, "none", 1.010, true, 99.0)})
                .micro_batches, 4);
  // At the same N and recompute: GPipe/1F1B before interleaved before zero-bubble.
  EXPECT_EQ(chosen_of({tie_row("zb-h1", 1, "none", 1.000), tie_row("interleaved", 1, "none", 1.005),
                       tie_row("gpipe", 1, "none", 1.010)}).schedule, "gpipe");
  EXPECT_EQ(chosen_of({tie_row("zb-v", 2, "none", 1.000), tie_row("interleaved", 2, "none", 1.005)}).schedule,
            "interleaved");
  // Among equally simple rows, the faster.
  EXPECT_DOUBLE_EQ(chosen_of({tie_row("1f1b", 2, "none", 1.010), tie_row("gpipe", 2, "none", 1.000)}).step_time_s,
                   1.000);
  // Outside the margin the fastest feasible row stays the choice, however complex.
  EXPECT_EQ(chosen_of({tie_row("zb-v", 8, "full", 1.000), tie_row("gpipe", 1, "none", 1.0201)}).schedule, "zb-v");
  // The text says why the choice is not rank 1.
  PlanTable t;
  t.num_stages = 2;
  t.memory_budget_bytes = 1e9;
  t.rows = {tie_row("1f1b", 4, "none", 1.000), tie_row("1f1b", 2, "none", 1.015)};
  t = merge_plan_tables({t});
  EXPECT_THAT(format_plan_table(t, 10), HasSubstr("best: rank 2, 1f1b N=2 recompute none"));
  EXPECT_THAT(format_plan_table(t, 10),
              HasSubstr("(predicted +1.5% against rank 1, within the 2% tie margin: the simplest of the tied plans)"));
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

// Measured reductions (runtime/profile_reduction.hpp) give the link with
// which the reduction model reproduces them: both of two sizes exactly,
// latency and bandwidth positive; through the origin where the line would
// need a negative latency or a single size was timed; bad figures refused.
TEST(PlanGrid, ReductionLinkFittedToMeasuredReductions) {
  const pt::LinkCost truth{2e-5, 1.5e9};
  const std::vector<double> bytes{3e4, 6.3e6};
  for (int d : {2, 4}) {
    const std::vector<double> seconds{pt::replica_reduction_s(bytes[0], d, 1, truth),
                                      pt::replica_reduction_s(bytes[1], d, 1, truth)};
    const pt::LinkCost fit = pt::fit_reduction_link(d, bytes, seconds);
    EXPECT_NEAR(fit.latency_s, truth.latency_s, 1e-12) << "D = " << d;
    EXPECT_NEAR(fit.bandwidth_bytes_per_s, truth.bandwidth_bytes_per_s, 1e-3) << "D = " << d;
    for (size_t i = 0; i < bytes.size(); ++i)
      EXPECT_NEAR(pt::replica_reduction_s(bytes[i], d, 1, fit), seconds[i], 1e-15);
  }
  // The line through these would start below zero: no negative latency, the
  // mean bandwidth instead.
  const pt::LinkCost origin = pt::fit_reduction_link(2, {1e6, 4e6}, {0.5e-3, 4e-3});
  EXPECT_EQ(origin.latency_s, 0.0);
  EXPECT_DOUBLE_EQ(origin.bandwidth_bytes_per_s, 5e6 / 4.5e-3);
  const pt::LinkCost one = pt::fit_reduction_link(2, {6e6}, {4e-3});
  EXPECT_EQ(one.latency_s, 0.0);
  EXPECT_DOUBLE_EQ(pt::replica_reduction_s(6e6, 2, 1, one), 4e-3);
  EXPECT_THROW(pt::fit_reduction_link(1, {6e6}, {4e-3}), pt::InputError);
  EXPECT_THROW(pt::fit_reduction_link(2, {6e6}, {0.0}), pt::InputError);
  EXPECT_THROW(pt::fit_reduction_link(2, {6e6, 1e6}, {4e-3}), pt::InputError);
  // replica_link_of: the profile's fit for its D, else the fallback.
  pt::ModelProfile p;
  p.reductions.push_back({2, bytes, {1e-3, 2e-3}, truth});
  const pt::LinkCost fallback{1e-6, 1e10};
  EXPECT_EQ(pt::replica_link_of(p, 2, fallback).bandwidth_bytes_per_s, truth.bandwidth_bytes_per_s);
  EXPECT_EQ(pt::replica_link_of(p, 4, fallback).bandwidth_bytes_per_s, fallback.bandwidth_bytes_per_s);
}

// After a simulated step each stage's reduction starts at the end of its own
// span; the step waits for the last one, its throughput falls with it, and
// every stage's peak gains the reduction's buffers. Nothing at D = 1.
TEST(PlanGrid, ReductionsAddedAfterEachStagesSpan) {
  pt::ModelProfile p;
  for (int u = 0; u < 4; ++u) {
    pt::UnitCost c;
    c.name = "linear" + std::to_string(u);
    c.grad_bytes = (u + 1) * 1e6;
    p.units.push_back(c);
  }
  pt::SimulationResult r;
  r.span_s = {10e-3, 9e-3};
  r.span_s_max = 10e-3;
  r.step_time_s = 12e-3;
  r.throughput_samples_per_s = 64 / 12e-3;
  r.peak_bytes = {1e6, 1e6};
  pt::SimulationResult same = r;
  EXPECT_EQ(pt::add_replica_reductions(same, p, {2, 2}, 1, 1, {1e-5, 1e9}), 0.0);
  EXPECT_EQ(same.step_time_s, r.step_time_s);
  const pt::LinkCost link{1e-5, 1e9};
  // stage 0: 3 MB from 10 ms; stage 1: 7 MB from 9 ms (the later end)
  const double end0 = 10e-3 + pt::replica_reduction_s(3e6, 2, 1, link);
  const double end1 = 9e-3 + pt::replica_reduction_s(7e6, 2, 1, link);
  ASSERT_GT(end1, end0);
  const double waited = pt::add_replica_reductions(r, p, {2, 2}, 2, 1, link);
  EXPECT_DOUBLE_EQ(waited, end1 - 10e-3);
  EXPECT_DOUBLE_EQ(r.step_time_s, 12e-3 + waited);
  EXPECT_DOUBLE_EQ(r.throughput_samples_per_s, 64 / (12e-3 + waited));
  EXPECT_DOUBLE_EQ(r.peak_bytes[0], 1e6 + pt::replica_reduction_bytes(3e6, 2, 1));
  EXPECT_DOUBLE_EQ(r.peak_bytes[1], 1e6 + pt::replica_reduction_bytes(7e6, 2, 1));
}
