// test_cuda_pipeline.cpp: the pipelined GPU run against P = 1 and against the
// CPU backend, and checkpoints of GPU tensors (CUDA builds only; skips
// without a GPU, fails under PIPETRAIN_REQUIRE_GPU=1).
//
// A tiny GPT trains 3 SGD steps with training.device = "cuda" (fp32, no TF32)
// on the world's ranks (2 ranks on one GPU use the host-staged transport) and
// on rank 0 alone; the last step's gradients (every parameter's, keyed by
// name) and every step's loss must agree within the fp32 ordering tolerance,
// 1e-4 of each tensor's largest element (docs/cuda.md, "Tolerances of the GPU
// tests"): the runs do the same arithmetic, and cuBLAS is deterministic for
// fixed shapes, so in practice they are bitwise equal; the tolerance admits
// a library that sums in another order. The one-rank GPU run is held to the
// CPU backend's at the same tolerance, since fp32 GEMMs on the two differ in
// their summation order only. Gradients, not parameters after AdamW: AdamW
// moves a parameter by about lr whatever the size of its gradient, so a
// near-zero gradient whose sign is noise moves it by lr one way or the other.
// The same comparison with P = 1 runs GPipe, and N = 1 < P, on the mpi_staged
// transport: the schedules whose first receive is posted long before its
// send. With pipeline.check_messages, the same run changes no bit. A checkpoint of device parameters and AdamW state, saved by the
// checkpoint code and loaded back over overwritten values, must restore every
// bit, on the device.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "mpi_test_util.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/message_check.hpp"
#include "test_cuda_util.hpp"
#include "test_named_grads.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

// The fp32 ordering tolerance (docs/cuda.md, "Tolerances of the GPU tests").
constexpr double kFp32OrderingTolerance = 1e-4;

Deck gpu_deck() {
  Deck d = pt_test::small_gpu_gpt("cuda");
  d.training.steps = 3;
  d.training.precision = Precision::Fp32;
  d.pipeline.transport = TransportKind::Auto;
  return d;
}

struct Trained {
  test::NamedValues grads;  // rank 0: the last step's, by parameter name
  std::vector<double> losses;
};

Trained train(const Deck& deck, MPI_Comm comm) {
  ComputeResources compute = make_compute_resources(deck, comm);
  Trainer trainer(deck, comm, compute.setup);
  Trained out;
  for (int64_t s = 0; s < deck.training.steps; ++s) out.losses.push_back(trainer.train_step(s).loss);
  Backend& be = compute.backend ? *compute.backend : cpu_backend();
  out.grads = test::gather_named(test::local_values(trainer, be, test::Field::Grad), comm, nullptr);
  return out;
}

void expect_close(const Trained& got, const Trained& want, const std::string& what) {
  test::expect_named_close(got.grads, want.grads, kFp32OrderingTolerance, what);
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_LE(std::fabs(got.losses[s] - want.losses[s]), kFp32OrderingTolerance * want.losses[s])
        << what << ": loss of step " << s;
}

// The deck on every rank, then on rank 0 alone; the two must agree.
// Returns rank 0's one-rank result (empty elsewhere).
Trained expect_pipelined_equals_one_rank(const Deck& deck, const std::string& what) {
  const Trained piped = train(deck, MPI_COMM_WORLD);
  if (test::world_rank() != 0) return {};
  const Trained alone = train(deck, MPI_COMM_SELF);
  expect_close(piped, alone, what + ": GPU pipelined vs GPU P=1");
  return alone;
}

TEST(CudaPipeline, PipelinedGpuRunMatchesOneRankAndTheCpu) {
  PT_REQUIRE_GPU_ON_EVERY_RANK(MPI_COMM_WORLD);
  const Deck deck = gpu_deck();
  const Trained alone = expect_pipelined_equals_one_rank(deck, "1f1b N=4 auto");
  if (test::world_rank() != 0) return;
  Deck cpu = deck;
  cpu.training.device = DeviceKind::Cpu;
  expect_close(alone, train(cpu, MPI_COMM_SELF), "GPU P=1 vs CPU");
}

TEST(CudaPipeline, GpipeOnTheStagedTransport) {
  PT_REQUIRE_GPU_ON_EVERY_RANK(MPI_COMM_WORLD);
  Deck deck = gpu_deck();
  deck.pipeline.schedule = ScheduleKind::GPipe;
  deck.pipeline.transport = TransportKind::MpiStaged;
  expect_pipelined_equals_one_rank(deck, "gpipe N=4 mpi_staged");
}

TEST(CudaPipeline, FewerMicroBatchesThanStagesOnTheStagedTransport) {
  PT_REQUIRE_GPU_ON_EVERY_RANK(MPI_COMM_WORLD);
  if (test::world_size() < 2) GTEST_SKIP() << "N < P needs P >= 2 ranks";
  for (const char* schedule : {"1f1b", "gpipe"}) {
    Deck deck = gpu_deck();
    deck.pipeline.micro_batches = 1;
    deck.pipeline.schedule = kind_named<ScheduleKind>(schedule);
    deck.pipeline.transport = TransportKind::MpiStaged;
    expect_pipelined_equals_one_rank(deck, std::string(schedule) + " N=1 mpi_staged");
  }
}

// Host copies of every tensor a checkpoint holds (values, optimizer states).
std::vector<Tensor> checkpointed(const std::vector<Param*>& params) {
  std::vector<Tensor> out;
  for (Param* p : params)
    for (const Tensor* t : {&p->value, &p->state1, &p->state2})
      if (t->defined()) out.push_back(t->to(Device::CPU, MemCategory::Workspace));
  return out;
}

// pipeline.check_messages on the GPU (#44): the envelopes' checksums are
// computed on the device; checked training is bitwise unchecked training,
// and every rank verified messages.
TEST(CudaPipeline, CheckedMessagesChangeNoBit) {
  PT_REQUIRE_GPU_ON_EVERY_RANK(MPI_COMM_WORLD);
  if (test::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Deck deck = gpu_deck();
  const Trained plain = train(deck, MPI_COMM_WORLD);
  deck.pipeline.check_messages = true;
  const int64_t before = message_check_counts().verified;
  const Trained checked = train(deck, MPI_COMM_WORLD);
  EXPECT_GT(message_check_counts().verified, before);
  if (test::world_rank() != 0) return;
  ASSERT_EQ(plain.losses.size(), checked.losses.size());
  for (size_t s = 0; s < plain.losses.size(); ++s)
    EXPECT_EQ(std::memcmp(&plain.losses[s], &checked.losses[s], sizeof(double)), 0) << "step " << s;
  test::expect_named_close(checked.grads, plain.grads, 0.0, "checked vs unchecked");
}

TEST(CudaPipeline, CheckpointOfDeviceTensorsRestoresEveryBit) {
  PT_REQUIRE_GPU_ON_EVERY_RANK(MPI_COMM_WORLD);
  if (test::world_rank() != 0) return;  // one stage, on MPI_COMM_SELF
  char dir[] = "/tmp/pt_cuda_ckpt_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Deck deck = gpu_deck();
  deck.training.optimizer = OptimizerKind::AdamW;  // two moments per parameter to restore
  deck.output.checkpoint_dir = dir;
  const std::string text = deck_to_toml(deck);
  ComputeResources compute = make_compute_resources(deck, MPI_COMM_SELF);
  Trainer trainer(deck, MPI_COMM_SELF, compute.setup);
  trainer.train_step(0);  // AdamW moments are non-zero now
  const std::vector<Param*> params = trainer.params();
  ASSERT_FALSE(params.empty());
  ASSERT_EQ(params[0]->value.device(), Device::CUDA);
  const std::vector<Tensor> saved = checkpointed(params);
  const CheckpointWrite w = save_checkpoint(deck, text, params, 1, MPI_COMM_SELF);
  for (Param* p : params)  // overwrite everything on the device
    for (Tensor* t : {&p->value, &p->state1, &p->state2})
      if (t->defined()) compute.backend->fill(*t, 0.125f);
  const CheckpointRead r = load_checkpoint(w.path, LoadMode::Resume, deck, text, params,
                                           MPI_COMM_SELF);
  EXPECT_EQ(r.step, 1);
  const std::vector<Tensor> loaded = checkpointed(params);
  ASSERT_EQ(loaded.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i)
    EXPECT_EQ(std::memcmp(loaded[i].raw(), saved[i].raw(), saved[i].bytes()), 0) << "tensor " << i;
  EXPECT_EQ(params[0]->value.device(), Device::CUDA) << "loading moved a parameter off the GPU";
  wait_for_checkpoint_pruning();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pt
