// test_cuda_pipeline.cpp: the pipelined GPU run against P = 1 and against the
// CPU backend (CUDA builds only; skips without a GPU).
//
// A tiny GPT trains 3 steps with training.device = "cuda" (fp32, no TF32) on
// the world's ranks (2 ranks on one GPU use the host-staged transport) and on
// rank 0 alone; the parameters must agree to 1e-5 relative (same N, so the
// same arithmetic: cuBLAS is deterministic for fixed shapes, so in practice
// they are bitwise equal; the tolerance leaves room for library heuristics).
// The GPU result is also compared with the CPU backend's (fp32 rounding
// differs: 1e-3 relative).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt {
namespace {

Deck gpu_deck() {
  Deck d;
  d.model.type = "gpt";
  d.model.vocab_size = 32;
  d.model.seq_len = 16;
  d.model.d_model = 32;
  d.model.heads = 2;
  d.model.blocks = 4;
  d.model.mlp_ratio = 2;
  d.data.type = "markov";
  d.data.markov_order = 1;
  d.training.steps = 3;
  d.training.batch_size = 8;
  d.training.lr = 1e-3;
  d.training.blas_threads = 1;
  d.training.device = "cuda";
  d.training.precision = "fp32";
  d.pipeline.micro_batches = 4;
  d.pipeline.transport = "auto";
  return d;
}

std::vector<float> train(const Deck& deck, MPI_Comm comm) {
  ComputeResources compute = make_compute_resources(deck, comm);
  Trainer trainer(deck, comm, compute.setup);
  for (int64_t s = 0; s < deck.training.steps; ++s) trainer.train_step(s);
  return trainer.gather_parameters();
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::max(1e-2, std::fabs(double(b[i]))));
  return worst;
}

TEST(CudaPipeline, PipelinedGpuRunMatchesOneRankAndTheCpu) {
  std::string why;
  if (cuda::device_count(&why) <= 0) GTEST_SKIP() << "no CUDA device: " << why;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Deck deck = gpu_deck();
  const std::vector<float> piped = train(deck, MPI_COMM_WORLD);
  if (rank != 0) return;
  const std::vector<float> alone = train(deck, MPI_COMM_SELF);
  Deck cpu = deck;
  cpu.training.device = "cpu";
  const std::vector<float> on_cpu = train(cpu, MPI_COMM_SELF);
  ASSERT_EQ(piped.size(), alone.size());
  const double vs_alone = max_rel(piped, alone), vs_cpu = max_rel(alone, on_cpu);
  std::printf("  GPU pipelined vs GPU P=1: max rel diff %.3e; GPU vs CPU: %.3e\n", vs_alone, vs_cpu);
  EXPECT_LE(vs_alone, 1e-5);
  EXPECT_LE(vs_cpu, 1e-3);
}

}  // namespace
}  // namespace pt
