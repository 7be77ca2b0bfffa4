// test_weight_copies.cpp: the low-precision copies of the GEMM weights
// (training.weight_copies, model/weight_copies.hpp) on the CPU backend, whose
// bf16 and fp16 emulation rounds exactly as the GPU does:
//
//  - Backend::round_to gives round_operand's value bit for bit, on edge
//    values (ties, a carry into the exponent, the fp16 range ends and
//    subnormals, inf, quiet and signalling NaNs of either sign) and random
//    ones; so does the per-GEMM rounding (round_block);
//  - a GEMM on a BF16/F16 operand equals the GEMM on the F32 operand it was
//    rounded from, bit for bit, for every transpose and as either operand:
//    rounding a rounded value changes nothing;
//  - a stored operand the backend's precision does not take is an Error
//    naming the operand and both types;
//  - training with copies equals training without, bit for bit (losses,
//    gradient norms, parameters), in bf16 and fp16, MLP and GPT, at 1 rank
//    and on the world, through a checkpoint resume, a rebalancing move and
//    steps the fp16 loss scaler skips; after every step, load and move the
//    copies hold the current masters rounded;
//  - a counting backend shows what ran: one cast per GEMM weight of the rank
//    per applied step whatever the micro-batch count, none in a skipped
//    step, and with copies no GEMM reads a master weight; without them every
//    GEMM that read a copy reads its master instead.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bitwise.hpp"
#include "error_of.hpp"
#include "forwarding_backend.hpp"
#include "mpi_test_util.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/weight_copies.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "test_decks.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

const Precision kHalves[] = {Precision::Bf16, Precision::Fp16};

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// ---- the rounding kernel -----------------------------------------------------

std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f, -0.f, 1.f, -1.f, inf, -inf,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          65504.f, 65519.f, 65520.f, -65520.f, 1e6f, 1e30f, -1e-30f,
                          std::ldexp(1.f, -14), std::ldexp(1.f, -24), std::ldexp(1.f, -25),
                          3.f * std::ldexp(1.f, -26), -std::ldexp(1.f, -26)};
  // bf16 ties (1 + 2^-8 down to even, 1 + 3 * 2^-8 up) and a carry into the
  // exponent (the largest value below 2 rounds to 2); fp16 ties likewise.
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3fffffffu, 0xbf808000u, 0x3f801000u,
                     0x3f803000u, 0x3f7ff000u})
    v.push_back(float_of(u));
  // NaNs: quiet and signalling, both signs, with and without a payload.
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fa5a5a5u,
                     0x7fffffffu, 0xffbfffffu})
    v.push_back(float_of(u));
  return v;
}

std::vector<float> test_values() {
  std::vector<float> v = edge_values();
  for (int scale : {-30, -14, 0, 10, 17})
    for (uint64_t i = 0; i < 200; ++i)
      v.push_back(std::ldexp(normal01(3, static_cast<uint64_t>(scale + 40), i), scale));
  return v;
}

Tensor host_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())});
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

TEST(WeightCopies, RoundToGivesRoundOperandBitForBit) {
  const std::vector<float> v = test_values();
  const int64_t n = static_cast<int64_t>(v.size());
  for (Precision p : kHalves) {
    const auto be = make_cpu_backend(p);
    const Tensor src = host_tensor(v);
    Tensor dst = Tensor::empty({n}, stored_dtype(p));
    be->round_to(src, dst);
    std::vector<float> per_gemm(v.size());
    round_block(v.data(), n, 1, n, p, per_gemm.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = round_operand(v[i], p);
      const uint16_t got = dst.bits16()[i];
      const std::string at = std::string(kind_name(p)) + " of bits " + std::to_string(bits_of(v[i]));
      EXPECT_EQ(bits_of(widen_bits(got, p)), bits_of(want)) << at;
      EXPECT_EQ(bits_of(per_gemm[i]), bits_of(want)) << at << ": the per-GEMM rounding";
      EXPECT_EQ(round_bits(want, p), got) << at << ": rounding again changes the bits";
    }
  }
}

TEST(WeightCopies, RoundToKnownBits) {
  const struct { float x; uint16_t bf16, fp16; } cases[] = {
      {1.f, 0x3f80, 0x3c00},
      {float_of(0x3f808000u), 0x3f80, 0x3c04},  // bf16 tie: to even (down); exact in fp16
      {float_of(0x3f818000u), 0x3f82, 0x3c0c},  // bf16 tie: to even (up)
      {float_of(0x3fffffffu), 0x4000, 0x4000},  // carry into the exponent
      {65520.f, 0x4780, 0x7c00},                // fp16 overflows to inf
      {-65520.f, 0xc780, 0xfc00},
      {std::ldexp(1.f, -24), 0x3380, 0x0001},   // fp16's smallest subnormal
      {std::ldexp(1.f, -25), 0x3300, 0x0000},   // a tie below it: to even, 0
      {float_of(0x7fc00000u), 0x7fc0, 0x7e00},  // quiet NaN
      {float_of(0xff812345u), 0xffc1, 0xfe09},  // signalling NaN: quieted, sign and payload top kept
  };
  for (const auto& c : cases) {
    EXPECT_EQ(round_bits(c.x, Precision::Bf16), c.bf16) << bits_of(c.x);
    EXPECT_EQ(round_bits(c.x, Precision::Fp16), c.fp16) << bits_of(c.x);
  }
}

// ---- GEMMs on stored operands ----------------------------------------------

Tensor random_matrix(int64_t rows, int64_t cols, uint64_t stream) {
  Tensor t = Tensor::empty({rows, cols});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 3.f * normal01(11, stream, static_cast<uint64_t>(i));
  return t;
}

Tensor rounded(Backend& be, const Tensor& x) {
  Tensor t = Tensor::empty(x.shape(), stored_dtype(be.precision()));
  be.round_to(x, t);
  return t;
}

TEST(WeightCopies, AGemmOnACopyIsTheGemmOnItsMasterBitwise) {
  const int64_t m = 37, n = 29, k = 83;
  for (Precision p : kHalves)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const auto be = make_cpu_backend(p);
        const Tensor a = ta ? random_matrix(k, m, 1) : random_matrix(m, k, 1);
        const Tensor b = tb ? random_matrix(n, k, 2) : random_matrix(k, n, 2);
        const Tensor a16 = rounded(*be, a), b16 = rounded(*be, b);
        const Tensor c0 = random_matrix(m, n, 3);  // beta = 1 accumulates onto it
        const auto gemm = [&](const Tensor& x, const Tensor& y) {
          Tensor c = c0.clone(MemCategory::Workspace);
          be->matmul(x, ta, y, tb, c, 0.5f, 1.f);
          return c;
        };
        const Tensor want = gemm(a, b);
        const std::string label =
            std::string(kind_name(p)) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        EXPECT_TRUE(test::same_bits(gemm(a, b16), want)) << label << ", b a copy";
        EXPECT_TRUE(test::same_bits(gemm(a16, b), want)) << label << ", a a copy";
        EXPECT_TRUE(test::same_bits(gemm(a16, b16), want)) << label << ", both copies";
        EXPECT_FALSE(test::same_bits(want, c0)) << label << ": the GEMM changed nothing";
      }
}

TEST(WeightCopies, AStoredOperandOfAnotherPrecisionIsAnError) {
  const Tensor a = random_matrix(4, 3, 4);
  Tensor c = Tensor::zeros({4, 5});
  const Tensor b_bf16 = Tensor::zeros({5, 3}, DType::BF16);
  const Tensor b_f16 = Tensor::zeros({5, 3}, DType::F16);
  const std::string fp32 = test::error_of<Error>([&] { cpu_backend().matmul(a, false, b_bf16, true, c, 1.f, 0.f); });
  EXPECT_NE(fp32.find("matmul: operand b (5, 3) is bf16, but backend \"cpu\" computes GEMMs in fp32, "
                      "which takes f32 operands"),
            std::string::npos)
      << fp32;
  const auto fp16 = make_cpu_backend(Precision::Fp16);
  const std::string mixed = test::error_of<Error>([&] { fp16->matmul(b_bf16, false, a, false, c, 1.f, 0.f); });
  EXPECT_NE(mixed.find("operand a (5, 3) is bf16, but backend \"cpu\" computes GEMMs in fp16, which "
                       "takes f32 operands or f16"),
            std::string::npos)
      << mixed;
  const auto tf32 = make_cpu_backend(Precision::Tf32);
  EXPECT_NE(test::error_of<Error>([&] { tf32->matmul(a, false, b_f16, true, c, 1.f, 0.f); })
                .find("operand b (5, 3) is f16, but backend \"cpu\" computes GEMMs in tf32"),
            std::string::npos);
  Tensor c16 = Tensor::zeros({4, 5}, DType::BF16);
  const auto bf16 = make_cpu_backend(Precision::Bf16);
  EXPECT_NE(test::error_of<Error>([&] { bf16->matmul(a, false, b_bf16, true, c16, 1.f, 0.f); })
                .find("matmul: output c is bf16, not f32"),
            std::string::npos);
  Tensor not_half = Tensor::zeros({4, 3});
  EXPECT_NE(test::error_of<Error>([&] { bf16->round_to(a, not_half); })
                .find("round_to: dst (4, 3) is f32, not bf16 or f16"),
            std::string::npos);
  Tensor short_copy = Tensor::zeros({3}, DType::BF16);
  EXPECT_NE(test::error_of<Error>([&] { bf16->round_to(a, short_copy); })
                .find("round_to: dst (3) has 3 elements, src (4, 3) has 12"),
            std::string::npos);
  Tensor copy = Tensor::zeros({5, 3}, DType::BF16);
  EXPECT_NE(test::error_of<Error>([&] { bf16->round_to(b_f16, copy); })
                .find("round_to: src (5, 3) is f16, not f32"),
            std::string::npos);
}

// ---- a counting backend ------------------------------------------------------

struct Counts {
  int casts = 0;           // round_to calls (weight copies rounded)
  int low_operands = 0;    // GEMM operands that arrived in bf16/fp16
  int master_operands = 0; // GEMM operands that were an fp32 master weight
};

// Computes on the CPU backend of a precision (its kernel groups too),
// counting the casts and the GEMM operands by kind. `masters` holds the data
// of this rank's GEMM weights (set after the trainer is built; on the CPU
// they stay where they are).
class GemmCounter final : public test::CountingBackend {
 public:
  using CountingBackend::CountingBackend;
  Counts counts;
  std::set<const void*> masters;

 protected:
  void counted_round_to() override { ++counts.casts; }
  void counted_matmul(const Tensor& a, const Tensor& b, bool, const Tensor&) override {
    for (const Tensor* t : {&a, &b}) {
      counts.low_operands += t->dtype() != DType::F32 ? 1 : 0;
      counts.master_operands += masters.count(t->raw()) ? 1 : 0;
    }
  }
};

// ---- training ----------------------------------------------------------------

Deck mlp_deck(Precision p, bool copies) {
  Deck d = pt_test::tiny_mlp(16);
  d.model.mlp.depth = 4;
  d.training.steps = 4;
  d.training.precision = p;
  d.training.weight_copies = copies;
  // Activation copies off: the casts and stored operands counted here are
  // the weights' alone (test_activation_copies covers both together).
  d.training.activation_copies = false;
  d.pipeline.micro_batches = 4;
  return d;
}

Deck gpt_deck(Precision p, bool copies) {
  Deck d = pt_test::tiny_gpt(mlp_deck(p, copies), 2);
  d.training.lr = 3e-3;
  return d;
}

// Every GEMM weight's copy holds its master rounded (with copies on), and
// nothing else has one.
void expect_copies_current(Trainer& trainer, bool copies, const std::string& label) {
  for (Param* param : trainer.params()) {
    const bool wanted = copies && param->gemm_weight;
    ASSERT_EQ(param->copy.defined(), wanted) << label << " " << param->name;
    if (!wanted) continue;
    const Precision prec = param->copy.dtype() == DType::BF16 ? Precision::Bf16 : Precision::Fp16;
    const Tensor value = param->value.to(Device::CPU);
    const Tensor copy = param->copy.to(Device::CPU);
    size_t stale = 0;
    for (int64_t i = 0; i < value.numel(); ++i)
      stale += round_bits(value.f32()[i], prec) != copy.bits16()[i] ? 1 : 0;
    EXPECT_EQ(stale, 0u) << label << " " << param->name << ": elements of the copy behind the master";
    EXPECT_EQ(param->copy_version, param->version) << label << " " << param->name;
  }
}

using StepHook = std::function<void(Trainer&, int64_t step)>;

// `deck` on the first `ranks` ranks, on the CPU backend of its precision;
// after every step the copies are checked and `after_step` runs.
test::RunResult train_emulated(const Deck& deck, int ranks, const StepHook& after_step = {}) {
  test::RunResult r;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) {
    const auto be = make_cpu_backend(deck.training.precision);
    ComputeSetup setup;
    setup.backend = be.get();
    Trainer trainer(deck, comm, setup);
    expect_copies_current(trainer, deck.training.weight_copies, "after the build");
    for (int64_t s = 0; s < deck.training.steps; ++s) {
      test::record_step(r, trainer.train_step(s));
      expect_copies_current(trainer, deck.training.weight_copies, "step " + std::to_string(s));
      if (after_step) after_step(trainer, s);
    }
    r.params = trainer.gather_parameters();
  });
  return r;
}

std::vector<int> rank_counts() {
  return world_size() > 1 ? std::vector<int>{1, world_size()} : std::vector<int>{1};
}

TEST(WeightCopies, TrainingWithCopiesIsTrainingWithoutBitwise) {
  for (Precision p : kHalves)
    for (bool gpt : {false, true})
      for (int ranks : rank_counts()) {
        const auto deck = [&](bool copies) { return gpt ? gpt_deck(p, copies) : mlp_deck(p, copies); };
        const std::string label = std::string(kind_name(p)) + (gpt ? " gpt" : " mlp") + " on " +
                                  std::to_string(ranks) + " ranks";
        const test::RunResult on = train_emulated(deck(true), ranks);
        const test::RunResult off = train_emulated(deck(false), ranks);
        test::expect_bitwise(on, off, label, true);
      }
}

TEST(WeightCopies, SkippedFp16StepsChangeNoCopy) {
  for (int ranks : rank_counts()) {
    const auto deck = [](bool copies) {
      Deck d = mlp_deck(Precision::Fp16, copies);
      d.training.loss_scale = 16777216.0;  // 2^24: the first steps overflow and are skipped
      d.training.steps = 6;
      return d;
    };
    const test::RunResult on = train_emulated(deck(true), ranks);
    const test::RunResult off = train_emulated(deck(false), ranks);
    test::expect_bitwise(on, off, "fp16 with skips on " + std::to_string(ranks) + " ranks", true);
    size_t skips = 0;  // a skipped step's norm is NaN
    for (double norm : on.grad_norms) skips += std::isnan(norm) ? 1 : 0;
    if (test::is_root()) {
      EXPECT_GT(skips, 0u) << "the deck should overflow at first";
    }
  }
}

// A directory of rank 0's temporary directory, the same path on every rank;
// removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    std::string path;
    if (world_rank() == 0) {
      std::string pattern = (std::filesystem::temp_directory_path() / "pt_copies_XXXXXX").string();
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
// copies for steps [2, 4): bitwise the run without copies. Right after the
// load the copies are behind the loaded masters and no GEMM may read them.
TEST(WeightCopies, AResumedRunRoundsItsLoadedWeights) {
  for (Precision p : kHalves)
    for (int ranks : rank_counts()) {
      const std::string label = std::string(kind_name(p)) + " resume on " + std::to_string(ranks) + " ranks";
      const test::RunResult straight = train_emulated(mlp_deck(p, false), ranks);
      ScratchDir dir;
      Deck deck = mlp_deck(p, true);
      deck.output.checkpoint_dir = dir.path() + "/ckpt";
      const std::string text = deck_to_toml(deck);
      test::RunResult resumed;
      test::on_first_ranks(ranks, [&](MPI_Comm comm) {
        const auto cpu = make_cpu_backend(p);
        GemmCounter be(*cpu);
        ComputeSetup setup;
        setup.backend = &be;
        {
          Trainer first(deck, comm, setup);
          for (int64_t s = 0; s < 2; ++s) test::record_step(resumed, first.train_step(s));
          save_checkpoint(deck, text, first, 2, comm);
        }
        Trainer second(deck, comm, setup);
        load_checkpoint("latest", LoadMode::Resume, deck, text, second, comm);
        int weights = 0;
        for (Param* param : second.params()) {
          if (!param->gemm_weight) continue;
          ++weights;
          be.masters.insert(param->value.raw());
          EXPECT_EQ(weight_operand(be, *param).dtype(), DType::F32)
              << label << " " << param->name << ": a stale copy is handed out";
        }
        for (int64_t s = 2; s < deck.training.steps; ++s) {
          be.counts = Counts();
          test::record_step(resumed, second.train_step(s));
          expect_copies_current(second, true, label + " step " + std::to_string(s));
          // The first step rounds the loaded weights as its pass begins, then after its update.
          EXPECT_EQ(be.counts.casts, (s == 2 ? 2 : 1) * weights) << label << " step " << s;
          EXPECT_EQ(be.counts.master_operands, 0) << label << " step " << s;
        }
        resumed.params = second.gather_parameters();
      });
      wait_for_checkpoint_pruning();
      test::expect_bitwise(resumed, straight, label, true);
    }
}

// A rebalancing move after step 1 (2 ranks): the arriving units get copies
// of what they received, the staying ones keep theirs; bitwise the run
// without copies that makes the same move.
TEST(WeightCopies, ARebalancingMoveKeepsTheCopiesCurrent) {
  if (world_size() < 2) GTEST_SKIP() << "a move needs 2 ranks";
  for (Precision p : kHalves) {
    const StepHook move = [](Trainer& trainer, int64_t step) {
      if (step != 1) return;
      trainer.repartition({1, 3}, step);
      EXPECT_EQ(trainer.partition(), (std::vector<int64_t>{1, 3}));
    };
    const auto deck = [&](bool copies) {
      Deck d = mlp_deck(p, copies);
      d.pipeline.partition = {3, 1};
      d.pipeline.partition_strategy = PartitionStrategy::Explicit;
      return d;
    };
    const test::RunResult on = train_emulated(deck(true), 2, [&](Trainer& t, int64_t s) {
      move(t, s);
      expect_copies_current(t, true, "after the move");
    });
    const test::RunResult off = train_emulated(deck(false), 2, move);
    test::expect_bitwise(on, off, std::string(kind_name(p)) + " with a move", true);
  }
}

// ---- counters ----------------------------------------------------------------

struct CountedRun {
  std::vector<Counts> steps;
  std::vector<bool> skipped;
  int gemm_weights = 0;  // on this rank
};

CountedRun count_steps(const Deck& deck, MPI_Comm comm) {
  const auto cpu = make_cpu_backend(deck.training.precision);
  GemmCounter be(*cpu);
  ComputeSetup setup;
  setup.backend = &be;
  Trainer trainer(deck, comm, setup);
  CountedRun run;
  for (Param* p : trainer.params())
    if (p->gemm_weight) {
      be.masters.insert(p->value.raw());
      ++run.gemm_weights;
    }
  for (int64_t s = 0; s < deck.training.steps; ++s) {
    be.counts = Counts();
    run.skipped.push_back(trainer.train_step(s).skipped);
    run.steps.push_back(be.counts);
  }
  return run;
}

// Returns the steps `with` skipped (fp16), on the ranks of the world.
int check_counts(const Deck& with, const std::string& label) {
  int skips = 0;
  Deck without = with;
  without.training.weight_copies = false;
  Deck halved = with;  // half the micro-batches: the same casts, half the GEMMs
  halved.pipeline.micro_batches = with.pipeline.micro_batches / 2;
  test::on_first_ranks(world_size(), [&](MPI_Comm comm) {
    const CountedRun on = count_steps(with, comm), off = count_steps(without, comm),
                     fewer = count_steps(halved, comm);
    ASSERT_GT(on.gemm_weights, 0) << label;
    for (size_t s = 0; s < on.steps.size(); ++s) {
      const std::string at = label + " step " + std::to_string(s) + " rank " + std::to_string(world_rank());
      const int casts = on.skipped[s] ? 0 : on.gemm_weights;
      EXPECT_EQ(on.steps[s].casts, casts) << at << ": one cast per weight and applied step";
      EXPECT_EQ(fewer.steps[s].casts, fewer.skipped[s] ? 0 : fewer.gemm_weights) << at;
      EXPECT_EQ(on.steps[s].master_operands, 0) << at << ": a GEMM rounded a master weight";
      EXPECT_GT(on.steps[s].low_operands, 0) << at;
      EXPECT_EQ(on.steps[s].low_operands, 2 * fewer.steps[s].low_operands) << at;
      EXPECT_EQ(off.steps[s].casts, 0) << at;
      EXPECT_EQ(off.steps[s].low_operands, 0) << at;
      EXPECT_EQ(off.steps[s].master_operands, on.steps[s].low_operands)
          << at << ": without copies the same GEMMs read the masters";
      skips += on.skipped[s] ? 1 : 0;
    }
  });
  return skips;
}

TEST(WeightCopies, OneCastPerWeightAndStepWhateverTheMicroBatches) {
  for (Precision p : kHalves) {
    check_counts(mlp_deck(p, true), std::string(kind_name(p)) + " mlp");
    check_counts(gpt_deck(p, true), std::string(kind_name(p)) + " gpt");
  }
}

TEST(WeightCopies, ASkippedStepCastsNothing) {
  Deck d = mlp_deck(Precision::Fp16, true);
  d.training.loss_scale = 16777216.0;
  d.training.steps = 6;
  EXPECT_GT(check_counts(d, "fp16 with skips"), 0) << "the deck should overflow at first";
}

}  // namespace
}  // namespace pt
