// test_vocab_padding.cpp: a GPT whose vocabulary is padded for aligned GEMMs
// (model.vocab_multiple, GptDims::padded_vocab):
//   - the loss kernel over the first `classes` columns of wider rows gives
//     bitwise the loss and real-column gradient of the kernel on the real
//     columns alone, and exact zeros in the padding, whatever the padded
//     logits hold (our own loops: bitwise is the contract);
//   - the padded rows of embed.wte and head.lm_head start at zero and the
//     real rows are the unpadded model's, bit for bit;
//   - a padded run pipelined on every rank of the world is bitwise the same
//     run on one process;
//   - padded and unpadded runs agree within fp32 rounding (not bitwise: the
//     LM head's GEMMs have another N, and BLAS may pick another kernel for
//     it), and after several AdamW steps with weight decay the padded rows
//     are still exactly zero.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bitwise.hpp"
#include "mpi_test_util.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

using test::RunResult;
using test::same_bits;
using test::world_rank;
using test::world_size;

constexpr int64_t kVocab = 11;     // V
constexpr int64_t kMultiple = 8;   // Vp = 16
constexpr int64_t kWidth = 12;     // C

Tensor host_tensor(const Shape& shape, DType dtype = DType::F32) {
  return Tensor::empty(shape, dtype, MemCategory::Workspace, Device::CPU);
}

// (rows, width) logits whose first `classes` columns are those of `real`
// (rows, classes) and whose padding holds `pad`.
Tensor padded_copy(const Tensor& real, int64_t width, float pad) {
  const int64_t rows = real.rows(), classes = real.cols();
  Tensor out = host_tensor({rows, width});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      out.f32()[r * width + j] = j < classes ? real.f32()[r * classes + j] : pad;
  return out;
}

// The loss and every real column's gradient are the unpadded kernel's bits,
// the padded columns' gradient +0, for padding that would dominate the
// softmax if it were counted (a large value) or poison it (NaN).
TEST(VocabPadding, LossKernelIgnoresThePaddedColumnsBitwise) {
  const int64_t rows = 7, width = 16;
  Tensor real = host_tensor({rows, kVocab});
  for (int64_t i = 0; i < real.numel(); ++i) real.f32()[i] = 3.f * std::sin(0.7f * i + 0.3f);
  Tensor labels = host_tensor({rows}, DType::I32);
  for (int64_t r = 0; r < rows; ++r) labels.i32()[r] = static_cast<int32_t>((r * 5) % kVocab);
  Tensor dreal = host_tensor(real.shape());
  const double want = cpu_backend().softmax_cross_entropy(real, labels, 0.25f, dreal);
  for (float pad : {100.f, std::nanf("")}) {
    const Tensor logits = padded_copy(real, width, pad);
    Tensor d = host_tensor(logits.shape());
    std::fill(d.f32(), d.f32() + d.numel(), 7.f);  // every element must be written
    const double got = cpu_backend().softmax_cross_entropy(logits, labels, kVocab, 0.25f, d);
    EXPECT_TRUE(same_bits(got, want)) << "pad " << pad << ": " << got << " vs " << want;
    std::unique_ptr<ScalarBatch> batch = cpu_backend().make_scalar_batch(1);
    cpu_backend().softmax_cross_entropy_to(logits, labels, kVocab, 0.25f, d, *batch, 0);
    EXPECT_TRUE(same_bits(batch->read()[0], want)) << "pad " << pad << ", deferred form";
    EXPECT_TRUE(same_bits(padded_copy(dreal, width, 0.f), d)) << "pad " << pad << ": dlogits";
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = kVocab; j < width; ++j)
        EXPECT_FALSE(std::signbit(d.f32()[r * width + j])) << "row " << r << " column " << j;
  }
}

GptDims dims(int64_t multiple) {
  GptDims g;
  g.vocab_size = kVocab;
  g.vocab_multiple = multiple;
  g.seq_len = 8;
  g.d_model = kWidth;
  g.heads = 3;
  g.blocks = 2;
  g.mlp_ratio = 2;
  return g;
}

Deck gpt_deck(int64_t multiple) {
  Deck d;
  d.model.type = "gpt";
  d.model.gpt = dims(multiple);
  d.data.type = DataKind::Markov;
  d.data.markov_order = 1;
  d.training.steps = 6;
  d.training.batch_size = 8;
  d.training.optimizer = OptimizerKind::AdamW;
  d.training.lr = 3e-3;
  d.training.weight_decay = 0.1;  // decay of a zero row is zero
  d.training.grad_clip = 1.0;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = ScheduleKind::OneFOneB;
  d.pipeline.timeout_s = 60;
  return d;
}

// The parameter `name` of a one-stage model built from `deck`.
std::vector<float> param_values(const Deck& deck, const std::string& name) {
  StageModel stage = build_stage(deck.model, {deck.model.gpt.blocks}, 0);
  for (Param* p : stage.params())
    if (p->name == name) return std::vector<float>(p->value.f32(), p->value.f32() + p->value.numel());
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

TEST(VocabPadding, PaddedRowsStartAtZeroAndRealRowsAreTheUnpaddedOnes) {
  if (world_rank() != 0) return;
  EXPECT_EQ(dims(kMultiple).padded_vocab(), 16);
  EXPECT_EQ(dims(1).padded_vocab(), kVocab);
  EXPECT_EQ(dims(11).padded_vocab(), kVocab);  // already a multiple
  for (const char* name : {"embed.wte", "head.lm_head.weight"}) {
    const std::vector<float> padded = param_values(gpt_deck(kMultiple), name);
    const std::vector<float> plain = param_values(gpt_deck(1), name);
    ASSERT_EQ(padded.size(), static_cast<size_t>(16 * kWidth)) << name;
    ASSERT_EQ(plain.size(), static_cast<size_t>(kVocab * kWidth)) << name;
    EXPECT_EQ(test::bitwise_differences(padded, plain), 0u) << name << ": real rows";
    for (size_t i = plain.size(); i < padded.size(); ++i) ASSERT_EQ(padded[i], 0.f) << name << " " << i;
  }
}

TEST(VocabPadding, PipelinedRunIsBitwiseOneProcess) {
  RunResult alone;
  if (world_rank() == 0) alone = test::train_alone(gpt_deck(kMultiple));
  const RunResult got = test::train_on(gpt_deck(kMultiple), world_size());
  if (world_rank() == 0) test::expect_bitwise(got, alone, "padded vocabulary", true);
}

// In the gathered parameters (embed.wte first, head.lm_head.weight last)
// the padded model's values at the unpadded model's positions, and the
// padded rows' values.
struct Split {
  std::vector<float> real, padding;
};

Split split_padded(const std::vector<float>& params) {
  const size_t rows = static_cast<size_t>(16 - kVocab) * kWidth, table = 16 * kWidth;
  const size_t wte_real = kVocab * kWidth;
  Split s;
  s.real.assign(params.begin(), params.begin() + wte_real);
  s.padding.assign(params.begin() + wte_real, params.begin() + table);
  s.real.insert(s.real.end(), params.begin() + table, params.end() - rows);
  s.padding.insert(s.padding.end(), params.end() - rows, params.end());
  return s;
}

// Tolerance: the losses of 6 AdamW steps within 1e-5 relative, the
// parameters within 1e-5 absolute (fp32 rounding of another GEMM kernel,
// carried through the steps, is ~1e-7 here).
TEST(VocabPadding, MatchesTheUnpaddedRunAndThePaddingStaysZero) {
  const RunResult plain = test::train_on(gpt_deck(1), world_size());
  const RunResult padded = test::train_on(gpt_deck(kMultiple), world_size());
  if (world_rank() != 0) return;
  ASSERT_EQ(padded.losses.size(), plain.losses.size());
  for (size_t s = 0; s < plain.losses.size(); ++s) {
    const double rel = std::fabs(padded.losses[s] - plain.losses[s]) / plain.losses[s];
    std::printf("  step %zu: padded %.9f unpadded %.9f relative difference %.2e\n", s,
                padded.losses[s], plain.losses[s], rel);
    EXPECT_LE(rel, 1e-5) << "step " << s;
  }
  const Split split = split_padded(padded.params);
  ASSERT_EQ(split.real.size(), plain.params.size());
  double worst = 0.0;
  for (size_t i = 0; i < plain.params.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(split.real[i] - plain.params[i])));
  std::printf("  parameters after %zu steps: max |padded - unpadded| %.3e\n", plain.losses.size(), worst);
  EXPECT_LE(worst, 1e-5);
  for (size_t i = 0; i < split.padding.size(); ++i) ASSERT_EQ(split.padding[i], 0.f) << "padded element " << i;
}

}  // namespace
}  // namespace pt
