// test_recompute.cpp: activation recomputation under the real pipeline.
//
// For every policy (none, selective, every:2, full), on the MLP and the GPT,
// with GPipe and 1F1B on all the ranks of the world:
//   - the trained parameters are bitwise those of policy none;
//   - the measured peak of stashed activations on each stage equals the
//     schedule's peak in-flight micro-batches x the analytic bytes one
//     micro-batch keeps under the policy (formulas in docs/memory.md);
//   - ZB-H1's split backward keeps the weight products' inputs as activations
//     (the same bytes on the MLP) and trains 1F1B's parameters bitwise.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;


Deck base_deck(const std::string& model, const std::string& schedule, const std::string& policy) {
  Deck d;
  d.training.steps = 2;
  d.training.batch_size = 8;
  d.training.lr = 1e-3;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.recompute = policy;
  d.pipeline.timeout_s = 60;
  if (model == "mlp") {
    d.model.mlp.input_dim = 6;
    d.model.mlp.hidden_dim = 10;
    d.model.mlp.output_dim = 3;
    d.model.mlp.depth = 8;
  } else {
    d.model.type = "gpt";
    d.model.gpt.vocab_size = 11;
    d.model.gpt.seq_len = 6;
    d.model.gpt.d_model = 8;
    d.model.gpt.heads = 2;
    d.model.gpt.blocks = 4;
    d.model.gpt.mlp_ratio = 2;
    d.data.type = DataKind::Markov;
    d.data.markov_order = 1;
  }
  return d;
}

struct Outcome {
  std::vector<float> params;               // rank 0
  std::vector<double> stash_peak;          // rank 0: per stage, peak activation bytes of the last step
  std::vector<int> in_flight;              // per stage
};

Outcome train(const Deck& deck) {
  Trainer trainer(deck, MPI_COMM_WORLD);
  StepRecord rec;
  for (int64_t s = 0; s < deck.training.steps; ++s) rec = trainer.train_step(s);
  Outcome out;
  out.params = trainer.gather_parameters();
  for (const auto& stage : rec.rank_peak_bytes)
    out.stash_peak.push_back(stage[static_cast<int>(MemCategory::Activations)]);
  out.in_flight = trainer.schedule_report().peak_in_flight;
  return out;
}

// Bytes one micro-batch keeps on stage `s` of the MLP (rows r, f32).
double mlp_stash(const Deck& d, int s, int stages, const std::string& policy) {
  const auto units = partition_units(d.model.mlp.depth, stages, {});
  StageModel sm = build_stage(d.model, units, s);
  const double r = static_cast<double>(d.training.batch_size / d.pipeline.micro_batches);
  std::vector<double> input_floats;  // per layer of the stage
  Shape shape = sm.input_shape(1);
  for (auto& layer : sm.layers) {
    input_floats.push_back(static_cast<double>(shape_numel(shape)));
    shape = layer->output_shape(shape);
  }
  double floats = 0.0;
  for (size_t i = 0; i < input_floats.size(); ++i) {
    const bool kept = policy == "none" || policy == "selective" || (policy == "every:2" && i % 2 == 0) ||
                      (policy == "full" && i == 0);
    if (kept) floats += input_floats[i];
  }
  if (sm.is_last()) floats += static_cast<double>(d.model.mlp.output_dim);  // loss gradient
  return 4.0 * r * floats;
}

// Bytes one micro-batch keeps on stage `s` of the GPT (docs/memory.md).
double gpt_stash(const Deck& d, int s, int stages, const std::string& policy) {
  const auto units = partition_units(d.model.gpt.blocks, stages, {});
  const double r = static_cast<double>(d.training.batch_size / d.pipeline.micro_batches);
  const double T = d.model.gpt.seq_len, C = d.model.gpt.d_model, H = d.model.gpt.heads, R = d.model.gpt.mlp_ratio;
  const double V = d.model.gpt.vocab_size;
  const bool first = s == 0, last = s == stages - 1;
  const double blocks = static_cast<double>(units[s]);
  // layer inputs, in layer order: [tokens] blocks... [head]
  std::vector<double> inputs;
  if (first) inputs.push_back(T);  // i32 tokens, 4 bytes each like f32
  for (int b = 0; b < units[s]; ++b) inputs.push_back(T * C);
  if (last) inputs.push_back(T * C);
  const double block_saved = T * C * (7.0 + 2.0 * R) + 4.0 * T + H * T * T;
  const double head_saved = T * C + 2.0 * T;
  double floats = 0.0;
  if (policy == "none" || policy == "selective") {
    for (double f : inputs) floats += f;
    floats += blocks * (block_saved - (policy == "selective" ? H * T * T : 0.0));
    if (last) floats += head_saved;
  } else {
    for (size_t i = 0; i < inputs.size(); ++i)
      if ((policy == "every:2" && i % 2 == 0) || (policy == "full" && i == 0)) floats += inputs[i];
  }
  if (last) floats += T * V;  // loss gradient (dL/dlogits)
  return 4.0 * r * floats;
}

void check_model(const std::string& model) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const Outcome reference = train(base_deck(model, schedule, "none"));
    for (const char* policy : {"none", "selective", "every:2", "full"}) {
      const Deck deck = base_deck(model, schedule, policy);
      const Outcome got = train(deck);
      if (world_rank() != 0) continue;
      const std::string label = model + " " + schedule + " " + policy;
      ASSERT_EQ(got.params.size(), reference.params.size());
      EXPECT_EQ(0, std::memcmp(got.params.data(), reference.params.data(),
                               got.params.size() * sizeof(float)))
          << label << ": parameters differ from policy none";
      const int stages = world_size();
      for (int s = 0; s < stages; ++s) {
        const double per_mb = model == "mlp" ? mlp_stash(deck, s, stages, policy)
                                             : gpt_stash(deck, s, stages, policy);
        const double expected = got.in_flight[s] * per_mb;
        std::printf("  %-22s stage %d: peak stash %8.0f B = %d in flight x %6.0f B\n",
                    label.c_str(), s, got.stash_peak[s], got.in_flight[s], per_mb);
        EXPECT_EQ(got.stash_peak[s], expected) << label << " stage " << s;
      }
    }
  }
}

TEST(Recompute, MlpPoliciesGiveIdenticalGradientsAndPredictedMemory) { check_model("mlp"); }

// ZB-H1 splits the backward: from B to W a micro-batch keeps each Linear's
// input and output gradient (counted as activations). On the MLP that is
// exactly what policy none keeps from F to B (every layer input; a GELU's
// input is its Linear's output, the size of that Linear's output gradient),
// so the peak is the schedule's in-flight count (F to W) x the same bytes.
// Under full recomputation the gradients stay bitwise those of 1F1B.
TEST(Recompute, SplitBackwardKeepsTheWeightInputsAsActivations) {
  const Outcome reference = train(base_deck("mlp", "1f1b", "none"));
  for (const char* policy : {"none", "full"}) {
    const Deck deck = base_deck("mlp", "zb-h1", policy);
    const Outcome got = train(deck);
    if (world_rank() != 0) continue;
    EXPECT_EQ(0, std::memcmp(got.params.data(), reference.params.data(),
                             got.params.size() * sizeof(float)))
        << "zb-h1 " << policy << ": parameters differ from 1f1b";
    if (std::string(policy) != "none") continue;
    for (int s = 0; s < world_size(); ++s)
      EXPECT_EQ(got.stash_peak[s], got.in_flight[s] * mlp_stash(deck, s, world_size(), "none"))
          << "zb-h1 stage " << s << " (" << got.in_flight[s] << " in flight from F to W)";
  }
}
TEST(Recompute, GptPoliciesGiveIdenticalGradientsAndPredictedMemory) { check_model("gpt"); }

TEST(Recompute, AutoPicksTheCheapestPolicyThatFitsOrExplains) {
  Deck deck = base_deck("gpt", "1f1b", "auto");
  deck.pipeline.memory_budget_mb = 1024;  // everything fits: no recomputation
  {
    Trainer t(deck, MPI_COMM_WORLD);
    for (const RecomputeChoice& c : t.recompute_choices()) EXPECT_EQ(c.policy, "none");
  }
  deck.pipeline.memory_budget_mb = 1e-4;  // 105 bytes: nothing fits
  try {
    Trainer t(deck, MPI_COMM_WORLD);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no recomputation policy fits the budget on every stage"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 0: needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has 0.0 MiB"), std::string::npos) << msg;
  }
}

// The settings the run reads once: each stage's setting, and the key a
// message names it by (an entry of pipeline.recompute_stages, else
// pipeline.recompute).
TEST(Recompute, SettingsNameEachStagesSettingAndItsKey) {
  Deck deck = base_deck("mlp", "1f1b", "full");
  deck.source_file = "deck.toml";
  deck.key_origin["pipeline.recompute"] = "deck.toml:7";
  deck.key_origin["pipeline.recompute_stages"] = "deck.toml:8";
  const RecomputeSettings one = recompute_settings_for(deck);
  EXPECT_EQ(one.setting(1), "full");
  EXPECT_EQ(one.key_of(1), deck.where("pipeline.recompute"));
  EXPECT_FALSE(one.any_auto);
  deck.pipeline.recompute_stages = {"none", "auto"};
  const RecomputeSettings per_stage = recompute_settings_for(deck);
  EXPECT_EQ(per_stage.setting(0), "none");
  EXPECT_EQ(per_stage.setting(1), "auto");
  EXPECT_EQ(per_stage.key_of(1), deck.where("pipeline.recompute_stages") + " entry 1");
  EXPECT_TRUE(per_stage.any_auto);
}

// Several stages per rank: every stage's fixed policy on every rank, and
// this rank's own in stage order (interleaved: stage s on rank s % ranks).
TEST(Recompute, FixedPoliciesGiveEachRankItsStages) {
  Deck deck = base_deck("mlp", "interleaved", "none");
  deck.pipeline.recompute_stages = {"none", "full", "selective", "every:2"};
  const RecomputeSettings settings = recompute_settings_for(deck);
  const Schedule schedule = generate_schedule(ScheduleKind::Interleaved, 2, 4, 2);
  const RecomputeDecision rank1 = fixed_recompute(settings, schedule, 1);
  ASSERT_EQ(rank1.choices.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(rank1.choices[s].requested, deck.pipeline.recompute_stages[s]);
    EXPECT_EQ(rank1.choices[s].policy, deck.pipeline.recompute_stages[s]);
  }
  ASSERT_EQ(rank1.mine.size(), 2u);
  EXPECT_EQ(rank1.mine[0].name(), "full");
  EXPECT_EQ(rank1.mine[1].name(), "every:2");
  deck.pipeline.recompute_stages[3] = "sometimes";
  try {
    fixed_recompute(recompute_settings_for(deck), schedule, 1);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sometimes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pt
