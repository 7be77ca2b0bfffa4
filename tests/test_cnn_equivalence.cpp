// test_cnn_equivalence.cpp: the CNN family (model.type = "cnn", group
// normalisation) trained on 2 pipeline ranks under GPipe, 1F1B,
// interleaved (2 virtual stages), ZB-H1 and ZB-V, with recompute none and full, gives the single-process model bit for bit:
// every parameter, every step's loss and gradient norm (clipping is on).
// Group normalisation normalises each image alone, so a sample's activations
// do not depend on its micro-batch, and every gradient is accumulated in
// ascending micro-batch order on every stage, as for the MLP and the GPT
// (test_schedule_equivalence.cpp). A tiny network: 6 x 6 images of 2
// channels, 3 classes, width 4, 2 stages of 2 blocks (the second stage's
// first block downsamples through a projection), 8 images a step in 4
// micro-batches, 3 AdamW steps. Also: the images' loss floor is the
// teacher's mean label entropy, strictly between 0 and log(classes).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>

#include "mpi_test_util.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
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

TEST(CnnEquivalence, TwoRanksEveryScheduleEqualsOneProcess) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Deck base = tiny_cnn();
  for (const char* recompute : {"none", "full"}) {
    Deck reference = base;
    reference.pipeline.recompute = recompute;
    test::RunResult alone;
    if (is_root()) alone = test::train_alone(reference);
    // Interleaved: 2 virtual stages per rank, one block each.
    for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}) {
      Deck deck = reference;
      deck.pipeline.schedule = kind_named<ScheduleKind>(schedule);
      deck.pipeline.virtual_stages = std::string(schedule) == "interleaved" ? 2 : 1;
      const test::RunResult piped = test::train_on(deck, 2);
      if (!is_root()) continue;
      const std::string label = std::string("cnn ") + schedule + " P=2 recompute " + recompute;
      test::expect_bitwise(piped, alone, label, /*norms=*/true);
      std::printf("  %s: %zu parameters, losses %.6f %.6f %.6f, bitwise the single process\n",
                  label.c_str(), piped.params.size(), piped.losses[0], piped.losses[1],
                  piped.losses[2]);
    }
  }
}

TEST(CnnEquivalence, ImageLossFloorIsTheTeachersEntropy) {
  DataSetConfig config = data_set_config_for(tiny_cnn());
  const auto floor = make_dataset(config, Split::Eval)->loss_floor();
  ASSERT_TRUE(floor.has_value());
  EXPECT_GT(floor->window, 0.0);
  EXPECT_LT(floor->window, std::log(3.0));
  // Labels are the teacher's draws: each in range, the same for any request size.
  const auto data = make_dataset(config, Split::Train);
  Tensor all = data->targets(0, 16), part = data->targets(5, 3);
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(all.i32()[i] >= 0 && all.i32()[i] < 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(part.i32()[i], all.i32()[5 + i]);
}

}  // namespace
}  // namespace pt
