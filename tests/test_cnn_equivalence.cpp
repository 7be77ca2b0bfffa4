// test_cnn_equivalence.cpp: the CNN family (model.type = "cnn", group
// normalisation) and the hybrid family (model.type = "hybrid": the CNN's
// residual blocks, then Transformer blocks on its patch tokens), each trained
// on P = 2 or 4 pipeline ranks (the world's) under GPipe, 1F1B, interleaved
// (2 virtual stages), ZB-H1 and ZB-V, with recompute none and full, give the
// single-process model bit for bit:
// every parameter, every step's loss and gradient norm (clipping is on).
// Group normalisation normalises each image alone, so a sample's activations
// do not depend on its micro-batch, and every gradient is accumulated in
// ascending micro-batch order on every stage, as for the MLP and the GPT
// (test_schedule_equivalence.cpp); the hybrid's LayerNorm and attention work
// within one image's tokens. A tiny network: 6 x 6 images of 2 channels, 3
// classes, width 4, 2 network stages of P / 2 blocks each for the hybrid, P
// for the cnn (the second stage's first block downsamples through a
// projection), 8 images a step in 4 micro-batches, 3 AdamW steps. The same
// matrix with batch normalisation (model.norm = "batch", deferred: running
// statistics committed once per step), and a batch-normalised run resumed
// from a checkpoint bitwise equal to an uninterrupted one. Also: the
// images' loss floor is the teacher's mean label entropy, strictly between
// 0 and log(classes). And the cnn with GELU (model.activation) in its
// blocks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "test_decks.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

using test::is_root;
using test::world_size;

Deck tiny_cnn() {
  Deck d = pt_test::tiny_mlp(8);  // AdamW, warm-up, weight decay, clipping, 3 steps
  d.model.type = "cnn";
  d.model.activation = ActivationKind::Relu;  // the family's default (tiny_mlp's is gelu)
  d.model.cnn.image_size = 6;
  d.model.cnn.in_channels = 2;
  d.model.cnn.classes = 3;
  d.model.cnn.width = 4;
  d.model.cnn.stages = 2;
  d.model.cnn.stage_blocks = 2;
  d.model.cnn.norm_groups = 2;
  d.data.type = DataKind::Images;
  d.data.samples = 64;
  d.pipeline.micro_batches = 4;
  return d;
}

// `d` (tiny_cnn) becomes the tiny hybrid: the cnn's stem and 2 network
// stages of `conv_blocks` / 2 residual blocks (6 x 6 images down to 3 x 3: 9
// tokens of 8 channels), then `transformer_blocks` Transformer blocks of
// width 8, 2 heads.
Deck tiny_hybrid(Deck d, int64_t conv_blocks, int64_t transformer_blocks) {
  d.model.type = "hybrid";
  d.model.cnn.stage_blocks = conv_blocks / 2;
  d.model.gpt.d_model = 8;
  d.model.gpt.heads = 2;
  d.model.gpt.mlp_ratio = 2;
  d.model.gpt.blocks = transformer_blocks;
  return d;
}

// `base` on P = the world's ranks under every schedule (interleaved and
// ZB-V with 2 stages per rank), recompute none and full, against one
// process; `label` names the model. Needs 2 P partition units.
void expect_every_schedule_bitwise(const Deck& base, const std::string& model,
                                   const std::vector<std::string>& recomputes = {"none", "full"}) {
  const int P = world_size();
  for (const std::string& recompute : recomputes) {
    Deck reference = base;
    reference.pipeline.recompute = recompute;
    test::RunResult alone;
    if (is_root()) alone = test::train_alone(reference);
    for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}) {
      Deck deck = reference;
      deck.pipeline.schedule = kind_named<ScheduleKind>(schedule);
      deck.pipeline.virtual_stages = std::string(schedule) == "interleaved" ? 2 : 1;
      const test::RunResult piped = test::train_on(deck, P);
      if (!is_root()) continue;
      const std::string label = model + " " + schedule + " P=" + std::to_string(P) +
                                " recompute " + recompute;
      test::expect_bitwise(piped, alone, label, /*norms=*/true);
      std::printf("  %s: %zu parameters, losses %.6f %.6f %.6f, bitwise the single process\n",
                  label.c_str(), piped.params.size(), piped.losses[0], piped.losses[1],
                  piped.losses[2]);
    }
  }
}

// At 2 ranks the tiny cnn has 4 blocks (interleaved: one per virtual
// stage); at 4 ranks 8 (2 network stages of 4 blocks).
TEST(CnnEquivalence, EveryScheduleEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  Deck deck = tiny_cnn();
  deck.model.cnn.stage_blocks = world_size();
  expect_every_schedule_bitwise(deck, "cnn");
}

// model.activation = "gelu": a block keeps GELU's input and recomputes its
// output in the backward (conv_layers.cpp), with recomputation too.
TEST(CnnEquivalence, GeluEveryScheduleEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  Deck deck = tiny_cnn();
  deck.model.cnn.stage_blocks = world_size();
  deck.model.activation = ActivationKind::Gelu;
  expect_every_schedule_bitwise(deck, "cnn gelu");
}

// The hybrid: at 2 ranks 2 residual and 2 Transformer blocks (interleaved's
// 4 stages: conv, conv, patch tokens + attention, attention; the other
// schedules cut between the residual and the Transformer blocks); at 4
// ranks 4 and 4. Also selective recomputation, which drops the attention
// probabilities (the cnn's layers drop nothing: there it is "none").
TEST(CnnEquivalence, HybridEveryScheduleEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  const int64_t half = world_size();
  expect_every_schedule_bitwise(tiny_hybrid(tiny_cnn(), half, half), "hybrid",
                                {"none", "selective", "full"});
}

// The same with model.causal = false: the Transformer blocks attend over
// every token (the masked softmax sees whole rows, forward, backward and in
// a selective recomputation).
TEST(CnnEquivalence, HybridAttendingToEveryTokenEveryScheduleEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  Deck deck = tiny_hybrid(tiny_cnn(), world_size(), world_size());
  deck.model.gpt.causal = false;
  expect_every_schedule_bitwise(deck, "hybrid over every token", {"none", "selective", "full"});
}

// Deferred batch normalisation (model.norm = "batch"): the statistics of
// each micro-batch in training, the running statistics committed once per
// step. Pipelined under every schedule and recompute policy, every
// parameter -- the running statistics among them (Param::running_statistic,
// gathered like the weights) -- and every loss are those of one process
// running the same micro-batches. The hybrid's stem and residual blocks
// use it too.
TEST(CnnEquivalence, BatchNormEveryScheduleEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  Deck cnn = tiny_cnn();
  cnn.model.cnn.stage_blocks = world_size();
  cnn.model.cnn.norm = NormKind::Batch;
  expect_every_schedule_bitwise(cnn, "cnn batch-norm");
  Deck hybrid = tiny_hybrid(tiny_cnn(), world_size(), world_size());
  hybrid.model.cnn.norm = NormKind::Batch;
  expect_every_schedule_bitwise(hybrid, "hybrid batch-norm");
}

// `deck` as D = deck.data_parallel.replicas replicas of a pipeline on the
// first `ranks` ranks of the world; world rank 0 (replica 0's first
// pipeline rank) returns the parameters and losses.
test::RunResult train_replicated(const Deck& deck, int ranks) {
  test::RunResult r;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) {
    ProcessGrid grid(comm, static_cast<int>(deck.data_parallel.replicas));
    Trainer trainer(deck, grid);
    r = test::train_steps(trainer, deck);
  });
  return r;
}

// Deferred batch normalisation with D data-parallel replicas: every replica
// normalises its own micro-batches, and the replicas gather their kept
// statistics each step, so every replica commits those of the global batch
// in global micro-batch order. With reduction "ordered", P x D (2 ranks:
// 1 x 2; 4 ranks: 2 x 2 and 1 x 4) of N = 2 micro-batches each is bitwise
// one process running all 2 D micro-batches: parameters with the running
// statistics, losses and norms. Without the gather each replica would commit
// its own half, and replica 0's statistics would miss the others'. The
// replica check runs every step (data_parallel.check_every = 1), so the
// replicas' parameters, running statistics included, agree bitwise or the
// run stops.
TEST(CnnEquivalence, BatchNormWithReplicasEqualsOneProcess) {
  if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  Deck base = tiny_cnn();
  base.model.cnn.norm = NormKind::Batch;
  base.data_parallel.reduction = DpReductionKind::Ordered;
  base.data_parallel.check_every = 1;
  for (int d : {2, 4}) {
    if (d > world_size()) continue;
    Deck alone_deck = base;
    alone_deck.pipeline.micro_batches = 2 * d;
    test::RunResult alone;
    if (is_root()) alone = test::train_alone(alone_deck);
    Deck deck = base;
    deck.pipeline.micro_batches = 2;
    deck.data_parallel.replicas = d;
    const test::RunResult replicated = train_replicated(deck, world_size());
    if (!is_root()) continue;
    const std::string label = "cnn batch-norm P=" + std::to_string(world_size() / d) +
                              " x D=" + std::to_string(d);
    test::expect_bitwise(replicated, alone, label, /*norms=*/true);
    std::printf("  %s, N = 2 per replica: losses %.6f %.6f %.6f, bitwise one process with %d "
                "micro-batches\n", label.c_str(), replicated.losses[0], replicated.losses[1],
                replicated.losses[2], 2 * d);
  }
}

// The values of parameter `name` of a one-process trainer's stage.
std::vector<float> param_values(const Trainer& trainer, const std::string& name) {
  for (const auto& layer : trainer.stage().layers)
    for (Param* p : layer->params())
      if (p->name == name) return std::vector<float>(p->value.f32(), p->value.f32() + p->value.numel());
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// The trainer wires the deferred statistics end to end: after one step the
// stem's running statistics (the first normalisation, whose input, the stem
// convolution of the images, does not depend on the micro-batch split) are
// those of the whole batch whether it ran as 4 micro-batches or as 1, up to
// rounding (1e-5 relative: each micro-batch's statistics are rounded to
// float once). Keeping one micro-batch's statistics only, or committing per
// micro-batch, or not at all, misses by far more (0.1 of the step's mean
// and variance move them from 0 and 1 by about 0.1).
TEST(CnnEquivalence, BatchNormStatisticsCoverTheStepsMicroBatches) {
  if (!is_root()) return;
  Deck deck = tiny_cnn();
  deck.model.cnn.norm = NormKind::Batch;
  deck.training.steps = 1;
  std::vector<float> mean[2], var[2];
  for (int i = 0; i < 2; ++i) {
    deck.pipeline.micro_batches = i == 0 ? 4 : 1;
    Trainer trainer(deck, MPI_COMM_SELF);
    trainer.train_step(0);
    mean[i] = param_values(trainer, "stem.norm.running_mean");
    var[i] = param_values(trainer, "stem.norm.running_var");
  }
  ASSERT_EQ(mean[0].size(), 4u);
  ASSERT_EQ(var[0].size(), 4u);
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_NEAR(mean[0][c], mean[1][c], 1e-5 * std::max(1.f, std::abs(mean[1][c]))) << c;
    EXPECT_NEAR(var[0][c], var[1][c], 1e-5 * var[1][c]) << c;
    EXPECT_GT(std::abs(var[1][c] - 1.f), 1e-3) << "channel " << c << ": never committed";
  }
}

// Steps [from, to) on the first `ranks` ranks, loading `load` first when
// given and saving into `save_dir` at the end when given; the held-out loss
// at the end (evaluation uses the running statistics).
test::RunResult segment(Deck deck, int ranks, int64_t from, int64_t to, const std::string& load,
                        const std::string& save_dir, double& eval_loss) {
  test::RunResult run;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) {
    Trainer trainer(deck, comm);
    const std::string text = deck_to_toml(deck);
    if (!load.empty()) load_checkpoint(load, LoadMode::Resume, deck, text, trainer, comm);
    for (int64_t s = from; s < to; ++s) test::record_step(run, trainer.train_step(s));
    if (!save_dir.empty()) {
      deck.output.checkpoint_dir = save_dir;
      save_checkpoint(deck, text, trainer, to, comm);
    }
    eval_loss = trainer.evaluate();
    run.params = trainer.gather_parameters();
  });
  return run;
}

std::string shared_temp_dir() {
  char buf[256] = {0};
  if (is_root()) {
    std::snprintf(buf, sizeof buf, "%s",
                  (std::filesystem::temp_directory_path() / "pt_bn_XXXXXX").c_str());
    if (mkdtemp(buf) == nullptr) buf[0] = 0;
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

// 2 steps, a checkpoint, 2 more resumed from it: bitwise the 4 steps of an
// uninterrupted run (parameters with the running statistics, losses), and
// the same held-out loss after them.
TEST(CnnEquivalence, BatchNormResumesBitwise) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Deck deck = tiny_cnn();
  deck.model.cnn.norm = NormKind::Batch;
  deck.training.steps = 4;
  deck.training.eval_batches = 1;
  deck.training.eval_every = 4;  // the run keeps held-out data for evaluate()
  deck.output.checkpoint_keep = 10;
  const std::string dir = shared_temp_dir();
  double straight_eval = 0.0, first_eval = 0.0, resumed_eval = 0.0;
  const test::RunResult straight = segment(deck, 2, 0, 4, "", "", straight_eval);
  segment(deck, 2, 0, 2, "", dir + "/ckpt", first_eval);
  const test::RunResult resumed = segment(deck, 2, 2, 4, dir + "/ckpt", "", resumed_eval);
  MPI_Barrier(MPI_COMM_WORLD);
  if (!is_root()) return;
  std::filesystem::remove_all(dir);
  ASSERT_EQ(resumed.params.size(), straight.params.size());
  EXPECT_EQ(test::bitwise_differences(resumed.params, straight.params), 0u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_TRUE(test::same_bits(resumed.losses[s], straight.losses[2 + s])) << "step " << 2 + s;
  EXPECT_TRUE(test::same_bits(resumed_eval, straight_eval))
      << resumed_eval << " vs " << straight_eval;
  EXPECT_NE(first_eval, straight_eval);  // the running statistics and weights moved
  std::printf("  batch norm: resumed at step 2, bitwise; held-out loss %.6f\n", resumed_eval);
}

TEST(CnnEquivalence, ImageLossFloorIsTheTeachersEntropy) {
  DataSetConfig config = data_set_config_for(tiny_cnn());
  const auto floor = make_generated_dataset(config, Split::Eval)->loss_floor();
  ASSERT_TRUE(floor.has_value());
  EXPECT_GT(floor->window, 0.0);
  EXPECT_LT(floor->window, std::log(3.0));
  // Labels are the teacher's draws: each in range, the same for any request size.
  const auto data = make_generated_dataset(config, Split::Train);
  Tensor all = data->targets(0, 16), part = data->targets(5, 3);
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(all.i32()[i] >= 0 && all.i32()[i] < 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(part.i32()[i], all.i32()[5 + i]);
}

}  // namespace
}  // namespace pt
