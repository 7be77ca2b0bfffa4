// test_device_scalars.cpp: a step's scalar results stay on the device until
// one read (#42): the micro-batch losses come back in one ScalarBatch read
// on the last stage, every parameter's sum of squares in one read for the
// gradient norm, and the fp16 overflow check in one read, with no immediate
// (synchronising) loss or reduction kernel left in a training step. A
// counting backend, which computes on the CPU, proves it by its counters; the
// losses and norms are bitwise those of the CPU backend itself.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <vector>

#include "error_of.hpp"
#include "forwarding_backend.hpp"
#include "mpi_test_util.hpp"
#include "pipetrain/model/loss_scaler.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "test_decks.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

struct Counts {
  int immediate = 0;  // sum_squares, all_finite, mse_loss, softmax_cross_entropy returning at once
  int slots_written = 0;
  int reads = 0;
  int batches_made = 0;
};

// A batch in host memory that counts its reads.
class CountingBatch final : public ScalarBatch {
 public:
  CountingBatch(int64_t size, Counts& counts)
      : ScalarBatch(size), values(static_cast<size_t>(size)), counts_(counts) {}
  std::vector<double> read() override {
    ++counts_.reads;
    return values;
  }
  std::vector<double> values;  // (size)

 private:
  Counts& counts_;
};

// Computes on the CPU backend (its kernel groups too), counting the
// immediate scalar kernels, the slots written and the batch reads.
class CountingBackend final : public test::ForwardingBackend {
 public:
  Counts counts;
  const char* name() const override { return "counting"; }
  KernelGroup* kernel_group(const std::string& group) override { return target_.kernel_group(group); }
  std::unique_ptr<ScalarBatch> make_scalar_batch(int64_t size) override {
    ++counts.batches_made;
    return std::make_unique<CountingBatch>(size, counts);
  }

 protected:
  double do_sum_squares(const Tensor& x) override { return ++counts.immediate, target_.sum_squares(x); }
  bool do_all_finite(const Tensor& x) override { return ++counts.immediate, target_.all_finite(x); }
  double do_mse_loss(const Tensor& p, const Tensor& t, float s, Tensor& dp) override {
    return ++counts.immediate, target_.mse_loss(p, t, s, dp);
  }
  double do_softmax_cross_entropy(const Tensor& l, const Tensor& y, int64_t classes, float s,
                                  Tensor& dl) override {
    return ++counts.immediate, target_.softmax_cross_entropy(l, y, classes, s, dl);
  }
  void do_sum_squares_to(const Tensor& x, ScalarBatch& b, int64_t slot) override {
    write(b, slot, target_.sum_squares(x));
  }
  void do_nonfinite_to(const Tensor& x, ScalarBatch& b, int64_t slot) override {
    write(b, slot, target_.all_finite(x) ? 0.0 : 1.0);
  }
  void do_mse_loss_to(const Tensor& p, const Tensor& t, float s, Tensor& dp, ScalarBatch& b,
                      int64_t slot) override {
    write(b, slot, target_.mse_loss(p, t, s, dp));
  }
  void do_softmax_cross_entropy_to(const Tensor& l, const Tensor& y, int64_t classes, float s,
                                   Tensor& dl, ScalarBatch& b, int64_t slot) override {
    write(b, slot, target_.softmax_cross_entropy(l, y, classes, s, dl));
  }

 private:
  void write(ScalarBatch& b, int64_t slot, double v) {
    ++counts.slots_written;
    dynamic_cast<CountingBatch&>(b).values.at(static_cast<size_t>(slot)) = v;
  }
};

void check_one_read_per_result(const Deck& deck, const char* what) {
  const int size = test::world_size(), rank = test::world_rank();
  CountingBackend be;
  ComputeSetup setup;
  setup.backend = &be;
  Trainer counted(deck, MPI_COMM_WORLD, setup);
  Trainer plain(deck, MPI_COMM_WORLD);
  const bool last = rank == size - 1;
  for (int64_t step = 0; step < deck.training.steps; ++step) {
    be.counts = Counts();
    const StepRecord got = counted.train_step(step);
    const StepRecord want = plain.train_step(step);
    EXPECT_EQ(be.counts.immediate, 0) << what << " step " << step << ": a synchronising kernel";
    EXPECT_EQ(be.counts.reads, last ? 2 : 1)
        << what << " step " << step << " rank " << rank
        << ": one read of the losses (last stage) and one of the sums of squares";
    EXPECT_GT(be.counts.slots_written, last ? deck.pipeline.micro_batches : 0) << what;
    EXPECT_TRUE(test::same_bits(got.loss, want.loss)) << what << " loss of step " << step;
    EXPECT_TRUE(test::same_bits(got.grad_norm, want.grad_norm)) << what << " norm of step " << step;
  }
}

TEST(DeviceScalars, AGptStepReadsItsLossesAndItsNormOnceEach) {
  Deck d = pt_test::tiny_gpt(pt_test::tiny_mlp(16), 4);
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = ScheduleKind::OneFOneB;
  check_one_read_per_result(d, "gpt 1f1b");
}

TEST(DeviceScalars, AnMlpStepWithSplitBackwardDoesTheSame) {
  Deck d = pt_test::tiny_mlp(16);
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = ScheduleKind::ZbH1;
  check_one_read_per_result(d, "mlp zb-h1");
}

TEST(DeviceScalars, TheCpuBatchHoldsTheImmediateResultsAndChecksItsSlots) {
  Backend& be = cpu_backend();
  Tensor x = Tensor::empty({3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.1f * static_cast<float>(i);
  std::unique_ptr<ScalarBatch> batch = be.make_scalar_batch(2);
  be.sum_squares_to(x, *batch, 1);
  const std::vector<double> got = batch->read();
  EXPECT_EQ(got[0], 0.0);  // never written
  EXPECT_TRUE(test::same_bits(got[1], be.sum_squares(x)));
  const std::string refused = test::error_of<Error>([&] { be.sum_squares_to(x, *batch, 2); });
  EXPECT_NE(refused.find("sum_squares_to: slot 2 of a batch of 2"), std::string::npos) << refused;
}

// `count` parameters whose (4, 5) gradients are all 0.5.
struct FiniteGrads {
  std::vector<std::unique_ptr<Param>> owned;
  std::vector<Param*> params;

  explicit FiniteGrads(int count) {
    for (int i = 0; i < count; ++i) {
      owned.push_back(std::make_unique<Param>());
      owned.back()->name = "p" + std::to_string(i);
      owned.back()->grad = Tensor::empty({4, 5});
      cpu_backend().fill(owned.back()->grad, 0.5f);
      params.push_back(owned.back().get());
    }
  }
};

TEST(DeviceScalars, TheOverflowCheckReadsEveryGradientOnce) {
  CountingBackend be;
  FiniteGrads grads(3);
  std::vector<Param*>& params = grads.params;
  LossScaler scaler;
  EXPECT_TRUE(scaler.grads_finite(be, params));
  params[1]->grad.f32()[7] = INFINITY;
  EXPECT_FALSE(scaler.grads_finite(be, params));
  EXPECT_EQ(be.counts.reads, 2);
  EXPECT_EQ(be.counts.slots_written, 6);
  EXPECT_EQ(be.counts.immediate, 0);
}

// The scaler keeps its batch of counts from step to step: one batch for
// every check with the same parameters, whose every slot each check writes
// again (an overflow does not stay behind), and a new one for another count.
TEST(DeviceScalars, TheOverflowCheckKeepsItsBatchAcrossSteps) {
  CountingBackend be;
  FiniteGrads grads(3);
  LossScaler scaler;
  grads.params[2]->grad.f32()[0] = INFINITY;
  EXPECT_FALSE(scaler.grads_finite(be, grads.params));
  cpu_backend().fill(grads.params[2]->grad, 0.5f);
  EXPECT_TRUE(scaler.grads_finite(be, grads.params));
  EXPECT_TRUE(scaler.grads_finite(be, grads.params));
  EXPECT_EQ(be.counts.batches_made, 1);
  EXPECT_EQ(be.counts.reads, 3);
  FiniteGrads fewer(2);
  fewer.params[1]->grad.f32()[3] = NAN;
  EXPECT_FALSE(scaler.grads_finite(be, fewer.params));
  EXPECT_EQ(be.counts.batches_made, 2);
}

}  // namespace
}  // namespace pt
