// test_cuda_features.cpp: every schedule and feature of the CPU backend
// through the executor on the device under test, 2 ranks against one.
//
// Each case trains a small GPT (4 blocks) for 2 SGD steps on 2 ranks (GPipe,
// 1F1B, interleaved, ZB-H1, ZB-V; weight_grad = "step"; selective and full
// recomputation; bf16 GEMMs with and without weight copies, with activation
// copies (and full recomputation), bitwise against without; fp16 with the
// loss scaler; a forced rebalancing move after step 0; data parallel D = 2,
// both reductions) and
// the same model on rank 0 alone (1 stage, N x D micro-batches of the same
// size, GPipe, no recomputation, no move), and compares every parameter's
// gradient of the last step, keyed by name, and every step's loss. On the
// GPU it also compares the one-rank GPU run with the same run on the CPU
// backend (which emulates the GEMM operand rounding of bf16 and fp16).
//
// The device: PIPETRAIN_TEST_DEVICE = cpu | cuda; by default cuda in a CUDA
// build, cpu otherwise. Both devices run the very same cases, so the CPU
// build proves the harness (2 ranks against 1, every schedule and feature);
// the CPU runs them on the nccl_model transport, so every schedule is
// validated and run under NCCL's channel order, as the GPU's "auto" does.
// Tolerances (docs/cuda.md, "Tolerances of the GPU tests"): on the CPU the
// pipelined run is bitwise the one-rank run (docs/correctness.md), except
// with dp_reduction = "replica", which adds the micro-batches' gradients in
// another order; on the GPU every comparison is held to the ordering
// tolerance of its precision. TolerancesCoverAnotherSummationOrder checks
// those on the CPU against a real change of order (OpenBLAS's GEMMs against
// oneDNN's), and TheComparisonSeesOtherSamples that a wrong batch fails.
// Without a GPU the cuda device skips (fails under PIPETRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "test_gpu_skip.hpp"
#include "test_named_grads.hpp"
#include "test_decks.hpp"
#ifdef PIPETRAIN_TEST_CUDA
#include "test_cuda_util.hpp"
#endif

namespace pt {
namespace {

using test::NamedValues;

// The device the cases run on.
std::string test_device() {
  const char* env = std::getenv("PIPETRAIN_TEST_DEVICE");
  if (env != nullptr && *env != '\0') return env;
  return cuda_available_in_build() ? "cuda" : "cpu";
}

// Why `device` cannot run here ("" when it can); collective over the world.
std::string device_missing(const std::string& device) {
  if (device == "cpu") return "";
#ifdef PIPETRAIN_TEST_CUDA
  std::string why;
  if (!test::gpu_on_every_rank(MPI_COMM_WORLD, &why))
    return "no CUDA device on some rank (" + why + ")";
  return "";
#else
  return "this build has no CUDA backend (configure with -DPIPETRAIN_CUDA=ON)";
#endif
}

// The ordering tolerance of a precision (derived in docs/cuda.md,
// "Tolerances of the GPU tests"): the largest max |a - b| / max |b| per
// tensor between two runs of a step that differ only in the order of their
// fp32 sums. fp32: two orders of a sum of k products differ by at most
// 2(k - 1) u32 of the sum of |products| (u32 = 2^-24, k <= 128 here:
// 1.5e-5), over about ten GEMM levels from the loss to the first weight
// gradient. bf16, fp16, tf32: a moved fp32 value can round to the
// neighbouring low-precision operand, an ulp (2u) away, and one operand can
// dominate an element: 4u per product (u = 2^-8 for bf16, 2^-11 for fp16
// and tf32). TolerancesCoverAnotherSummationOrder prints the measured share.
double ordering_tolerance(const std::string& precision) {
  if (precision == "bf16") return 4 * std::ldexp(1.0, -8);   // 1.6e-2
  if (precision == "fp16" || precision == "tf32") return 4 * std::ldexp(1.0, -11);  // 2.0e-3
  return 1e-4;
}

// The small GPT of every case: 4 blocks (4 stages on 2 ranks for
// interleaved and ZB-V), 8 sequences of 16 tokens in 4 micro-batches, SGD
// with momentum (the rebalancing move carries its state), no clipping.
Deck base_deck(const std::string& device) {
  Deck d = pt_test::small_gpu_gpt(device);
  d.model.mlp.loss = LossKind::CrossEntropy;
  d.training.steps = 2;
  d.training.lr_schedule = LrScheduleKind::Constant;
  d.pipeline.schedule = ScheduleKind::OneFOneB;
  // The GPU's "auto" validates every schedule under NCCL's semantics
  // (channels matched by order); on the CPU, nccl_model runs them so.
  d.pipeline.transport = device == "cpu" ? TransportKind::NcclModel : TransportKind::Auto;
  return d;
}

struct Case {
  Case(std::string n, std::function<void(Deck&)> s, std::vector<int64_t> move = {},
       bool bitwise = true)
      : name(std::move(n)), set(std::move(s)), move_to(std::move(move)), bitwise_on_cpu(bitwise) {}
  std::string name;
  std::function<void(Deck&)> set;      // the pipelined run's deck
  std::vector<int64_t> move_to;        // forced rebalancing move after step 0
  bool bitwise_on_cpu;                 // docs/correctness.md
};

// The one-rank reference of a case's deck: one stage, the same micro-batch
// size (N x D micro-batches), GPipe, no recomputation; precision,
// weight_grad and the reduction are the case's.
Deck one_rank_reference(Deck d) {
  d.pipeline.micro_batches *= data_parallel_size(d);
  d.data_parallel.replicas = 0;
  d.pipeline.schedule = ScheduleKind::GPipe;
  d.pipeline.virtual_stages = 1;
  d.pipeline.recompute = "none";
  return d;
}

struct Outcome {
  NamedValues grads;                   // rank 0: every gradient of the last step
  std::vector<double> losses, scales;  // every step's
  std::vector<int> skipped;
  std::vector<int64_t> partition;      // at the end
  int replicas_differ = 0;             // rank 0: gradients whose replicas differ
};

// Trains `deck` over comm (a P x D grid), with the move after step 0 when given.
Outcome train(const Deck& deck, MPI_Comm comm, const std::vector<int64_t>& move_to) {
  ComputeResources compute = make_compute_resources(deck, comm);
  ProcessGrid grid(comm, static_cast<int>(data_parallel_size(deck)));
  Trainer trainer(deck, grid, compute.setup);
  Outcome out;
  for (int64_t s = 0; s < deck.training.steps; ++s) {
    const StepRecord rec = trainer.train_step(s);
    out.losses.push_back(rec.loss);
    out.scales.push_back(rec.loss_scale);
    out.skipped.push_back(rec.skipped ? 1 : 0);
    if (s == 0 && !move_to.empty()) trainer.repartition(move_to, s);
  }
  out.partition = trainer.partition();
  Backend& be = compute.backend ? *compute.backend : cpu_backend();
  out.grads = test::gather_named(test::local_values(trainer, be, test::Field::Grad), comm,
                                 &out.replicas_differ);
  return out;
}

// Trains on the first 2 ranks of the world; the others sit out.
Outcome train_on_two(const Deck& deck, const std::vector<int64_t>& move_to) {
  const int rank = test::world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &comm);
  Outcome out;
  if (comm == MPI_COMM_NULL) return out;
  out = train(deck, comm, move_to);
  MPI_Comm_free(&comm);
  return out;
}

void expect_losses_close(const Outcome& got, const Outcome& want, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    const double rel = std::fabs(got.losses[s] - want.losses[s]) / std::fabs(want.losses[s]);
    EXPECT_LE(rel, tol) << what << ": loss of step " << s << " " << got.losses[s] << " vs "
                        << want.losses[s];
  }
  EXPECT_EQ(got.scales, want.scales) << what << ": fp16 loss scales";
  EXPECT_EQ(got.skipped, want.skipped) << what << ": skipped steps";
}

// `got` against `want`: gradients and losses within `tol` (0: bitwise).
void expect_same_training(const Outcome& got, const Outcome& want, double tol,
                          const std::string& what) {
  test::expect_named_close(got.grads, want.grads, tol, what);
  expect_losses_close(got, want, tol, what);
}

class CudaFeatures : public ::testing::Test {
 protected:
  void SetUp() override {
    set_blas_threads(1);
    device_ = test_device();
    ASSERT_TRUE(device_ == "cpu" || device_ == "cuda")
        << "PIPETRAIN_TEST_DEVICE = " << device_ << ": expected cpu or cuda";
    const std::string missing = device_missing(device_);
    if (!missing.empty()) {
      PT_NO_GPU(missing);
    }
    if (test::world_size() < 2) GTEST_SKIP() << "the cases need 2 ranks";
  }

  // The case on 2 ranks against rank 0 alone, on the device; on the GPU
  // also rank 0 alone on the GPU against the CPU backend.
  void check(const Case& c) {
    Deck deck = base_deck(device_);
    c.set(deck);
    const Outcome piped = train_on_two(deck, c.move_to);
    const Deck reference = one_rank_reference(deck);
    Outcome alone, on_cpu;
    if (test::is_root()) alone = train(reference, MPI_COMM_SELF, {});
    if (test::is_root() && device_ != "cpu") {
      Deck cpu = reference;
      cpu.training.device = DeviceKind::Cpu;
      cpu.pipeline.transport = TransportKind::Auto;
      on_cpu = train(cpu, MPI_COMM_SELF, {});
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!test::is_root()) return;
    const std::string precision = kind_name(deck.training.precision);
    const double tol = device_ == "cpu" && c.bitwise_on_cpu ? 0.0 : ordering_tolerance(precision);
    expect_same_training(piped, alone, tol, c.name + ", 2 ranks vs 1 (" + device_ + ")");
    EXPECT_EQ(piped.replicas_differ, 0) << c.name << ": replicas hold different gradients";
    if (!c.move_to.empty()) {
      EXPECT_EQ(piped.partition, c.move_to) << c.name << ": not moved";
    }
    for (int s : piped.skipped) {
      EXPECT_EQ(s, 0) << c.name << ": a skipped step compares nothing";
    }
    if (device_ != "cpu")
      expect_same_training(alone, on_cpu, ordering_tolerance(precision),
                           c.name + ", 1 rank " + device_ + " vs cpu");
  }

  std::string device_;
};

TEST_F(CudaFeatures, Gpipe) {
  check({"gpipe", [](Deck& d) { d.pipeline.schedule = ScheduleKind::GPipe; }});
}

TEST_F(CudaFeatures, OneFOneB) {
  check({"1f1b", [](Deck& d) { d.pipeline.schedule = ScheduleKind::OneFOneB; }});
}

TEST_F(CudaFeatures, Interleaved) {
  check({"interleaved v=2", [](Deck& d) {
           d.pipeline.schedule = ScheduleKind::Interleaved;
           d.pipeline.virtual_stages = 2;
         }});
}

TEST_F(CudaFeatures, ZbH1) {
  check({"zb-h1", [](Deck& d) { d.pipeline.schedule = ScheduleKind::ZbH1; }});
}

TEST_F(CudaFeatures, ZbV) {
  check({"zb-v", [](Deck& d) { d.pipeline.schedule = ScheduleKind::ZbV; }});
}

TEST_F(CudaFeatures, StepWeightGrads) {
  check({"1f1b weight_grad=step", [](Deck& d) { d.pipeline.weight_grad = WeightGradKind::Step; }});
  check({"interleaved weight_grad=step", [](Deck& d) {
           d.pipeline.schedule = ScheduleKind::Interleaved;
           d.pipeline.virtual_stages = 2;
           d.pipeline.weight_grad = WeightGradKind::Step;
         }});
}

TEST_F(CudaFeatures, SelectiveRecompute) {
  check({"recompute selective", [](Deck& d) { d.pipeline.recompute = "selective"; }});
}

TEST_F(CudaFeatures, FullRecompute) {
  check({"recompute full", [](Deck& d) { d.pipeline.recompute = "full"; }});
}

// bf16 with its defaults: weight copies and activation copies (the
// activations kept only as GEMM operands stored in bf16), against the CPU's
// emulation of the same on the GPU.
TEST_F(CudaFeatures, Bf16) {
  check({"bf16", [](Deck& d) { d.training.precision = Precision::Bf16; }});
}

// The activation copies' recomputation path: a segment restarts from a
// kept bf16 input and keeps its copies again.
TEST_F(CudaFeatures, Bf16FullRecompute) {
  check({"bf16 recompute full", [](Deck& d) {
           d.training.precision = Precision::Bf16;
           d.pipeline.recompute = "full";
         }});
}

// Activation copies on against off, on the device: the GEMMs read the same
// bf16 operands, made by the same cast kernel (round_to's, which the GEMM's
// own cast also is) before the GEMM instead of inside it, and cuBLAS and
// cuBLASLt choose their algorithms for the same shapes, types and alignment
// preference; so the runs agree bit for bit, 2 ranks (1F1B, recompute none
// and full, zb-h1's split backward, fused attention, whose backward reads
// the kept copy of y as cuDNN's O) and 1.
TEST_F(CudaFeatures, Bf16ActivationCopiesAreBitwiseTheFp32Stash) {
  for (const std::string variant : {"none", "full", "zb-h1", "fused"}) {
    Deck on = base_deck(device_);
    on.training.precision = Precision::Bf16;
    if (variant == "zb-h1") on.pipeline.schedule = ScheduleKind::ZbH1;
    else if (variant == "fused") on.model.gpt.attention = AttentionKind::Fused;
    else on.pipeline.recompute = variant;
    Deck off = on;
    off.training.activation_copies = false;
    const Outcome piped_on = train_on_two(on, {}), piped_off = train_on_two(off, {});
    Outcome alone_on, alone_off;
    if (test::is_root()) {
      alone_on = train(one_rank_reference(on), MPI_COMM_SELF, {});
      alone_off = train(one_rank_reference(off), MPI_COMM_SELF, {});
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!test::is_root()) continue;
    const std::string label = "bf16 " + variant + " (" + device_ + ")";
    expect_same_training(piped_on, piped_off, 0.0, label + ", 2 ranks: activation copies on vs off");
    expect_same_training(alone_on, alone_off, 0.0, label + ", 1 rank: activation copies on vs off");
  }
}

// bf16 with every GEMM rounding its weight from the fp32 master (the case
// above reads the weight copies, training.weight_copies' default).
TEST_F(CudaFeatures, Bf16WithoutWeightCopies) {
  check({"bf16, weight copies off", [](Deck& d) {
           d.training.precision = Precision::Bf16;
           d.training.weight_copies = false;
         }});
}

TEST_F(CudaFeatures, Fp16WithTheLossScaler) {
  check({"fp16", [](Deck& d) {
           d.training.precision = Precision::Fp16;
           d.training.loss_scale = 1024;
         }});
}

TEST_F(CudaFeatures, ForcedRebalancingMove) {
  check({"move [2, 2] -> [3, 1] after step 0", [](Deck&) {}, {3, 1}});
}

TEST_F(CudaFeatures, DataParallelReplicaReduction) {
  check({"data parallel 1x2 replica",
         [](Deck& d) {
           d.data_parallel.replicas = 2;
           d.pipeline.micro_batches = 2;
           d.data_parallel.reduction = DpReductionKind::Replica;
         },
         {},
         false});
}

TEST_F(CudaFeatures, DataParallelOrderedReduction) {
  check({"data parallel 1x2 ordered", [](Deck& d) {
           d.data_parallel.replicas = 2;
           d.pipeline.micro_batches = 2;
           d.data_parallel.reduction = DpReductionKind::Ordered;
         }});
}

// The comparison can fail: a run on other samples (as a schedule that
// skipped or repeated a micro-batch would see) differs from the reference by
// more than the loosest tolerance, bf16's.
TEST_F(CudaFeatures, TheComparisonSeesOtherSamples) {
  Deck deck = base_deck(device_);
  Deck other = deck;
  other.data.seed += 1;
  const Outcome piped = train_on_two(other, {});
  Outcome alone;
  if (test::is_root()) alone = train(one_rank_reference(deck), MPI_COMM_SELF, {});
  MPI_Barrier(MPI_COMM_WORLD);
  if (!test::is_root()) return;
  const test::NamedComparison c = test::compare_named(piped.grads, alone.grads);
  std::printf("  other samples: max rel diff %.3e (%s); the loosest tolerance %.2e\n", c.worst,
              c.worst_name.c_str(), ordering_tolerance("bf16"));
  EXPECT_GT(c.worst, 10 * ordering_tolerance("bf16"));
}

// The ordering tolerances hold a real change of summation order: the
// one-rank run with every GEMM on OpenBLAS against the same with oneDNN
// (another blocking, so other fp32 sums) on the CPU, in every precision.
// They stay within the tolerance. Whether the two libraries' sums differ at
// all depends on the CPU and the library builds, so that is printed, not
// asserted (no test may depend on two orders rounding differently).
TEST(CudaFeaturesTolerances, TolerancesCoverAnotherSummationOrder) {
  if (!test::is_root()) return;
  set_blas_threads(1);
  const CpuGemm before = cpu_gemm();
  for (const char* precision : {"fp32", "tf32", "bf16", "fp16"}) {
    Deck deck = one_rank_reference(base_deck("cpu"));
    deck.training.precision = kind_named<Precision>(precision);
    if (deck.training.precision == Precision::Fp16) deck.training.loss_scale = 1024;
    set_cpu_gemm(CpuGemm::OpenBLAS);
    const Outcome openblas = train(deck, MPI_COMM_SELF, {});
    set_cpu_gemm(CpuGemm::OneDNNSgemm);
    const Outcome onednn = train(deck, MPI_COMM_SELF, {});
    const double tol = ordering_tolerance(precision);
    const test::NamedComparison c = test::expect_named_close(
        openblas.grads, onednn.grads, tol, std::string(precision) + ": OpenBLAS vs oneDNN");
    std::printf("    measured / tolerance = %.3f, %zu differing values%s\n", c.worst / tol,
                static_cast<size_t>(c.differing_bits),
                c.differing_bits == 0 ? " (the two libraries summed alike here)" : "");
    expect_losses_close(openblas, onednn, tol, precision);
  }
  set_cpu_gemm(before);
}

}  // namespace
}  // namespace pt
