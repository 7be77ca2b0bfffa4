// test_decks.hpp: the tiny MLP and GPT the equivalence, checkpoint and
// rebalancing tests train: the MLP (8 GELU layers 12 -> 24 -> 5, AdamW with
// warm-up, weight decay and clipping, 3 steps), and the GPT (a 16-token vocabulary, 8 tokens, width 16, 2 heads, Markov
// tokens), made from a test's own MLP deck so that its training settings
// (optimizer, schedule, micro-batches, clipping) carry over; and the small
// GPT of the GPU tests.
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/base/deck.hpp"

namespace pt_test {

// The tiny MLP, `batch` samples per step. Clipping is on, so the global
// gradient norm must agree bitwise too.
inline pt::Deck tiny_mlp(int64_t batch) {
  pt::Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 8;
  d.model.activation = pt::ActivationKind::Gelu;
  d.data.samples = 256;
  d.training.steps = 3;
  d.training.batch_size = batch;
  d.training.optimizer = pt::OptimizerKind::AdamW;
  d.training.lr = 1e-2;
  d.training.warmup_steps = 1;
  d.training.weight_decay = 0.01;
  d.training.grad_clip = 0.5;
  d.training.blas_threads = 1;
  d.pipeline.timeout_s = 60;
  return d;
}

// `d` becomes the tiny GPT with `blocks` blocks; everything else is kept.
inline pt::Deck tiny_gpt(pt::Deck d, int64_t blocks) {
  d.model.type = "gpt";
  d.model.mlp.loss = pt::LossKind::CrossEntropy;
  d.model.gpt.vocab_size = 16;
  d.model.gpt.seq_len = 8;
  d.model.gpt.d_model = 16;
  d.model.gpt.heads = 2;
  d.model.gpt.blocks = blocks;
  d.model.gpt.mlp_ratio = 2;
  d.data.type = pt::DataKind::Markov;
  d.data.markov_order = 1;
  d.data.concentration = 0.3;
  return d;
}

// The small GPT of the GPU tests (test_cuda_features, test_cuda_pipeline)
// on `device`: vocabulary 32, 16 tokens, width 32, 2 heads, 4 blocks,
// 8 sequences a step in 4 micro-batches, SGD (lr 0.1), one BLAS thread.
inline pt::Deck small_gpu_gpt(const std::string& device) {
  pt::Deck d;
  d.model.type = "gpt";
  d.model.gpt.vocab_size = 32;
  d.model.gpt.seq_len = 16;
  d.model.gpt.d_model = 32;
  d.model.gpt.heads = 2;
  d.model.gpt.blocks = 4;
  d.model.gpt.mlp_ratio = 2;
  d.data.type = pt::DataKind::Markov;
  d.data.markov_order = 1;
  d.training.batch_size = 8;
  d.training.optimizer = pt::OptimizerKind::Sgd;
  d.training.lr = 0.1;
  d.training.blas_threads = 1;
  d.training.device = pt::kind_named<pt::DeviceKind>(device);
  d.pipeline.micro_batches = 4;
  d.pipeline.timeout_s = 60;
  return d;
}

}  // namespace pt_test
