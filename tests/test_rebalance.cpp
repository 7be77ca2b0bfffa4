// test_rebalance.cpp: moving units between running stages changes nothing
// but speed (docs/rebalance.md).
//
// For P in {2, 4} (those that fit in the MPI world), gpipe and 1f1b, the MLP
// and a small GPT, with and without recomputation, SGD and AdamW: a run that
// moves units twice (Trainer::repartition between steps) gives every loss
// and every final parameter BITWISE equal to the same run without moves, and
// so does a run with one rank slowed down (fault injection only sleeps).
// Also: the partition in use and the optimizer's update count after a move,
// a move to the partition in use sends nothing, a bad partition is refused,
// and a move constructs only the arriving units' layers, draws and sets no
// initial values, and keeps the staying layers (same objects, same storage).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <set>

#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"
#include "training_run.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::world_size;

// A run, the partition it ended with and the optimizer updates it made.
struct RunResult : test::RunResult {
  std::vector<int64_t> final_partition;
  int64_t updates = 0;
};

Deck mlp_deck(const std::string& schedule, const std::string& optimizer,
              const std::string& recompute) {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 8;
  d.data.samples = 256;
  d.training.steps = 6;
  d.training.batch_size = 16;
  d.training.optimizer = kind_named<OptimizerKind>(optimizer);
  d.training.lr = optimizer == "sgd" ? 0.05 : 1e-2;
  d.training.warmup_steps = 1;
  d.training.weight_decay = 0.01;
  d.training.grad_clip = 0.5;  // the global norm crosses stages
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.recompute = recompute;
  d.pipeline.timeout_s = 60;
  return d;
}

Deck gpt_deck(const std::string& schedule, const std::string& optimizer,
              const std::string& recompute) {
  Deck d = pt_test::tiny_gpt(mlp_deck(schedule, optimizer, recompute), 6);
  d.training.lr = optimizer == "sgd" ? 0.1 : 3e-3;
  return d;
}

// Two moves, after steps 1 and 3: far from uniform, then across the middle.
std::vector<std::vector<int64_t>> moves_for(int64_t units, int stages) {
  std::vector<int64_t> heavy_first(static_cast<size_t>(stages), 1), heavy_last(heavy_first);
  heavy_first[0] = units - (stages - 1);
  heavy_last.back() = units - (stages - 1);
  return {heavy_first, heavy_last};
}

// Trains on the first `stages` ranks; with `move`, repartitions after steps 1 and 3.
RunResult train_on(const Deck& deck, int stages, bool move) {
  RunResult result;
  test::on_first_ranks(stages, [&](MPI_Comm comm) {
    Trainer trainer(deck, comm);
    const auto targets = moves_for(model_units(deck.model), stages);
    for (int64_t s = 0; s < deck.training.steps; ++s) {
      result.losses.push_back(trainer.train_step(s).loss);
      if (move && (s == 1 || s == 3)) {
        const MoveReport r = trainer.repartition(targets[s == 1 ? 0 : 1], s);
        EXPECT_GT(r.tensors_sent, 0);
        EXPECT_EQ(trainer.partition(), targets[s == 1 ? 0 : 1]);
      }
    }
    result.params = trainer.gather_parameters();
    result.final_partition = trainer.partition();
    result.updates = trainer.optimizer().updates();
  });
  return result;
}

void expect_same(const RunResult& got, const RunResult& want, const std::string& label) {
  test::expect_bitwise(got, want, label);
  EXPECT_EQ(got.updates, want.updates) << label;
}

using DeckMaker = Deck (*)(const std::string&, const std::string&, const std::string&);

void check_moves_change_nothing(DeckMaker make, const char* model, const char* recompute) {
  for (int p : {2, 4}) {
    if (p > world_size()) continue;
    for (const char* schedule : {"gpipe", "1f1b"})
      for (const char* optimizer : {"sgd", "adamw"}) {
        const Deck deck = make(schedule, optimizer, recompute);
        const std::string label = std::string(model) + " P=" + std::to_string(p) + " " + schedule +
                                  " " + optimizer + " recompute " + recompute;
        const RunResult still = train_on(deck, p, false);
        const RunResult moved = train_on(deck, p, true);
        if (test::is_root()) expect_same(moved, still, label);
        if (test::world_rank() < p) {
          EXPECT_EQ(moved.final_partition, moves_for(model_units(deck.model), p)[1]) << label;
          EXPECT_EQ(moved.updates, deck.training.steps) << label;
        }
      }
  }
}

TEST(Rebalance, MlpMovesAreBitwiseInvisible) { check_moves_change_nothing(mlp_deck, "mlp", "none"); }
TEST(Rebalance, MlpMovesWithFullRecompute) { check_moves_change_nothing(mlp_deck, "mlp", "full"); }
TEST(Rebalance, GptMovesAreBitwiseInvisible) { check_moves_change_nothing(gpt_deck, "gpt", "none"); }
TEST(Rebalance, GptMovesWithSelectiveRecompute) {
  check_moves_change_nothing(gpt_deck, "gpt", "selective");
}
TEST(Rebalance, GptMovesWithEvery2Recompute) { check_moves_change_nothing(gpt_deck, "gpt", "every:2"); }

// data_parallel.reduction = "ordered" keeps the gradient reducer active at
// D = 1 (it adds the micro-batches' gradients in order itself): a move must
// give it the new stage's layers (it kept pointers into the destroyed ones:
// "bucket 0 of stage 0 was never started", or a use-after-free).
Deck ordered_mlp_deck(const std::string& schedule, const std::string& optimizer,
                      const std::string& recompute) {
  Deck d = mlp_deck(schedule, optimizer, recompute);
  d.data_parallel.reduction = DpReductionKind::Ordered;
  return d;
}
TEST(Rebalance, MovesWithTheOrderedReductionAreBitwiseInvisible) {
  check_moves_change_nothing(ordered_mlp_deck, "mlp ordered", "none");
}

// This rank's stage as objects: each layer, its unit (-1 pinned) and where
// its parameters' values and optimizer state live.
struct StageObjects {
  std::vector<const Layer*> layers;
  std::vector<int64_t> units;
  std::vector<std::vector<const void*>> storage;  // (layers) value, state1, state2 of each param
};

StageObjects objects_of(const StageModel& stage) {
  StageObjects o;
  for (size_t i = 0; i < stage.layers.size(); ++i) {
    o.layers.push_back(stage.layers[i].get());
    o.units.push_back(stage.layer_unit[i]);
    o.storage.emplace_back();
    for (Param* p : stage.layers[i]->params())
      for (const ParamState& s : param_state(*p)) o.storage.back().push_back(s.tensor->raw());
  }
  return o;
}

// The layers of `o` whose unit is in `units`, in order, and their storage.
StageObjects restricted(const StageObjects& o, const std::set<int64_t>& units) {
  StageObjects r;
  for (size_t i = 0; i < o.layers.size(); ++i) {
    if (units.count(o.units[i]) == 0) continue;
    r.layers.push_back(o.layers[i]);
    r.units.push_back(o.units[i]);
    r.storage.push_back(o.storage[i]);
  }
  return r;
}

// Two moves (moves_for), a step before each and after: on every rank, each
// move constructs exactly the layers of the units that arrive, draws no
// random value and sets no constant (they are received), and the layers
// that stay are the same objects over the same parameter and optimizer
// storage. The run's bits are the other tests' business.
void check_moves_build_only_arrivals(const Deck& deck, int stages, const std::string& label) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, test::world_rank() < stages ? 0 : MPI_UNDEFINED,
                 test::world_rank(), &comm);
  if (comm == MPI_COMM_NULL) return;
  {
    Trainer trainer(deck, comm);
    const auto targets = moves_for(model_units(deck.model), stages);
    int64_t arrived_in_all = 0;
    for (int64_t m = 0; m < 2; ++m) {
      trainer.train_step(m);
      const StageObjects before = objects_of(trainer.stage());
      const LayerBuildCounts built_before = layer_build_counts();
      trainer.repartition(targets[static_cast<size_t>(m)], m);
      const LayerBuildCounts built = layer_build_counts();
      const StageObjects after = objects_of(trainer.stage());
      const std::set<int64_t> held(before.units.begin(), before.units.end());
      std::set<int64_t> kept;
      int64_t arrived = 0;
      for (int64_t u : after.units) {
        if (held.count(u)) kept.insert(u);
        else ++arrived;  // a layer of an arriving unit
      }
      arrived_in_all += arrived;
      const std::string what = label + ", move " + std::to_string(m);
      EXPECT_EQ(built.layers - built_before.layers, arrived) << what << ": layers constructed";
      EXPECT_EQ(built.random_elements - built_before.random_elements, 0) << what;
      EXPECT_EQ(built.constant_elements - built_before.constant_elements, 0) << what;
      const StageObjects stayed_before = restricted(before, kept), stayed = restricted(after, kept);
      EXPECT_EQ(stayed.layers, stayed_before.layers) << what << ": staying layers rebuilt";
      EXPECT_EQ(stayed.storage, stayed_before.storage) << what << ": staying tensors copied";
    }
    trainer.train_step(2);
    EXPECT_GT(arrived_in_all, 0) << label << ": every rank receives units in one of the moves";
  }
  MPI_Comm_free(&comm);
}

TEST(Rebalance, MovesBuildOnlyTheArrivingLayersAndDrawNothing) {
  for (int p : {2, 4}) {
    if (p > world_size()) continue;
    const std::string ranks = " P=" + std::to_string(p);
    check_moves_build_only_arrivals(mlp_deck("1f1b", "adamw", "none"), p, "mlp adamw" + ranks);
    check_moves_build_only_arrivals(gpt_deck("1f1b", "adamw", "selective"), p, "gpt adamw" + ranks);
    check_moves_build_only_arrivals(ordered_mlp_deck("gpipe", "sgd", "none"), p,
                                    "mlp ordered sgd" + ranks);
  }
}

// A slowed rank (fault injection) and its moves change no number either.
TEST(Rebalance, SlowdownChangesNothing) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Deck deck = mlp_deck("1f1b", "adamw", "none");
  const RunResult plain = train_on(deck, 2, false);
  deck.slowdown.rank = 1;
  deck.slowdown.factor = 3.0;
  deck.slowdown.from_step = 2;
  const RunResult slowed = train_on(deck, 2, true);
  if (test::is_root()) expect_same(slowed, plain, "slowed rank 1, two moves");
}

TEST(Rebalance, MoveToTheCurrentPartitionSendsNothing) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  int rank = test::world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return;
  {
    Trainer trainer(mlp_deck("1f1b", "sgd", "none"), comm);
    trainer.train_step(0);
    const MoveReport r = trainer.repartition({4, 4}, 0);
    EXPECT_EQ(r.tensors_sent, 0);
    EXPECT_EQ(r.from, r.to);
    // A partition that does not cover the model is refused on every rank.
    EXPECT_THROW(trainer.repartition({4, 3}, 0), Error);
    EXPECT_THROW(trainer.repartition({8, 0}, 0), Error);
    EXPECT_EQ(trainer.partition(), (std::vector<int64_t>{4, 4}));
  }
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace pt
