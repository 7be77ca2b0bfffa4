// test_activation_copies.cpp: the activations kept for the backward only as
// GEMM operands, stored in the GEMM precision (training.activation_copies,
// model/activation_copies.hpp), on the CPU backend, whose bf16 and fp16
// emulation rounds exactly as the GPU does:
//
//  - training with activation copies equals training without, bit for bit
//    (losses, gradient norms, parameters): bf16 and fp16, the MLP and the
//    GPT (reference and fused attention), at 1 rank and on the world, with
//    recomputation none, selective, every:2 and full, with a split backward
//    (zb-h1) and per-step weight gradients, through a checkpoint resume and
//    a rebalancing move (whose arriving layers keep copies too);
//  - a counting backend shows what ran: with copies every weight-gradient
//    GEMM reads its input operand stored in bf16/fp16, one cast per kept
//    activation is made in the forward, and the casts of a step (round_to
//    calls plus f32 operands the GEMMs round) are those without copies less
//    one per weight-gradient GEMM: the backward's recast is gone;
//  - the allocator's counters show the stash shrink by exactly half the
//    bytes of the copied tensors (a Linear's input; a block's ln1, attention
//    (reference or fused), ln2 and GELU outputs; the head's ln_f output), in
//    the run's peaks and in
//    the profile the planner reads, which then predicts the run's stash;
//  - the fused attention backward gives the same from y's copy as from y;
//  - the deck key: echoed in the resolved deck, refused outside bf16/fp16.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "bitwise.hpp"
#include "error_of.hpp"
#include "forwarding_backend.hpp"
#include "mpi_test_util.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/activation_copies.hpp"
#include "pipetrain/tensor/fused_attention_kernels.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "test_decks.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

const Precision kHalves[] = {Precision::Bf16, Precision::Fp16};

enum class Model { Mlp, Gpt, GptFused };
const Model kModels[] = {Model::Mlp, Model::Gpt, Model::GptFused};

std::string model_name(Model m) {
  return m == Model::Mlp ? "mlp" : (m == Model::Gpt ? "gpt" : "gpt fused");
}

// 4 Linear layers 12 -> 24 -> 24 -> 24 -> 5, or the tiny GPT (2 blocks,
// T 8, C 16, MLP ratio 2); 16 samples a step in 4 micro-batches of 4.
Deck deck_of(Model m, Precision p, bool copies) {
  Deck d = pt_test::tiny_mlp(16);
  d.model.mlp.depth = 4;
  d.training.steps = 3;
  d.training.precision = p;
  d.training.activation_copies = copies;
  d.pipeline.micro_batches = 4;
  if (m == Model::Mlp) return d;
  d = pt_test::tiny_gpt(d, 2);
  d.training.lr = 3e-3;
  if (m == Model::GptFused) d.model.gpt.attention = AttentionKind::Fused;
  return d;
}

std::vector<int> rank_counts() {
  return world_size() > 1 ? std::vector<int>{1, world_size()} : std::vector<int>{1};
}

// `deck` on the first `ranks` ranks, on the CPU backend of its precision.
test::RunResult train_emulated(const Deck& deck, int ranks) {
  test::RunResult r;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) {
    const auto be = make_cpu_backend(deck.training.precision);
    ComputeSetup setup;
    setup.backend = be.get();
    Trainer trainer(deck, comm, setup);
    r = test::train_steps(trainer, deck);
  });
  return r;
}

// Copies on against off, for `change` applied to both decks.
template <class Change>
void expect_copies_change_nothing(Model m, Precision p, int ranks, const std::string& what,
                                  const Change& change) {
  Deck on = deck_of(m, p, true), off = deck_of(m, p, false);
  change(on);
  change(off);
  const std::string label = std::string(kind_name(p)) + " " + model_name(m) + " " + what +
                            " on " + std::to_string(ranks) + " ranks";
  test::expect_bitwise(train_emulated(on, ranks), train_emulated(off, ranks), label, true);
}

TEST(ActivationCopies, TrainingWithCopiesIsTrainingWithoutBitwise) {
  for (Precision p : kHalves)
    for (Model m : kModels)
      for (int ranks : rank_counts())
        for (const char* policy : {"none", "selective", "every:2", "full"})
          expect_copies_change_nothing(m, p, ranks, std::string("recompute ") + policy,
                                       [&](Deck& d) { d.pipeline.recompute = policy; });
}

// The weight-gradient GEMMs read the kept copies from the deferred tensors of
// a split backward, and from their per-step stacks.
TEST(ActivationCopies, SplitBackwardAndPerStepWeightGradientsAreUnchanged) {
  for (Precision p : kHalves)
    for (Model m : {Model::Mlp, Model::Gpt}) {
      expect_copies_change_nothing(m, p, world_size(), "weight_grad step", [](Deck& d) {
        d.pipeline.weight_grad = WeightGradKind::Step;
      });
      if (world_size() < 2) continue;  // zb-h1 pipelines 2 stages or more
      expect_copies_change_nothing(m, p, world_size(), "zb-h1", [](Deck& d) {
        d.pipeline.schedule = ScheduleKind::ZbH1;
      });
    }
}

// A directory of rank 0's temporary directory, the same path on every rank;
// removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    std::string path;
    if (world_rank() == 0) {
      std::string pattern = (std::filesystem::temp_directory_path() / "pt_actcopies_XXXXXX").string();
      if (mkdtemp(pattern.data()) != nullptr) path = pattern;
    }
    int size = static_cast<int>(path.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<size_t>(size));
    MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~ScratchDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Steps [0, 2) with copies, a checkpoint, a new run resumed from it with
// copies for steps [2, 4): bitwise the uninterrupted run without copies.
TEST(ActivationCopies, AResumedRunIsTheUninterruptedRunWithoutCopies) {
  for (Precision p : kHalves)
    for (Model m : {Model::Mlp, Model::Gpt})
      for (int ranks : rank_counts()) {
        const std::string label = std::string(kind_name(p)) + " " + model_name(m) + " resume on " +
                                  std::to_string(ranks) + " ranks";
        Deck straight = deck_of(m, p, false);
        straight.training.steps = 4;
        const test::RunResult want = train_emulated(straight, ranks);
        ScratchDir dir;
        Deck deck = deck_of(m, p, true);
        deck.training.steps = 4;
        deck.output.checkpoint_dir = dir.path() + "/ckpt";
        const std::string text = deck_to_toml(deck);
        test::RunResult resumed;
        test::on_first_ranks(ranks, [&](MPI_Comm comm) {
          const auto be = make_cpu_backend(p);
          ComputeSetup setup;
          setup.backend = be.get();
          {
            Trainer first(deck, comm, setup);
            for (int64_t s = 0; s < 2; ++s) test::record_step(resumed, first.train_step(s));
            save_checkpoint(deck, text, first, 2, comm);
          }
          Trainer second(deck, comm, setup);
          load_checkpoint("latest", LoadMode::Resume, deck, text, second, comm);
          for (int64_t s = 2; s < deck.training.steps; ++s)
            test::record_step(resumed, second.train_step(s));
          resumed.params = second.gather_parameters();
        });
        wait_for_checkpoint_pruning();
        test::expect_bitwise(resumed, want, label, true);
      }
}

// A rebalancing move after step 1 (2 ranks): the layers of the arriving
// units keep their inputs as copies too; bitwise the run without copies that
// makes the same move.
TEST(ActivationCopies, ARebalancingMoveKeepsCopiesOnTheArrivingLayers) {
  if (world_size() < 2) GTEST_SKIP() << "a move needs 2 ranks";
  for (Precision p : kHalves) {
    test::RunResult got[2];
    for (bool copies : {true, false}) {
      Deck d = deck_of(Model::Mlp, p, copies);
      d.training.steps = 4;
      d.pipeline.partition = {3, 1};
      d.pipeline.partition_strategy = PartitionStrategy::Explicit;
      test::on_first_ranks(2, [&](MPI_Comm comm) {
        const auto be = make_cpu_backend(p);
        ComputeSetup setup;
        setup.backend = be.get();
        Trainer trainer(d, comm, setup);
        test::RunResult& r = got[copies ? 0 : 1];
        for (int64_t s = 0; s < d.training.steps; ++s) {
          test::record_step(r, trainer.train_step(s));
          if (s == 1) trainer.repartition({1, 3}, s);
        }
        ASSERT_EQ(trainer.partition(), (std::vector<int64_t>{1, 3}));
        for (const StageModel& stage : trainer.stages())
          for (const auto& layer : stage.layers)
            EXPECT_EQ(layer->activation_copies(), copies)
                << kind_name(p) << " stage " << stage.stage << " layer " << layer->kind();
        r.params = trainer.gather_parameters();
      });
    }
    test::expect_bitwise(got[0], got[1], std::string(kind_name(p)) + " with a move", true);
  }
}

// ---- a counting backend ------------------------------------------------------

struct Counts {
  int round_to = 0;                // casts made by round_to (weight and activation copies)
  int f32_operands = 0;            // GEMM operands in f32: each one rounded inside its GEMM
  int forward_gemms = 0;           // y = x W^T (op(b) transposed, c no gradient)
  int forward_f32_operands = 0;    // ... their f32 operands
  int input_grad_gemms = 0;        // dx = dy W (neither transposed, c no gradient)
  int weight_grad_gemms = 0;       // dW += dy^T x: c is a parameter's gradient
  int weight_grad_low_inputs = 0;  // ... whose input operand x (b) is bf16/fp16
  int casts() const { return round_to + f32_operands; }
};

// Computes on the CPU backend of a precision (its kernel groups too; their
// GEMMs are not counted), counting casts and GEMM operands. `grads` holds
// the data of this rank's parameter gradients.
class GemmCounter final : public test::CountingBackend {
 public:
  using CountingBackend::CountingBackend;
  Counts counts;
  std::set<const void*> grads;

 protected:
  void counted_round_to() override { ++counts.round_to; }
  void counted_matmul(const Tensor& a, const Tensor& b, bool tb, const Tensor& c) override {
    const int f32 = (a.dtype() == DType::F32 ? 1 : 0) + (b.dtype() == DType::F32 ? 1 : 0);
    counts.f32_operands += f32;
    if (grads.count(c.raw())) {
      ++counts.weight_grad_gemms;
      counts.weight_grad_low_inputs += b.dtype() != DType::F32 ? 1 : 0;
    } else if (tb) {
      ++counts.forward_gemms;
      counts.forward_f32_operands += f32;
    } else {
      ++counts.input_grad_gemms;
    }
  }
};

// Per step on this rank.
std::vector<Counts> count_steps(const Deck& deck, MPI_Comm comm) {
  const auto cpu = make_cpu_backend(deck.training.precision);
  GemmCounter be(*cpu);
  ComputeSetup setup;
  setup.backend = &be;
  Trainer trainer(deck, comm, setup);
  for (Param* p : trainer.params()) be.grads.insert(p->grad.raw());
  std::vector<Counts> steps;
  for (int64_t s = 0; s < deck.training.steps; ++s) {
    be.counts = Counts();
    trainer.train_step(s);
    steps.push_back(be.counts);
  }
  return steps;
}

TEST(ActivationCopies, TheWeightGradientGemmsReadTheKeptCopyAndNothingIsCastTwice) {
  for (Precision p : kHalves)
    for (Model m : kModels)
      for (const char* policy : {"none", "full"}) {
        Deck on = deck_of(m, p, true);
        on.pipeline.recompute = policy;
        on.training.loss_scale = 1.0;  // fp16: no skipped step, whose casts would differ
        Deck off = on;
        off.training.activation_copies = false;
        test::on_first_ranks(world_size(), [&](MPI_Comm comm) {
          const std::vector<Counts> with = count_steps(on, comm), without = count_steps(off, comm);
          for (size_t s = 0; s < with.size(); ++s) {
            const std::string at = std::string(kind_name(p)) + " " + model_name(m) + " recompute " +
                                   policy + " step " + std::to_string(s) + " rank " +
                                   std::to_string(world_rank());
            const Counts& a = with[s];
            const Counts& b = without[s];
            ASSERT_GT(a.weight_grad_gemms, 0) << at;
            ASSERT_GT(a.forward_gemms, 0) << at;
            EXPECT_EQ(a.weight_grad_gemms, b.weight_grad_gemms) << at;
            EXPECT_EQ(a.forward_gemms, b.forward_gemms) << at;
            EXPECT_EQ(a.input_grad_gemms, b.input_grad_gemms) << at;
            EXPECT_EQ(a.weight_grad_low_inputs, a.weight_grad_gemms)
                << at << ": a weight-gradient GEMM read an f32 input";
            EXPECT_EQ(b.weight_grad_low_inputs, 0) << at;
            // With copies the forward GEMMs read both operands stored, and the
            // only f32 operand left is each backward GEMM's output gradient.
            EXPECT_EQ(a.forward_f32_operands, 0) << at;
            EXPECT_EQ(b.forward_f32_operands, b.forward_gemms) << at;
            EXPECT_EQ(a.f32_operands, a.weight_grad_gemms + a.input_grad_gemms) << at;
            if (std::string(policy) != "none") continue;
            // Each kept activation is cast once, in the forward, where its
            // forward GEMM cast it before; the weight-gradient GEMM's cast is gone.
            // (Recomputation also copies what a segment's last layer keeps
            // without running the GEMM that would have cast it: fewer savings.)
            EXPECT_EQ(a.round_to - b.round_to, a.weight_grad_gemms) << at;
            EXPECT_EQ(a.casts(), b.casts() - a.weight_grad_gemms)
                << at << ": the backward's recast of the kept activations should be gone";
          }
        });
      }
}

// ---- the fused attention backward on a kept copy of y ---------------------

// On the fused forward's own y, the backward gives the same dqkv from y's
// 16-bit copy as from y: the forward wrote 16-bit values. A y of another
// type is an Error naming it.
TEST(ActivationCopies, TheFusedBackwardTakesTheCopyOfY) {
  const int64_t mb = 2, T = 5, C = 8, H = 2;
  for (Precision p : kHalves) {
    const auto be = make_cpu_backend(p);
    FusedAttentionKernels& fused = *be->kernels<FusedAttentionKernels>();
    Tensor qkv = Tensor::empty({mb, T, 3 * C});
    Tensor dy = Tensor::empty({mb, T, C});
    for (int64_t i = 0; i < qkv.numel(); ++i) qkv.f32()[i] = 0.5f * normal01(5, 1, static_cast<uint64_t>(i));
    for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = normal01(5, 2, static_cast<uint64_t>(i));
    Tensor y = Tensor::empty({mb, T, C}), stats = Tensor::empty({mb, H, T});
    fused.forward(qkv, H, y, stats);
    const Tensor y16 = gemm_operand_copy(*be, y);
    ASSERT_EQ(y16.dtype(), stored_dtype(p));
    Tensor from_y = Tensor::empty(qkv.shape()), from_copy = Tensor::empty(qkv.shape());
    fused.backward(qkv, y, stats, dy, H, from_y);
    fused.backward(qkv, y16, stats, dy, H, from_copy);
    EXPECT_TRUE(test::same_bits(from_copy, from_y)) << kind_name(p);
    const Tensor ints = Tensor::zeros({mb, T, C}, DType::I32);
    EXPECT_NE(test::error_of<Error>([&] { fused.backward(qkv, ints, stats, dy, H, from_y); })
                  .find("fused attention backward: y (2, 5, 8) is i32, not f32, bf16 or f16"),
              std::string::npos);
  }
}

// ---- memory ------------------------------------------------------------------

// Bytes per micro-batch that the copies save in the stash of cost unit
// `index` (embedding, blocks, head for the GPT; Linear units for the MLP):
// 2 of the 4 bytes of each element of a copied tensor.
double unit_saving(const Deck& d, size_t index) {
  const double rows = static_cast<double>(d.training.batch_size / d.pipeline.micro_batches);
  if (d.model.type == "mlp") {
    const double width = static_cast<double>(index == 0 ? d.model.mlp.input_dim : d.model.mlp.hidden_dim);
    return 2.0 * rows * width;
  }
  const GptDims& g = d.model.gpt;
  const double row = rows * static_cast<double>(g.seq_len * g.d_model);  // elements of (mb, T, C)
  if (index == 0) return 0.0;                                             // the embedding: token ids
  if (index == static_cast<size_t>(g.blocks) + 1) return 2.0 * row;       // the head: ln_f's output
  // ln1, ln2 and the attention output (mb, T, C), the GELU output (mb, T, R*C).
  return 2.0 * row * (3.0 + static_cast<double>(g.mlp_ratio));
}

// The profile the planner reads: each unit's stash smaller by its saving,
// everything else measured the same.
TEST(ActivationCopies, TheProfileSeesTheSmallerStash) {
  for (Precision p : kHalves)
    for (Model m : kModels) {
      const Deck on = deck_of(m, p, true), off = deck_of(m, p, false);
      const auto be = make_cpu_backend(p);
      const ModelProfile with = profile_memory(on, *be), without = profile_memory(off, *be);
      ASSERT_EQ(with.units.size(), without.units.size());
      for (size_t u = 0; u < with.units.size(); ++u) {
        const std::string at = std::string(kind_name(p)) + " " + model_name(m) + " " + with.units[u].name;
        const UnitCost& a = with.units[u];
        const UnitCost& b = without.units[u];
        const double saving = unit_saving(on, u);
        if (m == Model::Mlp || u > 0) {
          EXPECT_GT(saving, 0.0) << at;
        }
        EXPECT_EQ(a.stash_none_bytes, b.stash_none_bytes - saving) << at;
        EXPECT_EQ(a.stash_selective_bytes, b.stash_selective_bytes - saving) << at;
        EXPECT_EQ(a.param_bytes, b.param_bytes) << at;
        EXPECT_EQ(a.input_bytes, b.input_bytes) << at << ": the message stays f32";
        // A Linear keeps its input rounded; a block keeps its input (LayerNorm reads it).
        EXPECT_EQ(a.kept_input(), m == Model::Mlp ? b.input_bytes / 2 : b.input_bytes) << at;
      }
    }
}

// The run's peak of category `activations` (the allocator's counters) per
// stage: lower by the in-flight micro-batches times the stage's saving, and
// what the planner predicts from the profile.
TEST(ActivationCopies, TheMeasuredStashShrinksByHalfTheCopiedBytes) {
  for (Model m : kModels)
    for (const char* policy : {"none", "full"}) {
      Deck on = deck_of(m, Precision::Bf16, true);
      on.pipeline.recompute = policy;
      Deck off = on;
      off.training.activation_copies = false;
      const auto be = make_cpu_backend(Precision::Bf16);
      const auto peaks = [&](const Deck& d, std::vector<int>& in_flight) {
        ComputeSetup setup;
        setup.backend = be.get();
        Trainer trainer(d, MPI_COMM_WORLD, setup);
        StepRecord rec;
        for (int64_t s = 0; s < d.training.steps; ++s) rec = trainer.train_step(s);
        in_flight = trainer.schedule_report().peak_in_flight;
        std::vector<double> stash;
        for (const std::vector<double>& rank : rec.rank_peak_bytes)
          stash.push_back(rank[static_cast<int>(MemCategory::Activations)]);
        return stash;
      };
      std::vector<int> in_flight, in_flight_off;
      const std::vector<double> with = peaks(on, in_flight), without = peaks(off, in_flight_off);
      if (world_rank() != 0) continue;
      ASSERT_EQ(with.size(), static_cast<size_t>(world_size()));
      ASSERT_EQ(in_flight, in_flight_off);
      // Units per stage as the uniform partition gives them, the GPT's
      // embedding and head pinned to the first and last stage.
      const int64_t units = m == Model::Mlp ? on.model.mlp.depth : on.model.gpt.blocks;
      const std::vector<int64_t> counts = partition_units(units, world_size(), {});
      const size_t pinned = m == Model::Mlp ? 0 : 1;
      size_t first = pinned;
      for (size_t s = 0; s < with.size(); ++s) {
        double saving = 0.0;  // a GPT stage under full keeps its input alone, which LayerNorm reads
        if (std::string(policy) == "full") {
          if (m == Model::Mlp) saving = unit_saving(on, first);  // the first Linear's input
        } else {
          for (size_t u = first; u < first + static_cast<size_t>(counts[s]); ++u)
            saving += unit_saving(on, u);
          if (m != Model::Mlp && s + 1 == with.size()) saving += unit_saving(on, first + counts[s]);
        }
        first += static_cast<size_t>(counts[s]);
        const std::string at = model_name(m) + " recompute " + policy + " stage " + std::to_string(s);
        if (m == Model::Mlp || std::string(policy) == "none") {
          EXPECT_GT(saving, 0.0) << at;
        }
        EXPECT_EQ(with[s], without[s] - in_flight[s] * saving) << at;
      }
    }
}

// ---- the deck key ------------------------------------------------------------

TEST(ActivationCopies, TheDeckKeyIsEchoedAndRefusedOutsideHalfPrecision) {
  const std::string base = "[model]\ntype = \"mlp\"\n[training]\n";
  const Deck off = parse_deck_text(base + "precision = \"bf16\"\nactivation_copies = false\n",
                                   "copies.toml", {});
  EXPECT_FALSE(off.training.activation_copies);
  EXPECT_NE(deck_to_toml(off).find("activation_copies = false"), std::string::npos);
  const Deck on = parse_deck_text(base + "precision = \"fp16\"\n", "copies.toml", {});
  EXPECT_TRUE(on.training.activation_copies) << "the default in bf16 and fp16";
  EXPECT_NE(deck_to_toml(on).find("activation_copies = true"), std::string::npos);
  const std::string error = test::error_of<InputError>([&] {
    parse_deck_text(base + "activation_copies = true\n", "copies.toml", {});
  });
  EXPECT_NE(error.find("copies.toml:4: training.activation_copies"), std::string::npos) << error;
  EXPECT_NE(error.find("training.precision = \"bf16\" or \"fp16\""), std::string::npos) << error;
}

}  // namespace
}  // namespace pt
