// test_step_split.cpp: the step's split backward as the profile measures it
// and the planner uses it (pipeline.weight_grad = "step").
//   - StageProbe::probe_step_split runs N micro-batches' B with their weight
//     gradients deferred and then the stage's one pass: the gradients it
//     leaves are those of N fused backwards;
//   - the stage chains give every unit step_input_s and step_weight_s in its
//     stage's measured proportion, so that the planner's sums over each
//     chain's stage are the measured step; off by default;
//   - apply_step_split / step_pass_seconds by hand: pinned units join their
//     stage, a recompute adds to B, the pass counts the micro-batches, and a
//     profile without the figures falls back on the pass profile.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pipetrain/model/data.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/stage_probe.hpp"
#include "pipetrain/runtime/stage_runner.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::is_root;
using test::world_size;

// The small GPT of the GPU tests on the CPU: 4 blocks, 8 sequences a step
// in 4 micro-batches.
Deck small_gpt() { return pt_test::small_gpu_gpt("cpu"); }

// Every parameter gradient of `stage`, on the host; zeroed after reading.
std::vector<std::vector<float>> take_grads(StageModel& stage, Optimizer& optimizer) {
  std::vector<std::vector<float>> grads;
  for (Param* p : stage.params()) {
    settle_grad(cpu_backend(), *p);
    const Tensor host = p->grad.to(Device::CPU);
    grads.emplace_back(host.f32(), host.f32() + host.numel());
  }
  optimizer.zero_grad(cpu_backend());
  return grads;
}

TEST(StepSplitProbe, LeavesTheGradientsOfFusedBackwards) {
  const Deck d = small_gpt();
  const int n = static_cast<int>(d.pipeline.micro_batches);
  StageModel stage = build_stage(d.model, {d.model.gpt.blocks}, 0);  // the whole model
  Optimizer optimizer(d.training, stage.params());
  optimizer.zero_grad(cpu_backend());
  auto data = make_generated_dataset(data_set_config_for(d), Split::Train);
  const ExecutorConfig config = executor_config_for(batch_split_of(d), d.pipeline.timeout_s);
  StageProbe probe(stage, cpu_backend(), parse_recompute_policy("none", "test"), config);
  const StepSplitProbe step = probe.probe_step_split(*data, n);
  EXPECT_GT(step.input_s, 0.0);
  EXPECT_GT(step.weight_s, 0.0);
  const std::vector<std::vector<float>> split = take_grads(stage, optimizer);

  StageRunner runner(stage, parse_recompute_policy("none", "test"), config, cpu_backend(), nullptr);
  PassContext pass;
  pass.data = data.get();
  pass.micro_batches = n;
  runner.begin_pass(pass);
  for (int mb = 0; mb < n; ++mb) {
    runner.forward(mb, runner.data_input(mb));
    runner.backward(mb, std::move(runner.state(mb).grad_output));
  }
  runner.end_pass();
  const std::vector<std::vector<float>> fused = take_grads(stage, optimizer);

  ASSERT_EQ(split.size(), fused.size());
  double worst = 0.0;
  for (size_t i = 0; i < fused.size(); ++i) {
    ASSERT_EQ(split[i].size(), fused[i].size());
    float scale = 0.f;
    for (float g : fused[i]) scale = std::max(scale, std::fabs(g));
    ASSERT_GT(scale, 0.f) << stage.params()[i]->name << " has no gradient";
    for (size_t k = 0; k < fused[i].size(); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(split[i][k] - fused[i][k]) / scale));
  }
  if (is_root()) std::printf("  split vs fused gradients: max relative diff %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);  // the pass sums the micro-batches in one GEMM: another order
}

double sum_over(const ModelProfile& p, size_t first, size_t end, double UnitCost::*field) {
  double total = 0.0;
  for (size_t u = first; u < end; ++u) total += p.units[u].*field;
  return total;
}

TEST(StepSplitChains, UnitsAddUpToTheMeasuredStep) {
  const Deck d = small_gpt();
  ProfileOptions o = ProfileOptions::brief();
  o.stage_chains = false;
  const ModelProfile uncalibrated = profile_model(d, cpu_backend(), MPI_COMM_WORLD, o);
  ModelProfile without = uncalibrated;
  const ChainCalibration plain = calibrate_with_stage_chains(without, d, cpu_backend(), MPI_COMM_WORLD, o);
  EXPECT_TRUE(plain.step_input_s.empty());
  EXPECT_FALSE(has_step_split(without));
  EXPECT_EQ(plain.text.find("weight_grad step"), std::string::npos) << plain.text;

  o.step_weight_grads = true;
  ModelProfile p = uncalibrated;
  const ChainCalibration cal = calibrate_with_stage_chains(p, d, cpu_backend(), MPI_COMM_WORLD, o);
  const int stages = std::min(world_size(), 4);
  ASSERT_EQ(cal.step_input_s.size(), static_cast<size_t>(stages));
  ASSERT_EQ(cal.step_weight_s.size(), static_cast<size_t>(stages));
  EXPECT_NE(cal.text.find(", weight_grad step (N=4) B x "), std::string::npos) << cal.text;
  ASSERT_TRUE(has_step_split(p));
  std::vector<StageCost> costs = stage_costs(p, cal.units_per_stage, {PlanRecompute::parse("none")});
  const std::vector<double> pass = apply_step_split(p, cal.units_per_stage, 4, costs);
  size_t first = 0;
  for (int s = 0; s < stages; ++s) {
    EXPECT_GT(cal.step_input_s[s], 0.0);
    EXPECT_GT(cal.step_weight_s[s], 0.0);
    // embedding with stage 0, head with the last stage
    const size_t end = first + static_cast<size_t>(cal.units_per_stage[s]) + (s == 0) + (s + 1 == stages);
    const double tolerance = 1e-9 * (cal.step_input_s[s] + cal.step_weight_s[s]);
    EXPECT_NEAR(sum_over(p, first, end, &UnitCost::step_input_s), cal.step_input_s[s], tolerance);
    EXPECT_NEAR(sum_over(p, first, end, &UnitCost::step_weight_s), cal.step_weight_s[s], tolerance);
    EXPECT_NEAR(costs[s].input_s, cal.step_input_s[s], tolerance) << "stage " << s;
    EXPECT_NEAR(pass[s], 4 * cal.step_weight_s[s], 4 * tolerance) << "stage " << s;
    for (size_t u = first; u < end; ++u)  // the stage's proportion, unit by unit
      EXPECT_NEAR(p.units[u].step_input_s / p.units[u].backward_s, cal.step_input_s[s] / cal.backward_s[s],
                  1e-12) << p.units[u].name;
    first = end;
  }
  EXPECT_EQ(first, p.units.size());
  if (is_root()) std::printf("  %s\n", cal.text.c_str());
}

// Embedding (pinned), 4 blocks, head (pinned); unit u: backward 10 + u,
// recompute 1, step B 5 + u, step W 0.5 + u.
ModelProfile hand_profile() {
  ModelProfile p;
  p.model = "hand";
  for (int u = 0; u < 6; ++u) {
    UnitCost c;
    c.name = "unit" + std::to_string(u);
    c.partitionable = u > 0 && u < 5;
    c.forward_s = 1.0;
    c.backward_s = 10.0 + u;
    c.recompute_s = c.recompute_end_s = 1.0;
    c.step_input_s = 5.0 + u;
    c.step_weight_s = 0.5 + u;
    p.units.push_back(c);
  }
  return p;
}

TEST(StepSplitPlan, StagesSumTheirUnitsByHand) {
  const ModelProfile p = hand_profile();
  ASSERT_TRUE(has_step_split(p));
  const std::vector<PlanRecompute> full = {PlanRecompute::parse("full")};
  std::vector<StageCost> costs = stage_costs(p, {1, 3}, full);
  const std::vector<double> pass = step_pass_seconds(p, nullptr, 0.4, {1, 3}, full, 8, costs);
  // stage 0: units 0, 1; stage 1: units 2..5
  ASSERT_EQ(pass.size(), 2u);
  EXPECT_DOUBLE_EQ(costs[0].input_s, 5 + 6 + costs[0].recompute_s);
  EXPECT_DOUBLE_EQ(costs[1].input_s, 7 + 8 + 9 + 10 + costs[1].recompute_s);
  EXPECT_GT(costs[0].recompute_s, 0.0);
  EXPECT_DOUBLE_EQ(pass[0], 8 * (0.5 + 1.5));
  EXPECT_DOUBLE_EQ(pass[1], 8 * (2.5 + 3.5 + 4.5 + 5.5));

  // Without the figures: the pass profile's W share, B left to the share.
  ModelProfile unmeasured = p;
  unmeasured.units[3].step_input_s = -1.0;
  EXPECT_FALSE(has_step_split(unmeasured));
  std::vector<StageCost> plain = stage_costs(unmeasured, {1, 3}, full);
  const std::vector<double> fallback = step_pass_seconds(unmeasured, &unmeasured, 0.4, {1, 3}, full, 8, plain);
  ASSERT_EQ(fallback, step_weight_seconds(unmeasured, 0.4, {1, 3}, full));
  for (const StageCost& c : plain) EXPECT_LT(c.input_s, 0.0);
  EXPECT_TRUE(step_pass_seconds(unmeasured, nullptr, 0.4, {1, 3}, full, 8, plain).empty());
}

}  // namespace
}  // namespace pt
