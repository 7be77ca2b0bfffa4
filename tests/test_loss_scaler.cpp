// test_loss_scaler.cpp: dynamic loss scaling on the CPU backend: the
// growth / backoff schedule and its bounds, unscaled gradients equal to
// unscaled training bit for bit (powers of two), an injected inf or NaN
// skipping the step on every rank, and growth again after the interval.
// Runs under mpirun (1 and 2 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "pipetrain/model/layers.hpp"
#include "pipetrain/model/loss_scaler.hpp"
#include "pipetrain/base/rng.hpp"
#include "bitwise.hpp"

namespace pt {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal01(17, stream, i);
  return t;
}

// One linear layer + MSE: forward and backward with the loss seed scaled by `scale`.
struct Tiny {
  std::unique_ptr<Layer> linear = make_linear("fc", 6, 4, 3, 1, 1.f);
  std::unique_ptr<Loss> loss = make_loss(LossKind::Mse);
  Tensor x = random_tensor({5, 6}, 1), target = random_tensor({5, 4}, 2);

  std::vector<Param*> params() { return linear->params(); }
  void zero_grads() {
    for (Param* p : params()) cpu_backend().fill(p->grad, 0.f);
  }
  void backward(float scale) {
    Backend& be = cpu_backend();
    std::vector<Tensor> saved;
    Tensor y = linear->forward(be, x, saved);
    Tensor dy = Tensor::empty(y.shape());
    loss->forward_backward(be, y, target, (1.f / 20.f) * scale, dy);
    linear->backward(be, x, saved, dy, false);
  }
};

using test::same_bits;

TEST(LossScaler, GrowsAfterIntervalAndBacksOffOnOverflow) {
  LossScalerConfig cfg;
  cfg.initial_scale = 1024;
  cfg.growth_interval = 3;
  LossScaler s(cfg);
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_TRUE(s.update(true));  // third finite step in a row: grow
  EXPECT_EQ(s.scale(), 2048.f);
  EXPECT_EQ(s.finite_run(), 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // overflow: skip, back off, restart the run
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_EQ(s.finite_run(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, StaysWithinBounds) {
  LossScalerConfig cfg;
  cfg.initial_scale = 4;
  cfg.min_scale = 2;
  cfg.max_scale = 8;
  cfg.growth_interval = 1;
  LossScaler s(cfg);
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 2.f);
  EXPECT_EQ(s.skipped_steps(), 5);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 8.f);
}

TEST(LossScaler, UnscaledGradientsEqualUnscaledTraining) {
  Tiny ref, scaled;
  ref.backward(1.f);
  LossScaler scaler;  // 2^16
  scaled.backward(scaler.scale());
  EXPECT_TRUE(scaler.finish_backward(cpu_backend(), scaled.params(), MPI_COMM_WORLD));
  for (size_t i = 0; i < ref.params().size(); ++i)
    EXPECT_TRUE(same_bits(ref.params()[i]->grad, scaled.params()[i]->grad))
        << ref.params()[i]->name;
}

TEST(LossScaler, InjectedInfSkipsTheStepOnEveryRank) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  LossScalerConfig cfg;
  cfg.growth_interval = 2;
  LossScaler scaler(cfg);
  Tiny t;
  const float before = scaler.scale();
  t.backward(scaler.scale());
  // Only the last rank sees the overflow; every rank must skip.
  if (rank == size - 1) t.params()[0]->grad.f32()[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.finish_backward(cpu_backend(), t.params(), MPI_COMM_WORLD));
  EXPECT_EQ(scaler.scale(), before / 2);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // A NaN counts too.
  t.zero_grads();
  t.backward(scaler.scale());
  if (rank == 0) t.params()[1]->grad.f32()[0] = std::nanf("");
  EXPECT_FALSE(scaler.finish_backward(cpu_backend(), t.params(), MPI_COMM_WORLD));
  EXPECT_EQ(scaler.scale(), before / 4);
  // Finite steps again: the scale grows back after the interval.
  for (int step = 0; step < 4; ++step) {
    t.zero_grads();
    t.backward(scaler.scale());
    EXPECT_TRUE(scaler.finish_backward(cpu_backend(), t.params(), MPI_COMM_WORLD));
  }
  EXPECT_EQ(scaler.scale(), before);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(LossScaler, GradsFiniteChecksEveryParameter) {
  Tiny t;
  t.backward(1.f);
  LossScaler scaler;
  EXPECT_TRUE(scaler.grads_finite(cpu_backend(), t.params()));
  t.params().back()->grad.f32()[0] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.grads_finite(cpu_backend(), t.params()));
}

}  // namespace
}  // namespace pt
